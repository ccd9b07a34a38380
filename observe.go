package maint

import (
	"sync"
	"sync/atomic"
)

// An observer is one function subscribed to a Maint's events.
type observer struct{ f func(Event) }

// observers are the functions subscribed to a Maint's events: a list
// copied on write under mu, which emitting an event loads once.
type observers struct {
	mu   sync.Mutex // serialises writers
	list atomic.Pointer[[]*observer]
}

// add subscribes o.
func (ob *observers) add(o *observer) {
	ob.mu.Lock()
	swapIn(&ob.list, nil, o)
	ob.mu.Unlock()
}

// remove unsubscribes o.
func (ob *observers) remove(o *observer) {
	ob.mu.Lock()
	swapIn(&ob.list, o, nil)
	ob.mu.Unlock()
}

// notify calls every observer with e: one atomic load when there is none.
func (ob *observers) notify(e Event) {
	if l := ob.list.Load(); l != nil {
		for _, o := range *l {
			o.f(e)
		}
	}
}

// Observe subscribes f to every Event the Maint emits from now on, in
// addition to Config.OnEvent, and returns the function that unsubscribes
// it (idempotent). f is called on the goroutine that emits the event,
// outside any lock of the Maint, and must not block. Observers are how
// packages such as maintotel attach to a Maint that already runs.
//
// Emitting an event loads the observer list once: with no observer, it
// costs one atomic load and allocates nothing; subscribing copies the list.
func (m *Maint) Observe(f func(Event)) (cancel func()) {
	o := &observer{f: f}
	m.obs.add(o)
	var once sync.Once
	return func() { once.Do(func() { m.obs.remove(o) }) }
}

// groupObservers are the functions subscribed to a Group: each is
// subscribed to the group's Maints, present and future. Guarded by the
// group's mu.
type groupObservers struct {
	fs map[*observer]map[*Maint]func() // the observer, and its cancel on each Maint
}

// Observe subscribes f to the events of every Maint of the group, those
// installed already and those installed later (a cluster's new nodes), and
// returns the function that unsubscribes it from all of them (idempotent).
// Events do not say which Maint emitted them; Event.Node names the node.
func (g *Group) Observe(f func(Event)) (cancel func()) {
	o := &observer{f: f}
	g.mu.Lock()
	if g.obs.fs == nil {
		g.obs.fs = make(map[*observer]map[*Maint]func())
	}
	g.obs.fs[o] = make(map[*Maint]func())
	g.mu.Unlock()
	// From here on, attachLocked subscribes o to the Maints added; those
	// already there are subscribed now (once each, whichever comes first),
	// unless forgotten meanwhile (forget has unsubscribed o from them, or
	// will: a subscription made now would outlive it).
	g.mu.Lock()
	ms := append([]*member(nil), g.ms...)
	g.mu.Unlock()
	for _, mb := range ms {
		g.mu.Lock()
		if cs, ok := g.obs.fs[o]; ok && cs[mb.m] == nil && !mb.gone {
			cs[mb.m] = mb.m.Observe(f)
		}
		g.mu.Unlock()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			cs := g.obs.fs[o]
			delete(g.obs.fs, o)
			g.mu.Unlock()
			for _, c := range cs {
				c()
			}
		})
	}
}

// detachLocked forgets the subscriptions of the group's observers to m, a
// Maint leaving the group (it is being closed), so that a group whose node
// clients come and go keeps bounded memory. g.mu is held.
func (g *Group) detachLocked(m *Maint) {
	for _, cs := range g.obs.fs {
		delete(cs, m)
	}
}

// attachLocked subscribes the group's observers to m, a Maint joining the
// group: every place that adds a Maint to the group calls it, with g.mu
// held.
func (g *Group) attachLocked(m *Maint) {
	for o, cs := range g.obs.fs {
		if cs[m] == nil {
			cs[m] = m.Observe(o.f)
		}
	}
}
