package main

import (
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/maintkit/maint"
)

// clientKind is one of the three clients the demo compares.
type clientKind int

const (
	// clientNone is go-redis with maintenance notifications off.
	clientNone clientKind = iota
	// clientBuiltin is go-redis's built-in maintnotifications handler.
	clientBuiltin
	// clientMaint is a default go-redis client with rdb.AddHook(maint.New()).
	clientMaint
)

var allClients = []clientKind{clientNone, clientBuiltin, clientMaint}

// String returns the name used by --clients and in JSON.
func (k clientKind) String() string {
	switch k {
	case clientNone:
		return "none"
	case clientBuiltin:
		return "builtin"
	case clientMaint:
		return "maint"
	}
	return fmt.Sprintf("client(%d)", int(k))
}

// title is the column heading of the text report.
func (k clientKind) title() string {
	switch k {
	case clientNone:
		return "no handler"
	case clientBuiltin:
		return "go-redis built-in"
	case clientMaint:
		return "maint"
	}
	return k.String()
}

// The two ways of installing maint (--maint-route).
const (
	routeAddHook   = "addhook"
	routeConfigure = "configure"
)

// parseClients resolves a comma-separated list of client names.
func parseClients(list string) ([]clientKind, error) {
	var out []clientKind
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "all" {
			return allClients, nil
		}
		found := false
		for _, k := range allClients {
			if k.String() == name {
				out = append(out, k)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown client %q (choose from none, builtin, maint, or all)", name)
		}
	}
	return out, nil
}

// newClient builds the client of kind k on database d. Everything but the
// maintenance handling is the same for the three: address, protocol, pool,
// timeouts, retries and the dialer (the emulator's DNS under a dial log).
// The returned Maint is nil unless k is clientMaint.
func newClient(k clientKind, d *database, s *settings, maxRetries int, logf func(string, ...any), onEvent func(maint.Event)) (*redis.Client, *maint.Maint) {
	opt := &redis.Options{
		Addr:         d.addr,
		Protocol:     3,
		PoolSize:     s.pool,
		MaxRetries:   maxRetries,
		Dialer:       d.dials.Dial,
		ReadTimeout:  s.readTimeout,
		WriteTimeout: s.readTimeout,
		PoolTimeout:  s.poolTimeout,
	}
	switch k {
	case clientNone:
		opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	case clientBuiltin:
		opt.MaintNotificationsConfig = &maintnotifications.Config{
			Mode:         maintnotifications.ModeEnabled,
			EndpointType: maintnotifications.EndpointTypeInternalIP,
		}
	case clientMaint:
		m := maint.New(maint.WithLogf(logf), maint.WithOnEvent(onEvent))
		if s.live != nil {
			m.Observe(s.live.observe) // --metrics-addr
		}
		if s.maintRoute == routeConfigure {
			// Configure, NewClient and AddHook: maint sends the handshake.
			return m.NewClient(opt), m
		}
		// The one-line integration, on a client left at go-redis's defaults
		// (maintenance notifications in auto mode).
		rdb := redis.NewClient(opt)
		rdb.AddHook(m)
		return rdb, m
	}
	return redis.NewClient(opt), nil
}
