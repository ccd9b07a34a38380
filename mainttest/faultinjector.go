package mainttest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// FaultInjectorConfig configures an emulated fault injector
// (Emulator.NewFaultInjector). Zero durations take the defaults in brackets,
// Redis Enterprise's timeline scaled down so that a run takes seconds.
type FaultInjectorConfig struct {
	// Addr is the loopback address the HTTP API listens on [127.0.0.1:0].
	Addr string
	// LeadTime is the time between a notification and the action it
	// announces: the "starts in" of MIGRATING and FAILING_OVER, and the
	// time a slot migration's SMIGRATING precedes its ownership change
	// [1s].
	LeadTime time.Duration
	// Phase is how long a migration or a failover runs once started, until
	// its MIGRATED or FAILED_OVER [1s].
	Phase time.Duration
	// MaintLatency is the extra latency of every command on the node from a
	// MIGRATING's or FAILING_OVER's start to its completion, and on a
	// slot migration's source from LeadTime after its SMIGRATING to its
	// SMIGRATED [0].
	MaintLatency time.Duration
	// MovingTTL is the window a bind's MOVING declares [4s]; Redis
	// Enterprise declares 15 s.
	MovingTTL time.Duration
	// CloseJitter is how long after the window the old node closes the
	// connections still on it [MovingTTL/20].
	CloseJitter time.Duration
	// DNSLag is how long after a bind's MOVING the database's DNS name
	// resolves to the new node [MovingTTL/2]. The dns_resolution_change
	// effect moves the name with the MOVING.
	DNSLag time.Duration
}

func (c FaultInjectorConfig) withDefaults() FaultInjectorConfig {
	if c.Addr == "" {
		c.Addr = "127.0.0.1:0"
	}
	if c.LeadTime <= 0 {
		c.LeadTime = time.Second
	}
	if c.Phase <= 0 {
		c.Phase = time.Second
	}
	if c.MovingTTL <= 0 {
		c.MovingTTL = 4 * time.Second
	}
	if c.CloseJitter <= 0 {
		c.CloseJitter = c.MovingTTL / 20
	}
	if c.DNSLag <= 0 {
		c.DNSLag = c.MovingTTL / 2
	}
	return c
}

// FaultDatabase is one database an emulated fault injector drives.
type FaultDatabase struct {
	// Name is its key in the endpoints file, such as "m-standard".
	Name string
	// BdbID is the id actions name it by (parameter bdb_id).
	BdbID int
	// Host is the DNS name clients connect to; the injector moves it
	// between Nodes. Standalone databases only.
	Host string
	// Nodes are the proxies of a standalone database, all on one port: the
	// name resolves to Nodes[0] at first and a bind moves it to the next.
	Nodes []*Endpoint
	// Cluster is the OSS Cluster API database that slot_migrate drives;
	// nil for a standalone database.
	Cluster *Cluster
}

// FaultInjector is an emulated Redis Enterprise fault injector: an HTTP
// server on loopback with the API the client libraries' scenario suites
// drive (POST /action {type, parameters}, GET /action/{id} until success or
// failed, GET /action, GET and POST /slot-migrate, GET
// /topology-change-standalone). Actions drive the Emulator's endpoints, DNS
// and Cluster the way the real service drives a cluster: a notification
// first, the action LeadTime later, the completion after Phase; a bind's
// MOVING, the DNS change DNSLag later, the old node's close at the window's
// end. While a MIGRATING, FAILING_OVER or SMIGRATING is open it is replayed
// to every connection that opts in (Endpoint.SetReplayActive), as a
// completion and an open MOVING window always are.
//
// Action types: migrate, bind, failover, sequence_of_actions (parameter
// actions: [{type, params, delay}], run in order), topology_change_standalone
// (effect data_movement_no_conn_drop, data_movement_conn_drop, conn_drop or
// dns_resolution_change), slot_migrate (effect slot-shuffle, remove, add
// or remove-add) and update_cluster_config (parameter config:
// {client_maint_notifications: bool}, for every database, no bdb_id). Any
// other type is refused with 422, as a validation error.
//
// With client_maint_notifications false every node of every database
// answers the opt-in as a server without support does (SetUnsupported),
// until it is set true again: a client connecting then receives no
// notification. Connections already opted in keep theirs.
type FaultInjector struct {
	e   *Emulator
	cfg FaultInjectorConfig
	ln  net.Listener
	srv *http.Server

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex // guards everything below
	dbs     map[int]*faultDB
	actions map[string]*faultAction
	order   []string
	nextID  int
}

