package vms

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestGoTrackedAfterShutdown: once Close has begun, no goroutine of the
// service starts, and Close waits for those that started before.
func TestGoTrackedAfterShutdown(t *testing.T) {
	s := &Service{cfg: Config{Now: time.Now}, live: map[string]*liveVM{}, procCount: map[string]int{}, stop: make(chan struct{})}
	s.life, s.endLife = context.WithCancel(t.Context())
	release := make(chan struct{})
	var finished atomic.Bool
	if !s.goTracked(func() { <-release; finished.Store(true) }) {
		t.Fatal("goTracked refused before Close")
	}
	shut := make(chan error, 1)
	go func() { shut <- s.Close(t.Context()) }()
	// Close has begun once it set closing; from then on nothing starts.
	for {
		s.mu.Lock()
		closing := s.closing
		s.mu.Unlock()
		if closing {
			break
		}
		time.Sleep(time.Millisecond)
	}
	var ran atomic.Bool
	if s.goTracked(func() { ran.Store(true) }) {
		t.Fatal("goTracked started a goroutine during Close")
	}
	select {
	case <-shut:
		t.Fatal("Close returned while a tracked goroutine runs")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	if !finished.Load() || ran.Load() {
		t.Fatalf("finished %v, ran after shutdown %v", finished.Load(), ran.Load())
	}
}

// TestLaunchHoldsTheVM: a call that launches something holds its VM from
// the lookup on, so the idle reaper cannot dispose of it mid-launch (on a
// loaded machine a spawn outlasted a 3 s idle timeout and was cut short by
// the reaper, then answered as a bad command). The VM has no engine here:
// an empty cwd needs none, and idleness is the VM's own bookkeeping.
func TestLaunchHoldsTheVM(t *testing.T) {
	past := time.Now().Add(-time.Hour)
	lv := &liveVM{id: "vm1", tenantID: "t1", idle: time.Second, lastActive: past, procs: map[uint32]*Process{}, shells: map[string]*Shell{}}
	s := &Service{cfg: Config{Now: func() time.Time { return past }}, live: map[string]*liveVM{lv.id: lv}}
	later := time.Now()
	if !lv.idleSince(later) {
		t.Fatal("the VM is not idle before the call")
	}
	got, release, err := s.lookupAt(t.Context(), "t1", "vm1", "")
	if err != nil || got != lv {
		t.Fatalf("lookupAt = %v, %v", got, err)
	}
	if lv.idleSince(later.Add(time.Hour)) {
		t.Fatal("the VM counts as idle while a launch holds it")
	}
	release()
	if !lv.idleSince(time.Now().Add(2 * time.Second)) {
		t.Fatal("the VM is not idle once the launch let it go")
	}
}
