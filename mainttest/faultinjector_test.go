package mainttest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// fiEnv is an emulated standalone database (bdb 7, "m-standard") and a
// cluster one (bdb 8) behind an emulated fault injector with short phases.
type fiEnv struct {
	t        *testing.T
	e        *Emulator
	fi       *FaultInjector
	old, new *Endpoint
	cl       *Cluster
}

func newFIEnv(t *testing.T) *fiEnv {
	t.Helper()
	e := newEmu(t, Config{})
	old, nw := pairEndpoints(t, e)
	fi, err := e.NewFaultInjector(FaultInjectorConfig{LeadTime: 150 * time.Millisecond,
		Phase: 150 * time.Millisecond, MovingTTL: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fi.Close() })
	if err := fi.AddDatabase(FaultDatabase{Name: "m-standard", BdbID: 7, Host: "redis-7.fi.test", Nodes: []*Endpoint{old, nw}}); err != nil {
		t.Fatal(err)
	}
	cl, err := e.NewCluster(ClusterConfig{Addrs: []string{"127.0.0.5:0", "127.0.0.6:0", "127.0.0.7:0"}})
	if err != nil {
		t.Skipf("no free port for the cluster: %v", err)
	}
	if err := fi.AddDatabase(FaultDatabase{Name: "maint-notifications-oss-api", BdbID: 8, Cluster: cl}); err != nil {
		t.Fatal(err)
	}
	return &fiEnv{t: t, e: e, fi: fi, old: old, new: nw, cl: cl}
}

// call sends one raw HTTP request and decodes the JSON answer into a map.
func (f *fiEnv) call(method, path, body string) (int, map[string]any) {
	f.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, f.fi.URL()+path, rd)
	if err != nil {
		f.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); ct != "application/json" {
		f.t.Fatalf("%s %s: Content-Type %q", method, path, ct)
	}
	var m map[string]any
	if err := json.NewDecoder(res.Body).Decode(&m); err != nil {
		f.t.Fatalf("%s %s: %v", method, path, err)
	}
	return res.StatusCode, m
}

// trigger posts an action and returns its id, checking the answer's shape:
// {"action_id": string, "status": "pending"}.
func (f *fiEnv) trigger(body string) string {
	f.t.Helper()
	code, m := f.call("POST", "/action", body)
	id, _ := m["action_id"].(string)
	if code != 200 || id == "" || m["status"] != "pending" {
		f.t.Fatalf("POST /action %s: %d %v", body, code, m)
	}
	return id
}

