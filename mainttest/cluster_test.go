package mainttest

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/maintkit/maint/internal/resp"
)

func TestKeySlot(t *testing.T) {
	for _, tc := range []struct {
		key  string
		slot int
	}{
		{"", 0},
		{"123456789", 0x31C3 & 16383}, // the CRC16/XMODEM check value
		{"foo", 12182},
		{"bar", 5061},
		{"{user1000}.following", KeySlot("user1000")},
		{"{user1000}.followers", KeySlot("user1000")},
		{"foo{}{bar}", KeySlot("foo{}{bar}")}, // empty tag: the whole key
		{"foo{{bar}}zap", KeySlot("{bar")},
		{"foo{bar}{zap}", KeySlot("bar")},
		{"{", KeySlot("{")},
	} {
		if got := KeySlot(tc.key); got != tc.slot {
			t.Errorf("KeySlot(%q) = %d, want %d", tc.key, got, tc.slot)
		}
		if got := KeySlot([]byte(tc.key)); got != tc.slot {
			t.Errorf("KeySlot([]byte(%q)) = %d, want %d", tc.key, got, tc.slot)
		}
	}
	if KeySlot("foo{}{bar}") == KeySlot("bar") {
		t.Error("an empty hash tag must not select the next one")
	}
}

func TestParseSlots(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
		err  bool
	}{
		{"0-5460", "0-5460", false},
		{"123,456,789-1000", "123,456,789-1000", false},
		{" 5 , 3-4 ,0", "0,3-5", false},
		{"1-3,2-6,8", "1-6,8", false},
		{"16383", "16383", false},
		{"16384", "", true},
		{"5-3", "", true},
		{"", "", true},
		{"1,,2", "", true},
		{"-1", "", true},
		{"a", "", true},
		{"1-2-3", "", true},
	} {
		rs, err := ParseSlots(tc.in)
		if (err != nil) != tc.err {
			t.Errorf("ParseSlots(%q): err %v, want error %v", tc.in, err, tc.err)
			continue
		}
		if got := FormatSlots(rs); err == nil && got != tc.want {
			t.Errorf("ParseSlots(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestKeysOf(t *testing.T) {
	split := func(s string) [][]byte {
		var out [][]byte
		for _, f := range strings.Fields(s) {
			out = append(out, []byte(f))
		}
		return out
	}
	for _, tc := range []struct {
		cmd  string
		keys string
	}{
		{"GET a", "a"},
		{"SET a 1 EX 10", "a"},
		{"MGET a b c", "a b c"},
		{"MSET a 1 b 2", "a b"},
		{"DEL a b", "a b"},
		{"BLPOP a b 0", "a b"},
		{"EVAL s 2 a b x y", "a b"},
		{"EVAL s 0 x", ""},
		{"EVAL s 3 a", ""}, // numkeys beyond the arguments
		{"EVAL s x a", ""},
		{"EVALSHA s -1 a", ""},
		{"FCALL f 1 a x", "a"},
		{"ZUNIONSTORE d 2 a b WEIGHTS 1 2", "d a b"},
		{"ZUNION 2 a b", "a b"},
		{"BLMPOP 0 2 a b LEFT", "a b"},
		{"XREAD COUNT 2 STREAMS a b 0 0", "a b"},
		{"XREADGROUP GROUP g c streams a >", "a"},
		{"XREAD COUNT 2", ""},
		{"BITOP AND d a b", "d a b"},
		{"OBJECT ENCODING a", "a"},
		{"OBJECT HELP", ""},
		{"MEMORY USAGE a", "a"},
		{"XINFO STREAM a", "a"},
		{"RENAME a b", "a b"},
		{"PING", ""},
		{"GET", ""},
		{"NOSUCH a", ""},
	} {
		f := split(tc.cmd)
		got := keysOf(nil, strings.ToUpper(string(f[0])), f[1:])
		var s []string
		for _, k := range got {
			s = append(s, string(k))
		}
		if strings.Join(s, " ") != tc.keys {
			t.Errorf("keysOf(%q) = %q, want %q", tc.cmd, s, tc.keys)
		}
	}
}

// wantSlots is the CLUSTER SLOTS reply for nodes owning ranges, in order.
func wantSlots(cl *Cluster, resp3 bool, owners []*Endpoint, ranges []SlotRange) string {
	b := resp.AppendArrayHeader(nil, len(owners))
	for i, ep := range owners {
		b = resp.AppendArrayHeader(b, 3)
		b = resp.AppendInt(b, int64(ranges[i].Start))
		b = resp.AppendInt(b, int64(ranges[i].End))
		b = resp.AppendArrayHeader(b, 4)
		b = resp.AppendBulk(b, ep.IP())
		port, _ := strconv.Atoi(ep.Port())
		b = resp.AppendInt(b, int64(port))
		b = resp.AppendBulk(b, cl.NodeID(ep))
		if resp3 {
			b = append(b, "%0\r\n"...)
		} else {
			b = append(b, "*0\r\n"...)
		}
	}
	return string(b)
}

func TestClusterTopologyReplies(t *testing.T) {
	e := newEmu(t, Config{})
	cl := newCluster(t, e, ClusterConfig{})
	nodes := cl.Nodes()
	if len(nodes) != 3 {
		t.Fatalf("%d nodes", len(nodes))
	}
	for i, ep := range nodes {
		if ep.IP() != "127.0.0."+strconv.Itoa(2+i) || ep.Port() != nodes[0].Port() {
			t.Errorf("node %d on %s, want 127.0.0.%d:%s", i, ep.Addr(), 2+i, nodes[0].Port())
		}
	}
	ranges := []SlotRange{{0, 5460}, {5461, 10922}, {10923, 16383}}
	for i, ep := range nodes {
		if got := cl.Slots(ep); !slices.Equal(got, ranges[i:i+1]) {
			t.Errorf("node %d slots %v, want %v", i, got, ranges[i])
		}
	}

	c := dialRaw(t, nodes[1].Addr())
	// RESP2 first.
	c.send("CLUSTER", "SLOTS")
	c.expect(wantSlots(cl, false, nodes, ranges))
	c.send("cluster", "myid")
	c.expect(string(resp.AppendBulk(nil, cl.NodeID(nodes[1]))))
	if id := cl.NodeID(nodes[1]); len(id) != 40 || id == cl.NodeID(nodes[0]) {
		t.Errorf("node id %q", id)
	}
	c.send("CLUSTER", "KEYSLOT", "foo")
	c.expect(":12182\r\n")
	c.send("CLUSTER", "NOSUCH")
	c.expect("-ERR unknown subcommand 'NOSUCH'. Try CLUSTER HELP.\r\n")
	c.send("CLUSTER")
	c.expect("-ERR wrong number of arguments for 'cluster' command\r\n")

	info := c.do("CLUSTER", "INFO")
	for _, want := range []string{"cluster_state:ok\r\n", "cluster_slots_assigned:16384\r\n", "cluster_known_nodes:3\r\n", "cluster_size:3\r\n"} {
		if !strings.Contains(info, want) {
			t.Errorf("CLUSTER INFO %q lacks %q", info, want)
		}
	}
	if !strings.HasPrefix(info, "$") {
		t.Errorf("RESP2 CLUSTER INFO is not a bulk string: %q", info)
	}

	nodesText := c.do("CLUSTER", "NODES")
	lines := strings.Split(strings.TrimSpace(nodesText[strings.Index(nodesText, "\r\n")+2:]), "\n")
	if len(lines) != 3 {
		t.Fatalf("CLUSTER NODES: %q", nodesText)
	}
	for i, ep := range nodes {
		f := strings.Fields(lines[i])
		flags := "master"
		if i == 1 {
			flags = "myself,master"
		}
		if f[0] != cl.NodeID(ep) || !strings.HasPrefix(f[1], ep.Addr()+"@") || f[2] != flags || f[7] != "connected" || f[8] != ranges[i].String() {
			t.Errorf("CLUSTER NODES line %d: %q", i, lines[i])
		}
	}

	// CLUSTER SHARDS in RESP2: maps as flat arrays.
	shards := c.do("CLUSTER", "SHARDS")
	port, _ := strconv.Atoi(nodes[0].Port())
	want0 := "*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:5460\r\n$5\r\nnodes\r\n*1\r\n*14\r\n$2\r\nid\r\n$40\r\n" + cl.NodeID(nodes[0]) +
		"\r\n$4\r\nport\r\n:" + strconv.Itoa(port) + "\r\n$2\r\nip\r\n$9\r\n127.0.0.2\r\n$8\r\nendpoint\r\n$9\r\n127.0.0.2\r\n" +
		"$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n$6\r\nonline\r\n"
	if !strings.HasPrefix(shards, "*3\r\n"+want0) {
		t.Errorf("CLUSTER SHARDS = %q\nwant prefix %q", shards, "*3\r\n"+want0)
	}

	// RESP3: maps and verbatim strings.
	c.hello3()
	c.send("CLUSTER", "SLOTS")
	c.expect(wantSlots(cl, true, nodes, ranges))
	if info := c.do("CLUSTER", "INFO"); !strings.HasPrefix(info, "=") || !strings.Contains(info, "\r\ntxt:cluster_state:ok\r\n") {
		t.Errorf("RESP3 CLUSTER INFO = %q", info)
	}
	if s := c.do("CLUSTER", "SHARDS"); !strings.HasPrefix(s, "*3\r\n%2\r\n$5\r\nslots\r\n") {
		t.Errorf("RESP3 CLUSTER SHARDS = %q", s)
	}
	c.send("READONLY")
	c.expect("+OK\r\n")
	c.send("READWRITE")
	c.expect("+OK\r\n")

	st := nodes[1].Stats().Cluster
	if st.SlotMaps != 5 || st.ClusterSlots != 2 || st.ClusterShards != 2 || st.ClusterNodes != 1 {
		t.Errorf("slot-map counters %+v, want 5 = 2 SLOTS + 2 SHARDS + 1 NODES", st)
	}
	if n := countEvents(e, nodes[1], KindSlotMap); n != 5 {
		t.Errorf("%d slot_map events, want 5", n)
	}
}

func countEvents(e *Emulator, ep *Endpoint, kind string) int {
	n := 0
	for _, ev := range e.Events() {
		if IsKind(ep, kind)(ev) {
			n++
		}
	}
	return n
}

func TestClusterConfigSlots(t *testing.T) {
	e := newEmu(t, Config{})
	cl := newCluster(t, e, ClusterConfig{Nodes: 2, Slots: []string{"0-99", "100-200,300"}})
	nodes := cl.Nodes()
	c := dialRaw(t, nodes[0].Addr())
	c.send("CLUSTER", "SLOTS")
	c.expect(wantSlots(cl, false, []*Endpoint{nodes[0], nodes[1], nodes[1]}, []SlotRange{{0, 99}, {100, 200}, {300, 300}}))
	if info := c.do("CLUSTER", "INFO"); !strings.Contains(info, "cluster_state:fail\r\n") || !strings.Contains(info, "cluster_slots_assigned:202\r\n") {
		t.Errorf("CLUSTER INFO = %q", info)
	}
	k := keyInSlot(t, 5000, "k")
	c.send("GET", k)
	c.expect("-CLUSTERDOWN Hash slot not served\r\n")
	if st := nodes[0].Stats().Cluster; st.Down != 1 {
		t.Errorf("Down = %d", st.Down)
	}

	for _, bad := range []ClusterConfig{
		{Nodes: 2, Slots: []string{"0-10", "5-20"}},
		{Nodes: 1, Slots: []string{"0-10", "11-20"}},
		{Nodes: 1, Slots: []string{"0-16384"}},
		{Addrs: []string{"10.0.0.1:0"}},
	} {
		if _, err := e.NewCluster(bad); err == nil {
			t.Errorf("NewCluster(%+v) accepted", bad)
		}
	}
	if n := len(e.Endpoints()); n != 2 {
		t.Errorf("%d endpoints after the refused configs, want the first cluster's 2", n)
	}
}

func TestClusterMovedAndCrossSlot(t *testing.T) {
	e := newEmu(t, Config{})
	cl := newCluster(t, e, ClusterConfig{})
	nodes := cl.Nodes()
	k1 := keyOn(t, cl, nodes[1], "k")
	c := dialRaw(t, nodes[0].Addr())
	c.send("SET", k1, "v")
	c.expect(fmt.Sprintf("-MOVED %d %s\r\n", KeySlot(k1), nodes[1].Addr()))
	c1 := dialRaw(t, nodes[1].Addr())
	c1.send("SET", k1, "v")
	c1.expect("+OK\r\n")
	c1.send("GET", k1)
	c1.expect("$1\r\nv\r\n")

	// Keyless commands are served anywhere, unknown ones forwarded.
	c.send("PING")
	c.expect("+PONG\r\n")
	c.send("EVAL", "return 1", "0")
	c.expect(":1\r\n")

	// Multi-key commands.
	k0 := keyOn(t, cl, nodes[0], "a")
	c.send("MGET", "{"+k0+"}a", "{"+k0+"}b")
	c.expect("*2\r\n$-1\r\n$-1\r\n")
	k0b := keyOn(t, cl, nodes[0], "b")
	if KeySlot(k0) == KeySlot(k0b) {
		t.Fatal("test keys share a slot")
	}
	c.send("MGET", k0, k0b)
	c.expect("-CROSSSLOT Keys in request don't hash to the same slot\r\n")
	c.send("EVAL", "return 1", "2", k0, k0b)
	c.expect("-CROSSSLOT Keys in request don't hash to the same slot\r\n")
	c.send("DEL", k0, k1) // different slots: CROSSSLOT comes before MOVED
	c.expect("-CROSSSLOT Keys in request don't hash to the same slot\r\n")

	st := nodes[0].Stats().Cluster
	if st.Moved != 1 || st.CrossSlot != 3 || st.Ask != 0 {
		t.Errorf("node 0 counters %+v, want Moved 1 CrossSlot 3", st)
	}

	// An ownership change without notification: the old owner redirects.
	if err := cl.SetOwner(strconv.Itoa(KeySlot(k1)), nodes[2]); err != nil {
		t.Fatal(err)
	}
	c1.send("GET", k1)
	c1.expect(fmt.Sprintf("-MOVED %d %s\r\n", KeySlot(k1), nodes[2].Addr()))
	c2 := dialRaw(t, nodes[2].Addr())
	c2.send("GET", k1)
	c2.expect("$1\r\nv\r\n") // one backend: the data did not move
	waitEvent(t, e, IsKind(nodes[2], KindSlotOwner))
}

func TestClusterMultiExec(t *testing.T) {
	e := newEmu(t, Config{})
	cl := newCluster(t, e, ClusterConfig{})
	nodes := cl.Nodes()
	k0 := keyOn(t, cl, nodes[0], "mine")
	k1 := keyOn(t, cl, nodes[1], "theirs")
	c := dialRaw(t, nodes[0].Addr())

	// A queued command for a slot owned elsewhere: MOVED at queue time,
	// EXEC aborts and nothing queued runs.
	c.send("MULTI")
	c.expect("+OK\r\n")
	c.send("SET", k0, "x")
	c.expect("+QUEUED\r\n")
	c.send("SET", k1, "x")
	c.expect(fmt.Sprintf("-MOVED %d %s\r\n", KeySlot(k1), nodes[1].Addr()))
	c.send("EXEC")
	c.expect(errExecAbort)
	c.send("EXISTS", k0)
	c.expect(":0\r\n") // the backend's transaction was discarded

	// A clean transaction.
	c.send("MULTI")
	c.expect("+OK\r\n")
	c.send("INCR", k0)
	c.expect("+QUEUED\r\n")
	c.send("EXEC")
	c.expect("*1\r\n:1\r\n")

	// Queued commands in two slots, each owned here: CROSSSLOT at EXEC.
	k0b := keyOn(t, cl, nodes[0], "other")
	for KeySlot(k0b) == KeySlot(k0) {
		k0b += "x"
		k0b = keyOn(t, cl, nodes[0], k0b)
	}
	c.send("MULTI")
	c.expect("+OK\r\n")
	c.send("INCR", k0)
	c.expect("+QUEUED\r\n")
	c.send("INCR", k0b)
	c.expect("+QUEUED\r\n")
	c.send("EXEC")
	c.expect("-CROSSSLOT Keys in request don't hash to the same slot\r\n")
	c.send("GET", k0)
	c.expect("$1\r\n1\r\n")

	// The slot moves between the queueing and EXEC: MOVED at EXEC.
	c.send("MULTI")
	c.expect("+OK\r\n")
	c.send("INCR", k0)
	c.expect("+QUEUED\r\n")
	if err := cl.SetOwner(strconv.Itoa(KeySlot(k0)), nodes[2]); err != nil {
		t.Fatal(err)
	}
	c.send("EXEC")
	c.expect(fmt.Sprintf("-MOVED %d %s\r\n", KeySlot(k0), nodes[2].Addr()))
	c.send("GET", k0)
	c.expect(fmt.Sprintf("-MOVED %d %s\r\n", KeySlot(k0), nodes[2].Addr()))
	c2 := dialRaw(t, nodes[2].Addr())
	c2.send("GET", k0)
	c2.expect("$1\r\n1\r\n")

	// DISCARD resets the state; EXEC without MULTI is the backend's error.
	c.send("MULTI")
	c.expect("+OK\r\n")
	c.send("GET", k1)
	c.read()
	c.send("DISCARD")
	c.expect("+OK\r\n")
	c.send("EXEC")
	c.expect("-ERR EXEC without MULTI\r\n")
	if st := nodes[0].Stats().Cluster; st.Moved != 4 || st.CrossSlot != 1 {
		t.Errorf("counters %+v, want Moved 4 CrossSlot 1", st)
	}
}

func TestClusterMigrateSlots(t *testing.T) {
	e := newEmu(t, Config{})
	cl := newCluster(t, e, ClusterConfig{})
	nodes := cl.Nodes()
	src, dst, other := nodes[0], nodes[1], nodes[2]
	k := keyInSlot(t, 100, "k")

	subscribe := func(ep *Endpoint) *rawClient {
		c := dialRaw(t, ep.Addr())
		c.hello3()
		c.optIn("internal-ip")
		return c
	}
	cs, cd, co := subscribe(src), subscribe(dst), subscribe(other)
	plain := dialRaw(t, src.Addr()) // RESP2, not opted in: no pushes

	seq, err := cl.MigrateSlots(SlotMigration{From: src, To: dst, Slots: "0-1000,2000",
		Duration: 300 * time.Millisecond, Latency: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	smigrating := "" + string(resp.AppendSMigrating(nil, seq, "0-1000,2000"))
	cs.expect(smigrating)
	cd.expect(smigrating)

	// During the migration the source still owns the slots (KeyMoved nil).
	start := time.Now()
	plain.send("SET", k, "v")
	plain.expect("+OK\r\n")
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("SET on the migrating source took %s, want the 50ms latency", d)
	}
	cd.send("GET", k)
	cd.expect(fmt.Sprintf("-MOVED 100 %s\r\n", src.Addr()))

	ev := waitEvent(t, e, IsKind(src, KindSMigrated))
	want := string(resp.AppendSMigrated(nil, ev.Seq, []resp.SlotMove{{Src: src.Addr(), Dst: dst.Addr(), Slots: "0-1000,2000"}}))
	if ev.Seq <= seq {
		t.Errorf("SMIGRATED seq %d not after SMIGRATING seq %d", ev.Seq, seq)
	}
	cs.expect(want)
	cd.expect(want)
	co.noFrameWithin(100 * time.Millisecond)
	plain.noFrameWithin(10 * time.Millisecond)

	// The ownership changed before the SMIGRATED was sent.
	if cl.Owner(100) != dst || cl.Owner(2000) != dst || cl.Owner(1001) != src {
		t.Errorf("owners after: %s %s %s", cl.Owner(100).Addr(), cl.Owner(2000).Addr(), cl.Owner(1001).Addr())
	}
	cs.send("GET", k)
	cs.expect(fmt.Sprintf("-MOVED 100 %s\r\n", dst.Addr()))
	cd.send("GET", k)
	cd.expect("$1\r\nv\r\n")
	cs.send("CLUSTER", "SLOTS")
	cs.expect(wantSlots(cl, true, []*Endpoint{dst, src, dst, src, dst, other},
		[]SlotRange{{0, 1000}, {1001, 1999}, {2000, 2000}, {2001, 5460}, {5461, 10922}, {10923, 16383}}))
	// The latency ended with the migration.
	start = time.Now()
	plain.send("PING")
	plain.expect("+PONG\r\n")
	if d := time.Since(start); d > 40*time.Millisecond {
		t.Logf("PING after the migration took %s (slow machine?)", d)
	}

	// Events, in order.
	var kinds []string
	for _, ev := range e.Events() {
		switch ev.Kind {
		case KindSlotMigrationStart, KindSMigrating, KindSlotOwner, KindSMigrated:
			kinds = append(kinds, ev.Kind+"@"+ev.Endpoint)
		}
	}
	wantKinds := []string{
		KindSlotMigrationStart + "@" + src.Addr(),
		KindSMigrating + "@" + src.Addr(), KindSMigrating + "@" + dst.Addr(),
		KindSlotOwner + "@" + dst.Addr(),
		KindSMigrated + "@" + src.Addr(), KindSMigrated + "@" + dst.Addr(),
	}
	if !slices.Equal(kinds, wantKinds) {
		t.Errorf("events %v\nwant %v", kinds, wantKinds)
	}

	// Errors.
	for _, bad := range []SlotMigration{
		{From: src, To: dst, Slots: "100"},                                                  // not src's any more
		{From: src, To: src, Slots: "1500"},                                                 // to itself
		{From: src, To: nil, Slots: "1500"},                                                 // no destination
		{From: src, To: dst, Slots: "1500-1400"},                                            // bad list
		{From: src, To: dst, Slots: "1500", Also: []SlotTarget{{Slots: "1500", To: other}}}, // twice
	} {
		if _, err := cl.MigrateSlots(bad); err == nil {
			t.Errorf("MigrateSlots(%+v) accepted", bad)
		}
	}
}

func TestClusterMigrateSeveralTriplets(t *testing.T) {
	e := newEmu(t, Config{})
	cl := newCluster(t, e, ClusterConfig{})
	nodes := cl.Nodes()
	src := nodes[0]
	c := dialRaw(t, src.Addr())
	c.hello3()
	c.optIn("")
	seq, err := cl.MigrateSlots(SlotMigration{From: src, To: nodes[1], Slots: "0-10,20-30",
		Also: []SlotTarget{{Slots: "40", To: nodes[2]}}, TripletPerRange: true, SourceOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	c.expect(string(resp.AppendSMigrating(nil, seq, "0-10,20-30,40")))
	ev := waitEvent(t, e, IsKind(src, KindSMigrated))
	c.expect(string(resp.AppendSMigrated(nil, ev.Seq, []resp.SlotMove{
		{Src: src.Addr(), Dst: nodes[1].Addr(), Slots: "0-10"},
		{Src: src.Addr(), Dst: nodes[1].Addr(), Slots: "20-30"},
		{Src: src.Addr(), Dst: nodes[2].Addr(), Slots: "40"},
	})))
	if countEvents(e, nodes[1], KindSMigrating) != 0 || countEvents(e, nodes[1], KindSMigrated) != 0 {
		t.Error("SourceOnly notified a destination")
	}
	// The notification parses as maint's parser reads it.
	n, err := resp.ParsePush(resp.AppendSMigrated(nil, ev.Seq, []resp.SlotMove{{Src: "a:1", Dst: "b:2", Slots: "40"}}))
	if err != nil || n.Kind != resp.KindSMigrated {
		t.Errorf("ParsePush: %+v %v", n, err)
	}
}

func TestClusterAskAndTryAgain(t *testing.T) {
	e := newEmu(t, Config{})
	cl := newCluster(t, e, ClusterConfig{})
	nodes := cl.Nodes()
	slot := KeySlot("{tag}")
	src, dst := cl.Owner(slot), nodes[0]
	if src == dst {
		dst = nodes[1]
	}
	movedKey := func(k string) bool { return strings.HasSuffix(k, ".moved") }
	if _, err := cl.MigrateSlots(SlotMigration{From: src, To: dst, Slots: strconv.Itoa(slot),
		Duration: time.Hour, KeyMoved: movedKey}); err != nil {
		t.Fatal(err)
	}
	a, b := "{tag}a.moved", "{tag}b.moved"
	stay := "{tag}c"
	cs := dialRaw(t, src.Addr())
	cd := dialRaw(t, dst.Addr())
	ask := fmt.Sprintf("-ASK %d %s\r\n", slot, dst.Addr())
	moved := fmt.Sprintf("-MOVED %d %s\r\n", slot, src.Addr())

	cs.send("SET", stay, "1")
	cs.expect("+OK\r\n") // still on the source
	cs.send("SET", a, "1")
	cs.expect(ask)
	cs.send("MGET", a, b)
	cs.expect(ask) // every key moved
	cs.send("MGET", a, stay)
	cs.expect(errTryAgain) // keys split

	cd.send("SET", a, "1")
	cd.expect(moved) // no ASKING: the source owns the slot
	cd.send("ASKING")
	cd.expect("+OK\r\n")
	cd.send("SET", a, "1")
	cd.expect("+OK\r\n")
	cd.send("GET", a)
	cd.expect(moved) // ASKING covers one command
	cd.send("ASKING")
	cd.expect("+OK\r\n")
	cd.send("MGET", a, stay)
	cd.expect(errTryAgain) // multi-key, not all arrived
	cd.send("ASKING")
	cd.expect("+OK\r\n")
	cd.send("MGET", a, b)
	cd.expect("*2\r\n$1\r\n1\r\n$-1\r\n")
	// ASKING before MULTI covers the whole transaction.
	cd.send("ASKING")
	cd.expect("+OK\r\n")
	cd.send("MULTI")
	cd.expect("+OK\r\n")
	cd.send("INCR", a)
	cd.expect("+QUEUED\r\n")
	cd.send("INCR", b)
	cd.expect("+QUEUED\r\n")
	cd.send("EXEC")
	cd.expect("*2\r\n:2\r\n:1\r\n")
	cd.send("GET", a)
	cd.expect(moved)
	// On the source, a transaction on moved keys: ASK at queue time, EXECABORT.
	cs.send("MULTI")
	cs.expect("+OK\r\n")
	cs.send("INCR", a)
	cs.expect(ask)
	cs.send("EXEC")
	cs.expect(errExecAbort)

	// CLUSTER NODES shows the open migration on both sides.
	if s := cs.do("CLUSTER", "NODES"); !strings.Contains(s, fmt.Sprintf("[%d->-%s]", slot, cl.NodeID(dst))) {
		t.Errorf("source CLUSTER NODES lacks the migrating mark: %q", s)
	}
	if s := cd.do("CLUSTER", "NODES"); !strings.Contains(s, fmt.Sprintf("[%d-<-%s]", slot, cl.NodeID(src))) {
		t.Errorf("destination CLUSTER NODES lacks the importing mark: %q", s)
	}

	if st := src.Stats().Cluster; st.Ask != 3 || st.TryAgain != 1 || st.Moved != 0 {
		t.Errorf("source counters %+v, want Ask 3 TryAgain 1", st)
	}
	if st := dst.Stats().Cluster; st.Moved != 3 || st.TryAgain != 1 || st.Asking != 4 {
		t.Errorf("destination counters %+v, want Moved 3 TryAgain 1 Asking 4", st)
	}
}

func TestClusterRemoveSource(t *testing.T) {
	e := newEmu(t, Config{})
	cl := newCluster(t, e, ClusterConfig{})
	nodes := cl.Nodes()
	src := nodes[2]
	c := dialRaw(t, src.Addr())
	c.hello3()
	c.optIn("internal-ip")
	if _, err := cl.MigrateSlots(SlotMigration{From: src, To: nodes[0], Slots: "10923-12000",
		Also: []SlotTarget{{Slots: "12001-16383", To: nodes[1]}}, Duration: 50 * time.Millisecond,
		RemoveSource: true, CloseAfter: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	c.read() // SMIGRATING
	smigrated := c.read()
	if !strings.Contains(smigrated, "SMIGRATED") || !strings.Contains(smigrated, "12001-16383") {
		t.Fatalf("got %q", smigrated)
	}
	waitEvent(t, e, IsKind(src, KindNodeRemove))
	waitEvent(t, e, func(ev Event) bool { return IsKind(src, KindRefuse)(ev) && strings.HasPrefix(ev.Detail, "on") })
	// Removed: not in the topology, not accepting, its open connection
	// still answered (with redirects) until the close.
	if got := cl.Addrs(); len(got) != 2 || slices.Contains(got, src.Addr()) {
		t.Errorf("Addrs after removal: %v", got)
	}
	if nc, err := net.DialTimeout("tcp", src.Addr(), time.Second); err == nil {
		_ = nc.Close()
		t.Error("a removed node accepted a connection")
	}
	c.send("CLUSTER", "SLOTS")
	c.expect(wantSlots(cl, true, []*Endpoint{nodes[0], nodes[1], nodes[0], nodes[1]},
		[]SlotRange{{0, 5460}, {5461, 10922}, {10923, 12000}, {12001, 16383}}))
	k := keyInSlot(t, 16000, "k")
	c.send("GET", k)
	c.expect(fmt.Sprintf("-MOVED 16000 %s\r\n", nodes[1].Addr()))
	if s := c.do("CLUSTER", "NODES"); strings.Count(s, "master") != 2 {
		t.Errorf("CLUSTER NODES after removal: %q", s)
	}

	ev := waitEvent(t, e, IsKind(src, KindRemovedClose))
	if ev.Detail != "closed=1 owed=0" {
		t.Errorf("removed_close %q", ev.Detail)
	}
	if _, err := c.readErr(5 * time.Second); err == nil {
		t.Error("connection to the removed node still open")
	}
	if st := src.Stats(); st.Cluster.ClosedAtRemoval != 1 || st.Open != 0 {
		t.Errorf("stats %+v", st)
	}
	if err := cl.RemoveNode(src, 0); err == nil {
		t.Error("removed twice")
	}
	if err := cl.RemoveNode(nodes[0], 0); err == nil {
		t.Error("removed a node owning slots")
	}
}

func TestClusterAddNode(t *testing.T) {
	e := newEmu(t, Config{})
	cl := newCluster(t, e, ClusterConfig{Nodes: 2})
	nw, err := cl.AddNode("127.0.0.9:0")
	if err != nil {
		t.Fatal(err)
	}
	if len(cl.Nodes()) != 3 || len(cl.Slots(nw)) != 0 {
		t.Fatalf("nodes %v slots %v", cl.Addrs(), cl.Slots(nw))
	}
	c := dialRaw(t, nw.Addr())
	if s := c.do("CLUSTER", "SHARDS"); !strings.HasPrefix(s, "*3\r\n") {
		t.Errorf("CLUSTER SHARDS: %q", s)
	}
	k := keyInSlot(t, 0, "k")
	c.send("GET", k)
	c.expect(fmt.Sprintf("-MOVED 0 %s\r\n", cl.Nodes()[0].Addr()))
	if _, err := cl.MigrateSlots(SlotMigration{From: cl.Nodes()[0], To: nw, Slots: "0"}); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, e, IsKind(nw, KindSMigrated))
	c.send("GET", k)
	c.expect("$-1\r\n")
}

// TestClusterMovingNode: a MOVING of a cluster endpoint works as for a
// standalone one, and ReplaceNode gives its slots to the successor.
func TestClusterMovingNode(t *testing.T) {
	e := newEmu(t, Config{})
	cl := newCluster(t, e, ClusterConfig{})
	old := cl.Nodes()[0]
	nw, err := cl.AddNode("127.0.0.9:" + old.Port())
	if err != nil {
		if nw, err = cl.AddNode("127.0.0.9:0"); err != nil {
			t.Fatal(err)
		}
	}
	c := dialRaw(t, old.Addr())
	c.hello3()
	c.optIn("internal-ip")
	seq := old.Moving(Moving{Window: 300 * time.Millisecond, To: nw, StopAccepting: true})
	c.expect(string(resp.AppendMoving(nil, seq, 1, nw.Addr(), false)))
	if err := cl.ReplaceNode(old, nw); err != nil {
		t.Fatal(err)
	}
	if cl.Owner(0) != nw || len(cl.Slots(old)) != 0 || slices.Contains(cl.Addrs(), old.Addr()) {
		t.Fatalf("after ReplaceNode: owner %s, old slots %v, nodes %v", cl.Owner(0).Addr(), cl.Slots(old), cl.Addrs())
	}
	k := keyInSlot(t, 0, "k")
	c.send("GET", k) // still open: the window has not ended
	c.expect(fmt.Sprintf("-MOVED 0 %s\r\n", nw.Addr()))
	cn := dialRaw(t, nw.Addr())
	cn.send("SET", k, "v")
	cn.expect("+OK\r\n")
	ev := waitEvent(t, e, IsKind(old, KindWindowEndClose))
	if ev.Detail != "closed=1 owed=0" {
		t.Errorf("window end: %q", ev.Detail)
	}
	if err := cl.ReplaceNode(old, nw); err == nil {
		t.Error("replaced a removed node")
	}
	if err := cl.ReplaceNode(nw, nw); err == nil {
		t.Error("replaced a node by itself")
	}
}

func TestClusterTripletAddrAndRedirectLog(t *testing.T) {
	e := newEmu(t, Config{})
	cl := newCluster(t, e, ClusterConfig{Nodes: 2, LogRedirects: true})
	a, b := cl.Nodes()[0], cl.Nodes()[1]
	c := dialRaw(t, a.Addr())
	c.hello3()
	c.optIn("internal-fqdn")
	name := func(ep *Endpoint) string { return "node" + ep.IP()[len("127.0.0."):] + ".example:" + ep.Port() }
	if _, err := cl.MigrateSlots(SlotMigration{From: a, To: b, Slots: "7", TripletAddr: name}); err != nil {
		t.Fatal(err)
	}
	c.read() // SMIGRATING
	ev := waitEvent(t, e, IsKind(a, KindSMigrated))
	c.expect(string(resp.AppendSMigrated(nil, ev.Seq, []resp.SlotMove{{Src: "node2.example:" + a.Port(), Dst: "node3.example:" + b.Port(), Slots: "7"}})))
	waitEvent(t, e, IsKind(b, KindSlotOwner)) // logged with the real address

	k := keyInSlot(t, 7, "k")
	c.send("GET", k)
	c.expect(fmt.Sprintf("-MOVED 7 %s\r\n", b.Addr()))
	ev = waitEvent(t, e, IsKind(a, KindRedirect))
	if ev.Detail != fmt.Sprintf("MOVED 7 %s", b.Addr()) || ev.Conn == 0 {
		t.Errorf("redirect event %+v", ev)
	}
}

// TestClusterMigrateSlotsReplayedToNewConnections: with SetReplayActive, a
// connection opting in while a slot migration is open gets its SMIGRATING
// right after the +OK, on the source and on the destination; one opting in
// after the SMIGRATED gets nothing; without SetReplayActive nothing is
// replayed.
func TestClusterMigrateSlotsReplayedToNewConnections(t *testing.T) {
	e := newEmu(t, Config{})
	cl := newCluster(t, e, ClusterConfig{})
	nodes := cl.Nodes()
	src, dst, other := nodes[0], nodes[1], nodes[2]
	src.SetReplayActive(true)
	dst.SetReplayActive(true)
	optedIn := func(ep *Endpoint) *rawClient {
		c := dialRaw(t, ep.Addr())
		c.hello3()
		c.optIn("internal-ip")
		return c
	}
	seq, err := cl.MigrateSlots(SlotMigration{From: src, To: dst, Slots: "0-1000", Duration: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	smigrating := string(resp.AppendSMigrating(nil, seq, "0-1000"))
	for _, ep := range []*Endpoint{src, dst} {
		optedIn(ep).expect(smigrating)
		waitEvent(t, e, func(ev Event) bool { return ev.Kind == KindReplay && ev.Endpoint == ep.Addr() && ev.Seq == seq })
	}
	optedIn(other).noFrameWithin(100 * time.Millisecond) // not part of the migration

	// A second migration, completed at once: only the open one is replayed.
	seq2, err := cl.MigrateSlots(SlotMigration{From: src, To: other, Slots: "2000"})
	if err != nil {
		t.Fatal(err)
	}
	waitEvent(t, e, func(ev Event) bool { return ev.Kind == KindSMigrated && ev.Endpoint == src.Addr() && ev.Seq > seq2 })
	c := optedIn(src)
	c.expect(smigrating)
	c.noFrameWithin(100 * time.Millisecond)

	src.SetReplayActive(false)
	optedIn(src).noFrameWithin(100 * time.Millisecond)
}
