package maint

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Logging. Every line maint logs is a structured slog record whose message
// is stable ("maint: handoff", "maint: handoff report", ...) and whose
// attributes use stable keys:
//
//	kind          the Event kind ("handoff", "relax-on", ...)
//	node          the node's address
//	seq           the notification's sequence id
//	count         connections concerned
//	notification  the push name (MOVING, MIGRATING, ...)
//	window        a MOVING's window
//	successor     the address a MOVING named, or where a replacement was found
//	duration      how long something took
//	detail        free text
//
// and, on the report, the HandoffReport's fields (see reportAttrs). Levels:
// Info for what an operator follows during a normal maintenance (a MOVING
// starting a handoff, its report, a node's relaxation starting and ending:
// a few lines per handoff), Warn for bad input and configurations that
// switch part of maint off, Debug for everything per connection or per
// command (each copy of a notification, retired connections, the held
// commands' summary, which the report repeats).
//
// Config.Logger receives the records; without one, Config.Logf receives
// each Info-or-above record formatted as one line; without either, they go
// to slog.Default().

// logfHandler formats slog records as "msg key=value ..." lines for a
// printf-style logger (Config.Logf). It drops Debug records.
type logfHandler struct {
	f      func(format string, args ...any)
	attrs  []slog.Attr
	prefix string // group prefix, with its trailing dot
}

func (h *logfHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *logfHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	for _, a := range h.attrs {
		writeAttr(&b, "", a)
	}
	r.Attrs(func(a slog.Attr) bool {
		writeAttr(&b, h.prefix, a)
		return true
	})
	// The line is the format (escaped), so that a Logf that looks only at
	// its format sees the text.
	h.f(strings.ReplaceAll(b.String(), "%", "%%"))
	return nil
}

func writeAttr(b *strings.Builder, prefix string, a slog.Attr) {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return
	}
	if a.Value.Kind() == slog.KindGroup {
		for _, g := range a.Value.Group() {
			writeAttr(b, prefix+a.Key+".", g)
		}
		return
	}
	b.WriteByte(' ')
	b.WriteString(prefix)
	b.WriteString(a.Key)
	b.WriteByte('=')
	s := a.Value.String()
	if a.Value.Kind() == slog.KindTime {
		s = a.Value.Time().Format(time.RFC3339Nano)
	}
	if s == "" || strings.ContainsAny(s, " \"=") {
		s = fmt.Sprintf("%q", s)
	}
	b.WriteString(s)
}

func (h *logfHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), prefixed(h.prefix, as)...)
	return &c
}

func (h *logfHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.prefix = h.prefix + name + "."
	return &c
}

func prefixed(prefix string, as []slog.Attr) []slog.Attr {
	if prefix == "" {
		return as
	}
	out := make([]slog.Attr, len(as))
	for i, a := range as {
		out[i] = slog.Attr{Key: prefix + a.Key, Value: a.Value}
	}
	return out
}

// logger returns the logger a Config asks for (see the Logging comment).
func (c Config) logger() *slog.Logger {
	switch {
	case c.Logger != nil:
		return c.Logger
	case c.Logf != nil:
		return slog.New(&logfHandler{f: c.Logf})
	default:
		return slog.Default()
	}
}

// eventMessages are the stable messages events are logged with.
var eventMessages = [...]string{
	EventNotification:     "maint: notification read",
	EventMalformed:        "maint: notification ignored as malformed",
	EventHandoff:          "maint: handoff started",
	EventRetire:           "maint: connections retired",
	EventHold:             "maint: commands held",
	EventRelease:          "maint: held commands released",
	EventDrainCap:         "maint: drain cap passed, connections closed",
	EventDoomed:           "maint: new connection landed on the retiring node, discarded",
	EventReplacement:      "maint: replacement found",
	EventHandoffDone:      "maint: handoff done",
	EventRelax:            "maint: operation opened, timeouts relaxed",
	EventRelaxEnd:         "maint: operation completed",
	EventUnsupported:      "maint: endpoint does not support maintenance notifications",
	EventSuccessorRefused: "maint: MOVING successor refused, treated as null",
	EventMisuse:           "maint: misuse",
	EventReplayed:         "maint: notification copy changed nothing",
	EventRelaxOn:          "maint: node relaxed",
	EventRelaxOff:         "maint: node relaxation ended",
	EventHeld:             "maint: commands were held",
	EventHandoffReport:    "maint: handoff report",
	EventConnClosed:       "maint: connection out of circulation closed",
	EventError:            "maint: error",
}

