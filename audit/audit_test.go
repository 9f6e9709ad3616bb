package audit_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/audit"
	"github.com/agentos-gateway/agentos-gateway/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// openStore opens a real SQLite store of the test's own.
func openStore(t *testing.T) *store.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	db, err := store.Open(ctx, filepath.Join(t.TempDir(), "gateway.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// gated is the real store behind a gate: while the gate is shut, writes
// wait (a slow disk, a locked database), and fail, the first failures of
// them, with an injected error, for the cases a healthy store cannot make.
type gated struct {
	*store.DB
	open  chan struct{}
	fails atomic.Int32 // writes still to refuse
	calls atomic.Int32
	// holdFirstOnly shuts the gate on the first write only.
	holdFirstOnly bool
}

func (g *gated) RecordAudit(ctx context.Context, recs ...gateway.AuditRecord) error {
	if n := g.calls.Add(1); n == 1 || !g.holdFirstOnly {
		select {
		case <-g.open:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if g.fails.Add(-1) >= 0 {
		return errors.New("injected: the disk is full")
	}
	return g.DB.RecordAudit(ctx, recs...)
}

func newGated(t *testing.T, shut bool, fails int32) *gated {
	g := &gated{DB: openStore(t), open: make(chan struct{})}
	if !shut {
		close(g.open)
	}
	g.fails.Store(fails)
	return g
}

func rec(i int) gateway.AuditRecord {
	return gateway.AuditRecord{TenantID: "t1", Method: "POST", Route: "/v1/vms", Status: 201, RequestID: fmt.Sprintf("req-%d", i)}
}

// stored returns the request ids of the stored records, oldest first.
func stored(t *testing.T, db *store.DB) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var ids []string
	f := gateway.AuditFilter{Limit: 500}
	for {
		page, err := db.ListAudit(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range page.Items {
			ids = append(ids, a.RequestID)
		}
		if page.NextCursor == "" {
			return ids
		}
		f.Cursor = page.NextCursor
	}
}

func step(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestWriter(t *testing.T) {
	tests := []struct {
		name string
		// shut holds the store's writes until the records are in; fails
		// refuses that many writes first.
		shut  bool
		fails int32
		queue int
		n     int
		// wantLost: every record was given up on.
		wantLost bool
	}{
		{name: "queued and batched", shut: true, n: 1000, queue: 2000},
		{name: "a refused write is retried", fails: 2, n: 10, queue: 100},
		{name: "a write refused for good is counted as lost", fails: 1000, n: 3, queue: 100, wantLost: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := newGated(t, tc.shut, tc.fails)
			var inline, lost atomic.Int32
			w := audit.New(g, audit.Config{Queue: tc.queue, Batch: 64,
				OnInline: func() { inline.Add(1) }, OnLost: func(n int) { lost.Add(int32(n)) }})
			var wg sync.WaitGroup
			for i := range tc.n {
				wg.Go(func() { w.Record(context.Background(), rec(i)) })
			}
			wg.Wait()
			if tc.shut {
				close(g.open)
			}
			if err := w.Flush(step(t)); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(step(t)); err != nil {
				t.Fatal(err)
			}
			got := stored(t, g.DB)
			switch {
			case tc.wantLost:
				if int(lost.Load()) != tc.n || len(got) != 0 {
					t.Fatalf("lost %d, stored %d; want all %d lost", lost.Load(), len(got), tc.n)
				}
				return
			case len(got) != tc.n || lost.Load() != 0:
				t.Fatalf("stored %d of %d records, lost %d", len(got), tc.n, lost.Load())
			}
			seen := map[string]bool{}
			for _, id := range got {
				if seen[id] {
					t.Fatalf("%s stored twice", id)
				}
				seen[id] = true
			}
			if inline.Load() != 0 {
				t.Fatalf("%d records written inline with room in the queue", inline.Load())
			}
			// Held while they queued, the records go in batches of 64
			// (after the one the writer took first).
			if max := int32(1 + (tc.n-1+63)/64); tc.shut && g.calls.Load() > max {
				t.Fatalf("%d writes for %d records, want at most %d: not batched", g.calls.Load(), tc.n, max)
			}
		})
	}
}

// TestFullQueueWritesInline: while the writer is stuck on a batch and the
// queue is full, a record is written on its caller's path: slower, never
// lost.
func TestFullQueueWritesInline(t *testing.T) {
	g := newGated(t, true, 0)
	g.holdFirstOnly = true
	var inline atomic.Int32
	w := audit.New(g, audit.Config{Queue: 1, OnInline: func() { inline.Add(1) }})
	w.Record(context.Background(), rec(0))
	deadline := time.Now().Add(10 * time.Second)
	for g.calls.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the writer never took the first record")
		}
		time.Sleep(time.Millisecond)
	}
	for i := 1; i < 10; i++ {
		w.Record(context.Background(), rec(i)) // 1 queues, the rest go inline
	}
	if inline.Load() != 8 {
		t.Fatalf("%d records inline, want 8", inline.Load())
	}
	close(g.open)
	if err := w.Close(step(t)); err != nil {
		t.Fatal(err)
	}
	if got := stored(t, g.DB); len(got) != 10 {
		t.Fatalf("stored %d of 10", len(got))
	}
}

// TestFlushWaitsForQueued: Flush returns only once the records queued before
// it are stored, and gives up with its context while the store is stuck.
func TestFlushWaitsForQueued(t *testing.T) {
	g := newGated(t, true, 0)
	w := audit.New(g, audit.Config{})
	defer func() {
		if err := w.Close(step(t)); err != nil {
			t.Error(err)
		}
	}()
	for i := range 5 {
		w.Record(context.Background(), rec(i))
	}
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := w.Flush(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("flush past a stuck store: %v", err)
	}
	close(g.open)
	if err := w.Flush(step(t)); err != nil {
		t.Fatal(err)
	}
	if got := stored(t, g.DB); len(got) != 5 {
		t.Fatalf("after flush, %d records stored, want 5", len(got))
	}
}

// TestCloseDrains: Close stores what was queued; a record after Close is
// written on its caller's path; a Close whose context ends first says so.
func TestCloseDrains(t *testing.T) {
	g := newGated(t, true, 0)
	var inline atomic.Int32
	w := audit.New(g, audit.Config{OnInline: func() { inline.Add(1) }})
	for i := range 20 {
		w.Record(context.Background(), rec(i))
	}
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := w.Close(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("close past a stuck store: %v", err)
	}
	close(g.open)
	if err := w.Close(step(t)); err != nil {
		t.Fatal(err)
	}
	w.Record(context.Background(), rec(20))
	if err := w.Flush(step(t)); err != nil {
		t.Fatal(err)
	}
	if got := stored(t, g.DB); len(got) != 21 || inline.Load() != 1 {
		t.Fatalf("stored %d of 21, %d inline (want 1: the one after close)", len(got), inline.Load())
	}
}

// BenchmarkRecord: what an audited request waits for, before (the store's
// write on the request's path) and after (a queued record), on a real
// SQLite store; "queued+stored" also waits for the writer to store them, the
// throughput of the batched writes.
func BenchmarkRecord(b *testing.B) {
	open := func(b *testing.B) *store.DB {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		db, err := store.Open(ctx, filepath.Join(b.TempDir(), "gateway.db"))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = db.Close() })
		return db
	}
	b.Run("request-path", func(b *testing.B) {
		db := open(b)
		ctx := context.Background()
		for i := 0; b.Loop(); i++ {
			if err := db.RecordAudit(ctx, rec(i)); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, stored := range []bool{false, true} {
		name := "queued"
		if stored {
			name = "queued+stored"
		}
		b.Run(name, func(b *testing.B) {
			w := audit.New(open(b), audit.Config{Queue: 1 << 20})
			ctx := context.Background()
			// A loop over b.N, not b.Loop, whose timer stops with the
			// loop: queued+stored times the Flush too.
			b.ResetTimer()
			for i := range b.N {
				w.Record(ctx, rec(i))
			}
			if !stored {
				b.StopTimer()
			}
			if err := w.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := w.Close(ctx); err != nil {
				b.Fatal(err)
			}
		})
	}
}