type faultDB struct {
	FaultDatabase
	mu  sync.Mutex // serialises the database's actions
	cur int        // index of the node the name resolves to
}

type faultAction struct {
	id, typ   string
	submitted time.Time
	status    string // pending, running, success, failed
	errText   string
	output    map[string]any
	ended     time.Time
}

// NewFaultInjector starts an emulated fault injector for this Emulator;
// Close stops it (Emulator.Close does not).
func (e *Emulator) NewFaultInjector(cfg FaultInjectorConfig) (*FaultInjector, error) {
	cfg = cfg.withDefaults()
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("mainttest: fault injector listen: %w", err)
	}
	if ip := ln.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() {
		_ = ln.Close()
		return nil, fmt.Errorf("mainttest: fault injector address %s is not loopback", cfg.Addr)
	}
	ctx, cancel := context.WithCancel(context.Background())
	fi := &FaultInjector{e: e, cfg: cfg, ln: ln, ctx: ctx, cancel: cancel,
		dbs: map[int]*faultDB{}, actions: map[string]*faultAction{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /action", fi.handleList)
	mux.HandleFunc("POST /action", fi.handleTrigger)
	mux.HandleFunc("GET /action/{id}", fi.handleStatus)
	mux.HandleFunc("GET /slot-migrate", fi.handleTriggers(slotEffects))
	mux.HandleFunc("POST /slot-migrate", fi.handleSlotMigrateQuery)
	mux.HandleFunc("GET /topology-change-standalone", fi.handleTriggers(standaloneEffects))
	fi.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	fi.wg.Add(1)
	go func() {
		defer fi.wg.Done()
		_ = fi.srv.Serve(ln)
	}()
	return fi, nil
}

// URL returns the API's base URL, the value of FAULT_INJECTION_API_URL.
func (fi *FaultInjector) URL() string { return "http://" + fi.ln.Addr().String() }

// Config returns the configuration in force, defaults applied.
func (fi *FaultInjector) Config() FaultInjectorConfig { return fi.cfg }

// Close stops the HTTP server and every action still running (their
// status stays as it was); it is idempotent.
func (fi *FaultInjector) Close() error {
	fi.cancel()
	_ = fi.srv.Close()
	fi.wg.Wait()
	return nil
}

// AddDatabase registers a database. A standalone one needs Host and at
// least two Nodes on one port; its name is pointed at Nodes[0] and its
// nodes replay open maintenance to new connections.
func (fi *FaultInjector) AddDatabase(db FaultDatabase) error {
	if db.Cluster == nil {
		if db.Host == "" || len(db.Nodes) < 2 {
			return errors.New("mainttest: a standalone fault database needs Host and two Nodes")
		}
		for _, n := range db.Nodes[1:] {
			if n.Port() != db.Nodes[0].Port() {
				return errors.New("mainttest: a fault database's nodes share one port")
			}
		}
		fi.e.DNS().Set(db.Host, db.Nodes[0].IP())
		for _, n := range db.Nodes {
			n.SetReplayActive(true)
			if fi.cfg.MaintLatency > 0 {
				n.SetMaintLatency(fi.cfg.MaintLatency)
			}
		}
	} else {
		for _, n := range db.Cluster.Nodes() {
			n.SetReplayActive(true)
		}
	}
	fi.mu.Lock()
	defer fi.mu.Unlock()
	if _, dup := fi.dbs[db.BdbID]; dup {
		return fmt.Errorf("mainttest: fault database bdb_id %d added twice", db.BdbID)
	}
	fi.dbs[db.BdbID] = &faultDB{FaultDatabase: db}
	return nil
}

// Current returns the node a standalone database's name points at now
// (nil for an unknown id or a cluster database).
func (fi *FaultInjector) Current(bdbID int) *Endpoint {
	fi.mu.Lock()
	db := fi.dbs[bdbID]
	fi.mu.Unlock()
	if db == nil || db.Cluster != nil {
		return nil
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.Nodes[db.cur]
}

// EndpointsConfig returns the endpoints file of the registered databases
// in the format of REDIS_ENDPOINTS_CONFIG_PATH: a JSON object from database
// name to {bdb_id, username, password, tls, raw_endpoints, endpoints}.
func (fi *FaultInjector) EndpointsConfig() ([]byte, error) {
	type rawEndpoint struct {
		Addr                  []string `json:"addr"`
		AddrType              string   `json:"addr_type"`
		DNSName               string   `json:"dns_name"`
		PreferredEndpointType string   `json:"oss_cluster_api_preferred_endpoint_type"`
		PreferredIPType       string   `json:"oss_cluster_api_preferred_ip_type"`
		Port                  int      `json:"port"`
		ProxyPolicy           string   `json:"proxy_policy"`
		UID                   string   `json:"uid"`
	}
	type database struct {
		BdbID        int           `json:"bdb_id"`
		Username     string        `json:"username"`
		Password     string        `json:"password"`
		TLS          bool          `json:"tls"`
		RawEndpoints []rawEndpoint `json:"raw_endpoints"`
		Endpoints    []string      `json:"endpoints"`
		OSSCluster   bool          `json:"oss_cluster,omitempty"`
	}
	fi.mu.Lock()
	defer fi.mu.Unlock()
	out := map[string]database{}
	for _, db := range fi.dbs {
		d := database{BdbID: db.BdbID, Username: "default"}
		if db.Cluster != nil {
			d.OSSCluster = true
			for i, a := range db.Cluster.Addrs() {
				h, p, _ := net.SplitHostPort(a)
				port, _ := strconv.Atoi(p)
				d.Endpoints = append(d.Endpoints, "redis://"+a)
				d.RawEndpoints = append(d.RawEndpoints, rawEndpoint{Addr: []string{h}, AddrType: "external",
					DNSName: h, PreferredEndpointType: "ip", PreferredIPType: "external", Port: port,
					ProxyPolicy: "all-master-shards", UID: fmt.Sprintf("%d:%d", db.BdbID, i+1)})
			}
		} else {
			port, _ := strconv.Atoi(db.Nodes[0].Port())
			d.Endpoints = []string{"redis://" + net.JoinHostPort(db.Host, db.Nodes[0].Port())}
			d.RawEndpoints = []rawEndpoint{{Addr: []string{db.Nodes[0].IP()}, AddrType: "external",
				DNSName: db.Host, PreferredEndpointType: "ip", PreferredIPType: "external", Port: port,
				ProxyPolicy: "single", UID: fmt.Sprintf("%d:1", db.BdbID)}}
		}
		out[db.Name] = d
	}
	return json.MarshalIndent(out, "", "  ")
}

// The effects each endpoint lists, with the triggers that achieve them.
var (
	standaloneEffects = map[string][]string{
		"data_movement_no_conn_drop": {"migrate"},
		"data_movement_conn_drop":    {"migrate"},
		"conn_drop":                  {"bind"},
		"dns_resolution_change":      {"bind"},
	}
	// A slot effect's failover trigger is not emulated: listing it would
	// run a plain migration for a scenario that asked for a failover.
	slotEffects = map[string][]string{
		"slot-shuffle": {"migrate"},
		"remove":       {"migrate"},
		"add":          {"migrate"},
		"remove-add":   {"migrate"},
	}
)

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// validation answers 422 with a FastAPI-style detail, as the real service
// answers a request it cannot validate.
func validation(w http.ResponseWriter, format string, args ...any) {
	writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": fmt.Sprintf(format, args...)})
}

func (fi *FaultInjector) handleList(w http.ResponseWriter, _ *http.Request) {
	fi.mu.Lock()
	list := make([]map[string]any, 0, len(fi.order))
	for _, id := range fi.order {
		a := fi.actions[id]
		list = append(list, map[string]any{"job_id": a.id, "action_type": a.typ, "status": a.status,
			"submitted_at": a.submitted.UTC().Format(time.RFC3339Nano)})
	}
	fi.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"actions": list})
}

