package vms

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestGoTrackedAfterShutdown: once Shutdown has begun, no goroutine of the
// service starts, and Shutdown waits for those that started before.
func TestGoTrackedAfterShutdown(t *testing.T) {
	s := &Service{cfg: Config{Now: time.Now}, live: map[string]*liveVM{}, procCount: map[string]int{}, stop: make(chan struct{})}
	release := make(chan struct{})
	var finished atomic.Bool
	if !s.goTracked(func() { <-release; finished.Store(true) }) {
		t.Fatal("goTracked refused before Shutdown")
	}
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(t.Context()) }()
	// Shutdown has begun once it set closing; from then on nothing starts.
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
		t.Fatal("goTracked started a goroutine during Shutdown")
	}
	select {
	case <-shut:
		t.Fatal("Shutdown returned while a tracked goroutine runs")
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
