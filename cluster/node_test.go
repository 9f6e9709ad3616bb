package cluster

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/store"
)

// TestDrain runs a node on a real (SQLite) store and drains it: it cordons
// itself at its next heartbeat and leaves once its VMs are gone, or at the
// deadline with VMs left.
func TestDrain(t *testing.T) {
	for _, tc := range []struct {
		name     string
		vms      int32
		deadline time.Duration
		reason   string
	}{
		{"VMs gone", 0, time.Hour, "drained"},
		{"deadline", 2, -time.Second, "drain deadline reached"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, err := store.Open(t.Context(), ":memory:")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			var (
				cordoned atomic.Bool
				live     atomic.Int32
				mu       sync.Mutex
				reasons  []string
				left     = make(chan struct{})
			)
			live.Store(tc.vms)
			n, _, err := Join(t.Context(), Config{
				ID: "n1", AdvertiseAddr: "http://127.0.0.1:1", Heartbeat: 20 * time.Millisecond, Timeout: time.Second,
				Load:    func() store.NodeLoad { return store.NodeLoad{VMs: int(live.Load()), Capacity: 8} },
				Cordon:  func() { cordoned.Store(true) },
				LiveVMs: func() int { return int(live.Load()) },
				Leave: func(reason string) {
					mu.Lock()
					reasons = append(reasons, reason)
					mu.Unlock()
					close(left)
				},
				Log: zerolog.Nop(),
			}, db)
			if err != nil {
				t.Fatal(err)
			}
			if c, err := n.Candidates(t.Context()); err != nil || len(c) != 1 || c[0].ID != "n1" {
				t.Fatalf("Candidates before the drain = %+v, %v", c, err)
			}
			if _, err := n.Drain(t.Context(), "n1", time.Now().Add(tc.deadline)); err != nil {
				t.Fatal(err)
			}
			if c, err := n.Candidates(t.Context()); err != nil || len(c) != 0 {
				t.Fatalf("Candidates of a draining node = %+v, %v; want none", c, err)
			}
			select {
			case <-left:
			case <-time.After(10 * time.Second):
				t.Fatal("the node did not leave")
			}
			if !cordoned.Load() || !n.Draining() {
				t.Error("the node left without cordoning itself")
			}
			if err := n.Close(context.Background(), "drained"); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(reasons) != 1 || reasons[0] != tc.reason {
				t.Errorf("left for %q; want once, for %q", reasons, tc.reason)
			}
			if rec, _ := db.GetNode(t.Context(), "n1"); rec.State != gateway.NodeDead {
				t.Errorf("after Close the node is %s; want dead", rec.State)
			}
		})
	}
}