// levelOf is the level an event is logged at.
func levelOf(k EventKind) slog.Level {
	switch k {
	case EventHandoff, EventHandoffReport, EventRelaxOn, EventRelaxOff:
		return slog.LevelInfo
	case EventMalformed, EventUnsupported, EventSuccessorRefused, EventMisuse:
		return slog.LevelWarn
	default:
		return slog.LevelDebug
	}
}

// logEvent logs e at its kind's level; it costs one Enabled call when that
// level is off.
func (m *Maint) logEvent(e Event) {
	l := m.s.log
	lvl := levelOf(e.Kind)
	if e.Kind == EventUnsupported && !unsupportedSaid.first(e.Node) {
		lvl = slog.LevelDebug // said at Warn once for the process's life
	}
	ctx := context.Background()
	if !l.Enabled(ctx, lvl) {
		return
	}
	msg := "maint: " + e.Kind.String()
	if int(e.Kind) < len(eventMessages) && eventMessages[e.Kind] != "" {
		msg = eventMessages[e.Kind]
	}
	as := make([]slog.Attr, 0, 16)
	as = append(as, slog.String("kind", e.Kind.String()))
	if e.Node != "" {
		as = append(as, slog.String("node", e.Node))
	}
	if e.Seq != 0 {
		as = append(as, slog.Int64("seq", e.Seq))
	}
	if e.Count != 0 {
		as = append(as, slog.Int("count", e.Count))
	}
	if e.Name != "" {
		as = append(as, slog.String("notification", e.Name))
	}
	switch e.Kind {
	case EventHandoff:
		as = append(as, slog.Duration("window", e.Duration), slog.String("successor", e.Successor))
	case EventReplacement:
		as = append(as, slog.String("successor", e.Successor))
	case EventHandoffReport:
		if e.Report != nil {
			as = append(as, e.Report.attrs()...)
		}
	default:
		if e.Duration != 0 {
			as = append(as, slog.Duration("duration", e.Duration))
		}
	}
	if e.Detail != "" {
		as = append(as, slog.String("detail", e.Detail))
	}
	if e.Err != nil {
		as = append(as, slog.String("error", e.Err.Error()))
	}
	l.LogAttrs(ctx, lvl, msg, as...)
}

// warn logs a line that no event carries (a configuration maint corrects,
// a successor it cannot verify), with stable keys.
func (m *Maint) warn(msg string, args ...any) { m.s.log.Warn("maint: "+msg, args...) }

// logf logs a printf-formatted line at Warn, unstructured: kept for call
// sites not converted to structured records yet.
func (m *Maint) logf(format string, args ...any) { m.s.logf(format, args...) }

// unsupportedSaid is the endpoints whose refusal of the opt-in (an OSS
// Redis, a Valkey, a proxy without support) was logged at Warn: once per
// endpoint for the process's life, whichever Maint or client met it, and
// at Debug after that (each refusal is still an event and counted in
// Stats.Unsupported). Before, a Warn came once per endpoint per
// HandshakeRetry for as long as connections churned.
var unsupportedSaid = saidSet{max: 4096}

// saidSet remembers up to max keys; once full, every key is new again (a
// process that meets more endpoints than that is told at Warn, never
// silently).
type saidSet struct {
	mu   sync.Mutex
	keys map[string]struct{}
	max  int
}

// first reports whether key is new, and remembers it.
func (s *saidSet) first(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.keys[key]; ok {
		return false
	}
	if s.keys == nil {
		s.keys = make(map[string]struct{})
	}
	if len(s.keys) < s.max {
		s.keys[key] = struct{}{}
	}
	return true
}

// forget empties the set (tests).
func (s *saidSet) forget() {
	s.mu.Lock()
	s.keys = nil
	s.mu.Unlock()
}
