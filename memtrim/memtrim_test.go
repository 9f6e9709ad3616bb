package memtrim

import (
	"context"
	"testing"
	"time"
)

// TestDue: memory is returned once allocation has calmed after a burst
// left slack, not while allocation goes on, not for slack that a return
// could not remove, and not for slack below the floor.
func TestDue(t *testing.T) {
	const mib = 1 << 20
	var tr trimmer
	tr.prev = sample{allocs: 1000 * mib}
	// During a burst: much slack, but allocation goes on at a pace that
	// has the collector run soon anyway.
	burst := sample{allocs: 1400 * mib, live: 60 * mib, stacks: 120 * mib, objects: 200 * mib, free: 100 * mib}
	if tr.due(burst) {
		t.Fatal("due while allocating")
	}
	// After it: as much slack, allocation calm.
	calm := burst
	calm.allocs += mib
	if !tr.due(calm) {
		t.Fatal("not due once calm")
	}
	// What the return left (room in spans still in use) is not returned
	// again.
	left := sample{allocs: calm.allocs, live: 60 * mib, objects: 60 * mib, unused: 50 * mib, stacks: 120 * mib}
	tr.returned(left)
	idle := left
	idle.allocs += mib
	if tr.due(idle) {
		t.Fatal("due for slack the last return left")
	}
	// Slack under the floor, on a small heap, is left to the runtime.
	var small trimmer
	if small.due(sample{live: 4 * mib, objects: 40 * mib, free: 20 * mib}) {
		t.Fatal("due under the floor")
	}
	// Slack over the floor but under a quarter of what the program holds
	// is the collector's ordinary room.
	if small.due(sample{live: 400 * mib, stacks: 200 * mib, objects: 500 * mib, free: 40 * mib}) {
		t.Fatal("due within a quarter of the program's memory")
	}
}

// TestRun: Run reads the runtime's accounts every period and stops with
// its context.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, Config{Every: time.Millisecond})
	}()
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not stop with its context")
	}
}
