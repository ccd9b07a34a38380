package maint

import "unsafe"

// StateSize is the size in bytes of maint's structures, for the memory
// table of BenchmarkSideBySide: Conn per connection, Node per server node
// reached, Target per address the client dials, Maint per client. Buffers
// allocated only while maintenance is going on (a stripped notification,
// a peeked window) are not included.
type StateSize struct{ Conn, Node, Target, Maint uintptr }

// StateSizes returns the sizes of maint's structures.
func StateSizes() StateSize {
	return StateSize{
		Conn:   unsafe.Sizeof(conn{}),
		Node:   unsafe.Sizeof(node{}),
		Target: unsafe.Sizeof(target{}),
		Maint:  unsafe.Sizeof(Maint{}),
	}
}