// wait polls GET /action/{id} as the peers do until success or failed and
// returns the last answer, checking every answer's shape.
func (f *fiEnv) wait(id string) map[string]any {
	f.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		code, m := f.call("GET", "/action/"+id, "")
		if code != 200 || m["action_id"] != id {
			f.t.Fatalf("GET /action/%s: %d %v", id, code, m)
		}
		if _, ok := m["output"].(map[string]any); !ok {
			f.t.Fatalf("GET /action/%s: output is not an object: %v", id, m)
		}
		switch m["status"] {
		case "success", "failed":
			return m
		case "pending", "running":
		default:
			f.t.Fatalf("GET /action/%s: status %v", id, m["status"])
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.t.Fatalf("action %s never completed", id)
	return nil
}

// pushKind returns a push frame's type name.
func pushKind(frame string) string {
	lines := strings.Split(frame, "\r\n")
	if len(lines) < 3 || !strings.HasPrefix(lines[0], ">") {
		return ""
	}
	return lines[2]
}

// expectPushes reads frames until it has seen kinds in order.
func expectPushes(t *testing.T, c *rawClient, kinds ...string) {
	t.Helper()
	for _, k := range kinds {
		if got := pushKind(c.read()); got != k {
			t.Fatalf("got push %q, want %q", got, k)
		}
	}
}

// TestFaultInjectorNodeRedisMigrateAndBind drives the emulated injector with
// the request node-redis's migrateAndBindAction sends (sequence_of_actions,
// bdbId and cluster_index as strings, steps under "params"): an opted-in
// connection sees MIGRATING, MIGRATED and MOVING, a connection opting in
// during the MIGRATING gets it replayed after its +OK, the name moves and
// the action ends in success with the peers' status shape.
func TestFaultInjectorNodeRedisMigrateAndBind(t *testing.T) {
	f := newFIEnv(t)
	c := dialRaw(t, f.old.Addr())
	c.hello3()
	c.optIn("internal-ip")
	id := f.trigger(`{"type":"sequence_of_actions","parameters":{"bdbId":"7","actions":[` +
		`{"type":"migrate","params":{"cluster_index":"0","bdb_id":"7"}},` +
		`{"type":"bind","params":{"cluster_index":"0","bdb_id":"7"}}]}}`)
	expectPushes(t, c, "MIGRATING")

	late := dialRaw(t, f.old.Addr()) // opts in while the MIGRATING is open
	late.hello3()
	late.optIn("internal-ip")
	expectPushes(t, late, "MIGRATING")

	expectPushes(t, c, "MIGRATED", "MOVING")
	expectPushes(t, late, "MIGRATED", "MOVING")
	m := f.wait(id)
	if m["status"] != "success" || m["error"] != nil {
		t.Fatalf("final status: %v", m)
	}
	if _, ok := m["end_time"].(string); !ok {
		t.Fatalf("no end_time: %v", m)
	}
	if got := f.e.DNS().Lookup("redis-7.fi.test"); len(got) != 1 || got[0] != f.new.IP() {
		t.Fatalf("name resolves to %v after the bind, want %s", got, f.new.IP())
	}
	if f.fi.Current(7) != f.new {
		t.Fatal("the database's current node did not move")
	}
	if _, err := net.DialTimeout("tcp", f.old.Addr(), time.Second); err == nil {
		t.Fatal("the old node still accepts after the bind")
	}
}

// TestFaultInjectorRedisPyEffect sends redis-py's trigger_effect request
// (topology_change_standalone, integer bdb_id, effect, trigger) for
// data_movement_conn_drop, and go-redis's sequence form with a delay in
// nanoseconds: both end in success, the first with MIGRATING, MIGRATED and
// MOVING on a connection.
func TestFaultInjectorRedisPyEffect(t *testing.T) {
	f := newFIEnv(t)
	c := dialRaw(t, f.old.Addr())
	c.hello3()
	c.optIn("none")
	code, trig := f.call("GET", "/topology-change-standalone?effect=data_movement_conn_drop&cluster_index=0", "")
	triggers, _ := trig["triggers"].([]any)
	if code != 200 || trig["effect"] != "data_movement_conn_drop" || len(triggers) == 0 {
		t.Fatalf("GET /topology-change-standalone: %d %v", code, trig)
	}
	name := triggers[0].(map[string]any)["name"].(string)
	id := f.trigger(`{"type":"topology_change_standalone","parameters":{"bdb_id":7,"cluster_index":0,` +
		`"effect":"data_movement_conn_drop","trigger":"` + name + `"}}`)
	expectPushes(t, c, "MIGRATING", "MIGRATED", "MOVING")
	if m := f.wait(id); m["status"] != "success" {
		t.Fatalf("final status: %v", m)
	}

	start := time.Now()
	id = f.trigger(`{"type":"sequence_of_actions","parameters":{"bdb_id":7,"actions":[` +
		`{"type":"failover","params":{"bdb_id":7},"delay":100000000}]}}`)
	if m := f.wait(id); m["status"] != "success" {
		t.Fatalf("final status: %v", m)
	}
	if d := time.Since(start); d < 400*time.Millisecond { // delay + lead time + phase
		t.Fatalf("sequence with a 100ms delay finished after %v", d)
	}

	code, list := f.call("GET", "/action", "")
	actions, _ := list["actions"].([]any)
	if code != 200 || len(actions) != 2 {
		t.Fatalf("GET /action: %d %v", code, list)
	}
	for _, a := range actions {
		m := a.(map[string]any)
		for _, k := range []string{"job_id", "action_type", "status", "submitted_at"} {
			if _, ok := m[k].(string); !ok {
				t.Fatalf("GET /action item without %s: %v", k, m)
			}
		}
	}
}

// TestFaultInjectorSlotMigrate sends go-redis's query form (POST
// /slot-migrate?effect=slot-shuffle&bdb_id=..) and redis-py's action form
// (slot_migrate with effect remove): SMIGRATING then SMIGRATED reach the
// source's connections, the slots change owner and the removed node leaves.
func TestFaultInjectorSlotMigrate(t *testing.T) {
	f := newFIEnv(t)
	src := f.cl.Nodes()[0]
	c := dialRaw(t, src.Addr())
	c.hello3()
	c.optIn("internal-ip")
	code, m := f.call("POST", "/slot-migrate?effect=slot-shuffle&bdb_id=8&cluster_index=0&trigger=migrate", "")
	id, _ := m["action_id"].(string)
	if code != 200 || id == "" {
		t.Fatalf("POST /slot-migrate: %d %v", code, m)
	}
	expectPushes(t, c, "SMIGRATING", "SMIGRATED")
	if m := f.wait(id); m["status"] != "success" {
		t.Fatalf("final status: %v", m)
	}
	if f.cl.Owner(0) == src {
		t.Fatal("slot 0 did not move")
	}
	id = f.trigger(`{"type":"slot_migrate","parameters":{"bdb_id":8,"cluster_index":0,"effect":"remove","trigger":"migrate"}}`)
	if m := f.wait(id); m["status"] != "success" {
		t.Fatalf("final status: %v", m)
	}
	if len(f.cl.Nodes()) != 2 {
		t.Fatalf("nodes after remove: %d", len(f.cl.Nodes()))
	}
}

// TestFaultInjectorRefuses checks the errors: a validation error (422 with
// a detail) for an unknown type, an unknown database, a bad effect, a
// cluster action on a standalone database and a malformed body; 404 for an
// unknown action id.
func TestFaultInjectorRefuses(t *testing.T) {
	f := newFIEnv(t)
	for _, body := range []string{
		`{"type":"dmc_restart","parameters":{"bdb_id":7}}`,
		`{"type":"migrate","parameters":{"bdb_id":99}}`,
		`{"type":"migrate","parameters":{}}`,
		`{"type":"topology_change_standalone","parameters":{"bdb_id":7,"effect":"nope"}}`,
		`{"type":"slot_migrate","parameters":{"bdb_id":7,"effect":"slot-shuffle"}}`,
		`{"type":"sequence_of_actions","parameters":{"bdb_id":7,"actions":[]}}`,
		`{"type":`,
	} {
		code, m := f.call("POST", "/action", body)
		if _, ok := m["detail"].(string); code != http.StatusUnprocessableEntity || !ok {
			t.Errorf("POST /action %s: %d %v, want 422 with a detail", body, code, m)
		}
	}
	if code, _ := f.call("GET", "/action/unknown", ""); code != http.StatusNotFound {
		t.Errorf("GET /action/unknown: %d", code)
	}
	if code, _ := f.call("GET", "/slot-migrate?effect=nope", ""); code != http.StatusUnprocessableEntity {
		t.Errorf("GET /slot-migrate?effect=nope: %d", code)
	}
	if len(f.fi.Config().Addr) == 0 {
		t.Error("no address in the config")
	}
}

// TestFaultInjectorEndpointsConfig checks the endpoints file against the
// peers' REDIS_ENDPOINTS_CONFIG_PATH readers: every database by name with
// bdb_id, tls, endpoints as redis:// URLs and raw_endpoints with dns_name
// and port.
func TestFaultInjectorEndpointsConfig(t *testing.T) {
	f := newFIEnv(t)
	b, err := f.fi.EndpointsConfig()
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]struct {
		BdbID        int      `json:"bdb_id"`
		TLS          bool     `json:"tls"`
		Endpoints    []string `json:"endpoints"`
		RawEndpoints []struct {
			DNSName string `json:"dns_name"`
			Port    int    `json:"port"`
		} `json:"raw_endpoints"`
		OSSCluster bool `json:"oss_cluster"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&cfg); err != nil {
		t.Fatal(err)
	}
	std := cfg["m-standard"]
	if std.BdbID != 7 || len(std.Endpoints) != 1 || std.Endpoints[0] != "redis://redis-7.fi.test:"+f.old.Port() ||
		len(std.RawEndpoints) != 1 || std.RawEndpoints[0].DNSName != "redis-7.fi.test" || std.OSSCluster {
		t.Fatalf("m-standard: %+v\n%s", std, b)
	}
	oss := cfg["maint-notifications-oss-api"]
	if oss.BdbID != 8 || !oss.OSSCluster || len(oss.Endpoints) != 3 || !strings.HasPrefix(oss.Endpoints[0], "redis://127.0.0.5:") {
		t.Fatalf("oss: %+v\n%s", oss, b)
	}
}

// TestFaultInjectorUpdateClusterConfig sends node-redis's
// update_cluster_config request (config.client_maint_notifications, no
// bdb_id): off, every node of every database refuses the opt-in as a
// server without support and a migration sends nothing to a connection
// that asked; on again, the opt-in is answered +OK and notifications flow.
// A malformed or unknown setting is refused with 422.
func TestFaultInjectorUpdateClusterConfig(t *testing.T) {
	f := newFIEnv(t)
	setTo := func(on string) {
		t.Helper()
		id := f.trigger(`{"type":"update_cluster_config","parameters":{"config":{"client_maint_notifications":` + on + `}}}`)
		if m := f.wait(id); m["status"] != "success" {
			t.Fatalf("update_cluster_config %s: %v", on, m)
		}
	}
	setTo("false")
	for _, ep := range append([]*Endpoint{f.old, f.new}, f.cl.Nodes()...) {
		c := dialRaw(t, ep.Addr())
		c.hello3()
		if got := c.do("CLIENT", "MAINT_NOTIFICATIONS", "ON", "moving-endpoint-type", "external-ip"); !strings.HasPrefix(got, "-ERR unknown subcommand") {
			t.Fatalf("%s: opt-in with notifications off answered %q", ep.Addr(), got)
		}
	}
	c := dialRaw(t, f.old.Addr())
	c.hello3()
	c.do("CLIENT", "MAINT_NOTIFICATIONS", "ON", "moving-endpoint-type", "external-ip")
	if m := f.wait(f.trigger(`{"type":"migrate","parameters":{"bdb_id":7}}`)); m["status"] != "success" {
		t.Fatalf("migrate: %v", m)
	}
	c.noFrameWithin(100 * time.Millisecond)

	setTo("true")
	on := dialRaw(t, f.old.Addr())
	on.hello3()
	on.optIn("external-ip")
	expectPushes(t, on, "MIGRATED") // the last completion, replayed on opt-in
	id := f.trigger(`{"type":"migrate","parameters":{"bdb_id":7}}`)
	expectPushes(t, on, "MIGRATING", "MIGRATED")
	f.wait(id)

	for _, body := range []string{
		`{"type":"update_cluster_config","parameters":{}}`,
		`{"type":"update_cluster_config","parameters":{"config":{"client_maint_notifications":"no"}}}`,
		`{"type":"update_cluster_config","parameters":{"config":{"shards_count":3}}}`,
	} {
		if code, _ := f.call("POST", "/action", body); code != http.StatusUnprocessableEntity {
			t.Errorf("POST /action %s: %d, want 422", body, code)
		}
	}
}

// TestFaultInjectorTriggersAreHonest: for every effect, POST accepts
// exactly the triggers GET lists; a trigger GET does not list (a slot
// effect's failover, which is not emulated) is refused with 422 rather
// than run as another action.
func TestFaultInjectorTriggersAreHonest(t *testing.T) {
	f := newFIEnv(t)
	for _, tc := range []struct {
		path, typ string
		bdb       int
		effects   []string
	}{
		{"/slot-migrate", "slot_migrate", 8, []string{"slot-shuffle", "remove", "add", "remove-add"}},
		{"/topology-change-standalone", "topology_change_standalone", 7, []string{"data_movement_conn_drop", "conn_drop"}},
	} {
		for _, effect := range tc.effects {
			code, m := f.call("GET", tc.path+"?effect="+effect, "")
			list, _ := m["triggers"].([]any)
			if code != 200 || len(list) == 0 {
				t.Fatalf("GET %s %s: %d %v", tc.path, effect, code, m)
			}
			listed := map[string]bool{}
			for _, x := range list {
				listed[x.(map[string]any)["name"].(string)] = true
			}
			for _, trig := range []string{"migrate", "bind", "failover", "maintenance_mode"} {
				body := fmt.Sprintf(`{"type":%q,"parameters":{"bdb_id":%d,"cluster_index":0,"effect":%q,"trigger":%q}}`, tc.typ, tc.bdb, effect, trig)
				code, m := f.call("POST", "/action", body)
				if listed[trig] {
					if code != 200 {
						t.Errorf("%s %s: GET lists %s, POST refused it: %d %v", tc.typ, effect, trig, code, m)
						continue
					}
					if st := f.wait(m["action_id"].(string)); st["status"] != "success" {
						t.Errorf("%s %s %s: %v", tc.typ, effect, trig, st)
					}
					continue
				}
				if _, ok := m["detail"].(string); code != http.StatusUnprocessableEntity || !ok {
					t.Errorf("%s %s: GET does not list %s, POST answered %d %v, want 422", tc.typ, effect, trig, code, m)
				}
			}
		}
	}
}