func (fi *FaultInjector) handleStatus(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	fi.mu.Lock()
	a := fi.actions[id]
	var body map[string]any
	if a != nil {
		var errV any
		if a.errText != "" {
			errV = a.errText
		}
		body = map[string]any{"action_id": a.id, "status": a.status, "error": errV, "output": maps.Clone(a.output),
			"start_time": a.submitted.UTC().Format(time.RFC3339Nano)}
		if !a.ended.IsZero() {
			body["end_time"] = a.ended.UTC().Format(time.RFC3339Nano)
		}
	}
	fi.mu.Unlock()
	if a == nil {
		writeJSON(w, http.StatusNotFound, map[string]any{"detail": "action " + id + " not found"})
		return
	}
	writeJSON(w, http.StatusOK, body)
}

func (fi *FaultInjector) handleTriggers(effects map[string][]string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		effect := r.URL.Query().Get("effect")
		triggers, ok := effects[effect]
		if !ok {
			validation(w, "unknown effect %q", effect)
			return
		}
		list := make([]map[string]any, 0, len(triggers))
		for _, t := range triggers {
			list = append(list, map[string]any{"name": t, "description": "emulated " + t,
				"requirements": []map[string]any{{"dbconfig": map[string]any{}, "cluster": map[string]any{}, "description": "any database"}}})
		}
		writeJSON(w, http.StatusOK, map[string]any{"effect": effect, "cluster": map[string]any{}, "triggers": list})
	}
}

