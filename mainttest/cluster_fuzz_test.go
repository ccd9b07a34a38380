package mainttest

import (
	"bufio"
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/maintkit/maint/internal/resp"
)

func FuzzParseSlots(f *testing.F) {
	for _, s := range []string{"0-5460", "123,456,789-1000", " 1 , 2", "16383", "16384", "5-3", "", ",", "1-", "-", "00001-00002", "1,1,1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rs, err := ParseSlots(s)
		if err != nil {
			return
		}
		if len(rs) == 0 {
			t.Fatalf("ParseSlots(%q): no ranges and no error", s)
		}
		for i, r := range rs {
			if r.Start < 0 || r.End >= NumSlots || r.Start > r.End {
				t.Fatalf("ParseSlots(%q): bad range %+v", s, r)
			}
			if i > 0 && r.Start <= rs[i-1].End+1 {
				t.Fatalf("ParseSlots(%q): ranges not merged: %v", s, rs)
			}
		}
		again, err := ParseSlots(FormatSlots(rs))
		if err != nil || !slices.Equal(again, rs) {
			t.Fatalf("round trip of %q: %v %v, want %v", s, again, err, rs)
		}
	})
}

func FuzzKeySlot(f *testing.F) {
	for _, s := range []string{"", "foo", "{user}.a", "{}", "{{a}}", "a{b}c{d}", "}{", "\xff\x00"} {
		f.Add(s, "tag")
	}
	f.Fuzz(func(t *testing.T, key, tag string) {
		slot := KeySlot(key)
		if slot < 0 || slot >= NumSlots || KeySlot([]byte(key)) != slot {
			t.Fatalf("KeySlot(%q) = %d, []byte form %d", key, slot, KeySlot([]byte(key)))
		}
		if tag != "" && !strings.Contains(tag, "}") {
			if got := KeySlot("{" + tag + "}" + key); got != KeySlot(tag) {
				t.Fatalf("hash tag %q: slot %d, want %d", tag, got, KeySlot(tag))
			}
		}
	})
}

// FuzzClusterRoute feeds client bytes through what a cluster node does with
// a command: RESP parsing, key extraction and routing. Keys must be
// arguments, and the verdict must agree with the topology.
func FuzzClusterRoute(f *testing.F) {
	for _, c := range []string{
		"*2\r\n$3\r\nGET\r\n$1\r\na\r\n",
		"*3\r\n$4\r\nMGET\r\n$4\r\n{t}a\r\n$4\r\n{t}b\r\n",
		"*5\r\n$4\r\nEVAL\r\n$1\r\ns\r\n$1\r\n2\r\n$1\r\na\r\n$1\r\nb\r\n",
		"*6\r\n$5\r\nXREAD\r\n$7\r\nSTREAMS\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\n0\r\n$1\r\n0\r\n",
		"*5\r\n$11\r\nZUNIONSTORE\r\n$1\r\nd\r\n$1\r\n9\r\n$1\r\na\r\n$1\r\nb\r\n",
		"MSET a 1 b 2\r\n",
		"OBJECT ENCODING x\r\n",
	} {
		f.Add([]byte(c), true)
	}
	// Node 0 owns 0-8191, node 1 the rest; slots 0-99 migrate from 0 to 1,
	// with keys ending in "m" already moved.
	tp := &topology{nodes: []clusterNode{{ep: &Endpoint{addr: "127.0.0.2:1"}}, {ep: &Endpoint{addr: "127.0.0.3:1"}}}}
	for s := range tp.owner {
		tp.owner[s] = int16(s / 8192)
	}
	tp.mig = map[int]*slotMigration{}
	sm := &slotMigration{src: 0, dst: 1, keyMoved: func(k string) bool { return strings.HasSuffix(k, "m") }}
	for s := 0; s < 100; s++ {
		tp.mig[s] = sm
	}
	f.Fuzz(func(t *testing.T, data []byte, asking bool) {
		frame, err := resp.ReadCommand(bufio.NewReader(bytes.NewReader(data)), nil)
		if err != nil {
			return
		}
		name, args, err := resp.CommandName(frame)
		if err != nil {
			return
		}
		keys := keysOf(nil, name, args)
		for _, k := range keys {
			found := false
			for _, a := range args {
				if len(a) > 0 && len(k) > 0 && &a[0] == &k[0] && len(a) == len(k) || len(k) == 0 && len(a) == 0 {
					found = true
				}
			}
			if !found {
				t.Fatalf("%s: key %q is not an argument", name, k)
			}
		}
		for self := 0; self < 2; self++ {
			reply, kind := tp.route(self, keys, asking)
			if (kind == served) != (reply == nil) {
				t.Fatalf("route: kind %d with reply %q", kind, reply)
			}
			if len(keys) == 0 {
				if kind != served {
					t.Fatalf("keyless %s refused: %q", name, reply)
				}
				continue
			}
			slot := KeySlot(keys[0])
			same := true
			for _, k := range keys {
				same = same && KeySlot(k) == slot
			}
			switch {
			case !same:
				if kind != redirCrossSlot {
					t.Fatalf("keys in several slots: %d %q", kind, reply)
				}
			case tp.mig[slot] == nil:
				owner := int(tp.owner[slot])
				if (owner == self) != (kind == served) || owner != self && kind != redirMoved {
					t.Fatalf("slot %d owner %d self %d: %d %q", slot, owner, self, kind, reply)
				}
			case kind == redirMoved || kind == redirAsk:
				if !bytes.HasSuffix(reply, []byte(" "+tp.nodes[1-self].ep.addr+"\r\n")) {
					t.Fatalf("redirect to the wrong node: %q", reply)
				}
			}
		}
	})
}