// handleSlotMigrateQuery is go-redis's form of slot_migrate: POST
// /slot-migrate?effect=..&bdb_id=..&trigger=..&source_node=..&target_node=..
func (fi *FaultInjector) handleSlotMigrateQuery(w http.ResponseWriter, r *http.Request) {
	params := map[string]any{}
	for k, v := range r.URL.Query() {
		params[k] = v[0]
	}
	if v, ok := params["variant"]; ok && params["trigger"] == nil {
		params["trigger"] = v
	}
	fi.trigger(w, "slot_migrate", params)
}

func (fi *FaultInjector) handleTrigger(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Type       string         `json:"type"`
		Parameters map[string]any `json:"parameters"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.UseNumber()
	if err := dec.Decode(&req); err != nil {
		validation(w, "invalid JSON body: %v", err)
		return
	}
	fi.trigger(w, req.Type, req.Parameters)
}

// step is one planned action: its type and parameters, checked at POST.
type step struct {
	typ    string
	params map[string]any
	delay  time.Duration
	db     *faultDB
}

func (fi *FaultInjector) trigger(w http.ResponseWriter, typ string, params map[string]any) {
	steps, err := fi.plan(typ, params, 0)
	if err != nil {
		validation(w, "%v", err)
		return
	}
	fi.mu.Lock()
	fi.nextID++
	a := &faultAction{id: fmt.Sprintf("emu-%d-%d", time.Now().UnixNano()%1e9, fi.nextID), typ: typ,
		submitted: time.Now(), status: "pending", output: map[string]any{}}
	fi.actions[a.id] = a
	fi.order = append(fi.order, a.id)
	fi.wg.Add(1)
	fi.mu.Unlock()
	go func() {
		defer fi.wg.Done()
		fi.run(a, steps)
	}()
	writeJSON(w, http.StatusOK, map[string]any{"action_id": a.id, "status": "pending"})
}

// plan checks an action and flattens it into steps.
func (fi *FaultInjector) plan(typ string, params map[string]any, depth int) ([]step, error) {
	if typ == "sequence_of_actions" {
		if depth > 0 {
			return nil, errors.New("nested sequence_of_actions")
		}
		raw, ok := params["actions"].([]any)
		if !ok || len(raw) == 0 {
			return nil, errors.New("sequence_of_actions needs a non-empty list parameter actions")
		}
		var out []step
		for i, r := range raw {
			m, ok := r.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("actions[%d] is not an object", i)
			}
			t, _ := m["type"].(string)
			p, _ := m["params"].(map[string]any)
			if p == nil {
				p, _ = m["parameters"].(map[string]any)
			}
			if p == nil {
				p = map[string]any{}
			}
			for _, k := range []string{"bdb_id", "bdbId"} { // the sequence's id for steps without one
				if _, has := p["bdb_id"]; !has && params[k] != nil {
					p["bdb_id"] = params[k]
				}
			}
			sub, err := fi.plan(t, p, depth+1)
			if err != nil {
				return nil, fmt.Errorf("actions[%d]: %w", i, err)
			}
			if d, ok := number(m["delay"]); ok && d > 0 { // go-redis sends a time.Duration, in nanoseconds
				sub[0].delay = time.Duration(d)
			}
			out = append(out, sub...)
		}
		return out, nil
	}
	switch typ {
	case "migrate", "bind", "failover", "topology_change_standalone", "slot_migrate":
	case "update_cluster_config":
		return planClusterConfig(params)
	default:
		return nil, fmt.Errorf("action type %q is not supported by the emulated fault injector", typ)
	}
	id, ok := number(params["bdb_id"])
	if !ok {
		return nil, fmt.Errorf("%s needs parameter bdb_id", typ)
	}
	fi.mu.Lock()
	db := fi.dbs[int(id)]
	fi.mu.Unlock()
	if db == nil {
		return nil, fmt.Errorf("database %d not found", int(id))
	}
	effect, _ := params["effect"].(string)
	switch typ {
	case "topology_change_standalone":
		if err := offered(standaloneEffects, "standalone", effect, params["trigger"]); err != nil {
			return nil, err
		}
	case "slot_migrate":
		if err := offered(slotEffects, "slot_migrate", effect, params["trigger"]); err != nil {
			return nil, err
		}
	}
	if (typ == "slot_migrate") != (db.Cluster != nil) {
		return nil, fmt.Errorf("%s does not apply to database %d", typ, db.BdbID)
	}
	return []step{{typ: typ, params: params, db: db}}, nil
}

// offered checks that effect is one of effects and trigger (if given) one
// of the triggers GET lists for it: what GET lists is exactly what POST
// accepts, so an action never runs as something its name does not say.
func offered(effects map[string][]string, what, effect string, trigger any) error {
	triggers, ok := effects[effect]
	if !ok {
		return fmt.Errorf("unknown %s effect %q", what, effect)
	}
	if trigger == nil {
		return nil
	}
	t, _ := trigger.(string)
	if !slices.Contains(triggers, t) {
		return fmt.Errorf("trigger %v is not offered for %s effect %q by the emulated fault injector (offered: %s)",
			trigger, what, effect, strings.Join(triggers, ", "))
	}
	return nil
}

// planClusterConfig checks an update_cluster_config: the one setting the
// emulator has, client_maint_notifications.
func planClusterConfig(params map[string]any) ([]step, error) {
	cfg, ok := params["config"].(map[string]any)
	if !ok || len(cfg) == 0 {
		return nil, errors.New("update_cluster_config needs an object parameter config")
	}
	for k, v := range cfg {
		if k != "client_maint_notifications" {
			return nil, fmt.Errorf("update_cluster_config: setting %q is not emulated", k)
		}
		if _, ok := v.(bool); !ok {
			return nil, fmt.Errorf("update_cluster_config: client_maint_notifications must be a boolean, got %v", v)
		}
	}
	return []step{{typ: "update_cluster_config", params: params}}, nil
}

// setNotifications turns the opt-in of every node of every database on or
// off (update_cluster_config client_maint_notifications).
func (fi *FaultInjector) setNotifications(on bool) {
	fi.mu.Lock()
	var nodes []*Endpoint
	for _, db := range fi.dbs {
		nodes = append(nodes, db.Nodes...)
		if db.Cluster != nil {
			nodes = append(nodes, db.Cluster.Nodes()...)
		}
	}
	fi.mu.Unlock()
	for _, ep := range nodes {
		ep.SetUnsupported(!on)
	}
}

// number reads a JSON number or a numeric string.
func number(v any) (int64, bool) {
	switch n := v.(type) {
	case json.Number:
		if i, err := n.Int64(); err == nil {
			return i, true
		}
		f, err := n.Float64()
		return int64(f), err == nil
	case float64:
		return int64(n), true
	case string:
		i, err := strconv.ParseInt(n, 10, 64)
		return i, err == nil
	}
	return 0, false
}

func (fi *FaultInjector) setStatus(a *faultAction, status, errText string) {
	fi.mu.Lock()
	a.status, a.errText = status, errText
	if status == "success" || status == "failed" {
		a.ended = time.Now()
	}
	fi.mu.Unlock()
}

// run executes an action's steps in order.
func (fi *FaultInjector) run(a *faultAction, steps []step) {
	fi.setStatus(a, "running", "")
	var done []string
	for _, s := range steps {
		if !fi.sleep(s.delay) {
			return
		}
		if err := fi.runStep(s); err != nil {
			fi.setStatus(a, "failed", fmt.Sprintf("%s: %v", s.typ, err))
			return
		}
		done = append(done, s.typ)
	}
	fi.mu.Lock()
	a.output["steps"] = done
	if db := steps[len(steps)-1].db; db != nil {
		a.output["bdb_id"] = db.BdbID
	}
	fi.mu.Unlock()
	fi.setStatus(a, "success", "")
}

// sleep waits d, or returns false when the injector closes first.
func (fi *FaultInjector) sleep(d time.Duration) bool {
	if d <= 0 {
		return fi.ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-fi.ctx.Done():
		return false
	}
}

var errClosedFI = errors.New("fault injector closed")

func (fi *FaultInjector) runStep(s step) error {
	if s.typ == "update_cluster_config" {
		cfg, _ := s.params["config"].(map[string]any)
		on, _ := cfg["client_maint_notifications"].(bool)
		fi.setNotifications(on)
		return nil
	}
	db := s.db
	db.mu.Lock() // one action at a time per database, as on a real cluster
	defer db.mu.Unlock()
	effect, _ := s.params["effect"].(string)
	switch s.typ {
	case "migrate":
		return fi.migrate(db)
	case "bind":
		return fi.bind(db, false)
	case "failover":
		return fi.failover(db)
	case "topology_change_standalone":
		switch effect {
		case "data_movement_no_conn_drop":
			return fi.migrate(db)
		case "data_movement_conn_drop":
			if err := fi.migrate(db); err != nil {
				return err
			}
			return fi.bind(db, false)
		case "conn_drop":
			return fi.bind(db, false)
		default: // dns_resolution_change
			return fi.bind(db, true)
		}
	default: // slot_migrate
		return fi.slotMigrate(db, effect)
	}
}

// shardsOf names the shard a standalone database's notifications carry.
func shardsOf(db *faultDB) string { return strconv.Itoa(db.BdbID) }

func (fi *FaultInjector) migrate(db *faultDB) error {
	ep := db.Nodes[db.cur]
	return fi.bracket(func() { ep.Migrating(fi.cfg.LeadTime, shardsOf(db)) }, func() { ep.Migrated(shardsOf(db)) })
}

func (fi *FaultInjector) failover(db *faultDB) error {
	ep := db.Nodes[db.cur]
	return fi.bracket(func() { ep.FailingOver(fi.cfg.LeadTime, shardsOf(db)) }, func() { ep.FailedOver(shardsOf(db)) })
}

// bracket announces an operation, lets its lead time and phase pass and
// completes it.
func (fi *FaultInjector) bracket(announce, complete func()) error {
	announce()
	if !fi.sleep(fi.cfg.LeadTime + fi.cfg.Phase) {
		return errClosedFI
	}
	complete()
	return nil
}

// bind moves the database's endpoint to the next node: MOVING on the old
// node, the name following DNSLag later (at once with dnsFirst), the old
// node refusing and closing its connections at the window's end. It
// returns once the old node closed them.
func (fi *FaultInjector) bind(db *faultDB, dnsFirst bool) error {
	old := db.Nodes[db.cur]
	next := (db.cur + 1) % len(db.Nodes)
	to := db.Nodes[next]
	to.RefuseNew(false) // a node an earlier bind left behind serves again
	lag := fi.cfg.DNSLag
	if dnsFirst {
		fi.e.DNS().Set(db.Host, to.IP())
		lag = 0
	}
	ctx, cancel := context.WithTimeout(fi.ctx, fi.cfg.MovingTTL+fi.cfg.CloseJitter+30*time.Second)
	defer cancel()
	start := time.Now()
	old.Moving(Moving{Window: fi.cfg.MovingTTL, CloseJitter: fi.cfg.CloseJitter, To: to,
		StopAccepting: true, DNSHost: db.Host, DNSLag: lag})
	db.cur = next
	_, err := fi.e.WaitEvent(ctx, func(ev Event) bool {
		return ev.Kind == KindWindowEndClose && ev.Endpoint == old.Addr() && !ev.At.Before(start)
	})
	if err != nil && fi.ctx.Err() != nil {
		return errClosedFI
	}
	return err
}

// slotMigrate runs one slot_migrate effect on a cluster database.
func (fi *FaultInjector) slotMigrate(db *faultDB, effect string) error {
	cl := db.Cluster
	nodes := cl.Nodes()
	var from *Endpoint
	for _, n := range nodes { // the first node owning slots is the source
		if len(cl.Slots(n)) > 0 {
			from = n
			break
		}
	}
	if from == nil {
		return errors.New("no node owns slots")
	}
	// The source slows down LeadTime after the SMIGRATING, for Phase, as a
	// migration starts after its announcement; the ownership change and
	// SMIGRATED follow.
	mig := SlotMigration{From: from, Duration: fi.cfg.LeadTime + fi.cfg.Phase, CloseAfter: fi.cfg.Phase}
	all := FormatSlots(cl.Slots(from))
	other := func() *Endpoint {
		for _, n := range nodes {
			if n != from && len(cl.Slots(n)) > 0 {
				return n
			}
		}
		return nil
	}
	switch effect {
	case "slot-shuffle": // one range of the source to an existing node
		mig.To, mig.Slots = other(), firstHalf(cl.Slots(from))
	case "remove": // every slot of the source to an existing node, the source removed
		mig.To, mig.Slots, mig.RemoveSource = other(), all, true
	case "add", "remove-add": // to a new, empty node
		h, _, _ := net.SplitHostPort(nodes[len(nodes)-1].Addr())
		ip := net.ParseIP(h).To4()
		if ip == nil {
			return errors.New("cannot pick a loopback address for the new node")
		}
		ip[3]++
		added, err := cl.AddNode(net.JoinHostPort(ip.String(), from.Port()))
		if err != nil {
			return err
		}
		added.SetReplayActive(true)
		mig.To, mig.Slots = added, firstHalf(cl.Slots(from))
		if effect == "remove-add" {
			mig.Slots, mig.RemoveSource = all, true
		}
	}
	if mig.To == nil {
		return errors.New("no destination node")
	}
	start := time.Now()
	cl.MigrateSlots(mig)
	if fi.cfg.MaintLatency > 0 {
		if !fi.sleep(fi.cfg.LeadTime) {
			return errClosedFI
		}
		from.SetLatency(fi.cfg.MaintLatency)
		defer from.SetLatency(0)
	}
	ctx, cancel := context.WithTimeout(fi.ctx, mig.Duration+30*time.Second)
	defer cancel()
	_, err := fi.e.WaitEvent(ctx, func(ev Event) bool {
		return ev.Kind == KindSMigrated && ev.Endpoint == from.Addr() && !ev.At.Before(start)
	})
	if err != nil && fi.ctx.Err() != nil {
		return errClosedFI
	}
	return err
}

// firstHalf returns the first half of the first range in rs, as a slot
// list.
func firstHalf(rs []SlotRange) string {
	r := rs[0]
	return FormatSlots([]SlotRange{{Start: r.Start, End: r.Start + (r.End-r.Start)/2}})
}

// SetReplayActive makes the endpoint replay an open MIGRATING or
// FAILING_OVER (with the seconds left of its "starts in"), and the
// SMIGRATING of every slot migration open on it (Cluster.MigrateSlots, as
// sent, until its SMIGRATED), to every RESP3 connection that opts in while
// it lasts, as Redis Enterprise does; off by default. NewFaultInjector's
// databases have it on.
func (ep *Endpoint) SetReplayActive(on bool) {
	ep.mu.Lock()
	ep.replayActive = on
	ep.mu.Unlock()
}
