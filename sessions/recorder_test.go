package sessions

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/agentos"
	"github.com/agentos-gateway/agentos-gateway/idempotency"
	"github.com/agentos-gateway/agentos-gateway/internal/mockanthropic"
	"github.com/agentos-gateway/agentos-gateway/sidecarpool"
	"github.com/agentos-gateway/agentos-gateway/store"
	"github.com/agentos-gateway/agentos-gateway/vms"
)

// This file runs the service over the real parts (a real sidecar through
// the pool, a real pi agent against the offline mock model, a real SQLite
// store) with one thing a real part cannot do on demand: a store that
// refuses writes. It proves the record heals itself: events the store
// refused are read back from the engine's history, so the stored sequence
// ends complete and followers see every event once.

// flakyStore is the real store whose AppendSessionEvents fails while
// failing is set.
type flakyStore struct {
	*store.DB
	failing atomic.Bool
	refused atomic.Int64
}

func (f *flakyStore) AppendSessionEvents(ctx context.Context, events ...gateway.SessionEvent) error {
	if f.failing.Load() {
		f.refused.Add(1)
		return gateway.Errorf(gateway.CodeUnavailable, "the store is down (on purpose)")
	}
	return f.DB.AppendSessionEvents(ctx, events...)
}

// realService is a sessions service over a real pool, vms service and
// SQLite store, stopped at cleanup in the gateway's order.
func realService(t *testing.T, cfg Config) (*Service, *vms.Service, *flakyStore) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs a real agent")
	}
	if _, err := agentos.LocateEngine(); err != nil {
		t.Skip(err)
	}
	ctx := context.Background()
	db, err := store.Open(ctx, filepath.Join(t.TempDir(), "gateway.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.EnsureTenant(ctx, gateway.Tenant{ID: "t1", Name: "t1"}); err != nil {
		t.Fatal(err)
	}
	fs := &flakyStore{DB: db}
	pool := sidecarpool.New(sidecarpool.Config{MaxSidecars: 1, VMsPerSidecar: 4})
	v := vms.New(vms.Config{DataDir: t.TempDir()}, db, vms.PoolOf(pool))
	if cfg.Idempotency == nil {
		k := idempotency.New(idempotency.Config{}, db)
		t.Cleanup(k.Close)
		cfg.Idempotency = k
	}
	s := New(cfg, fs, v)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := v.Close(ctx); err != nil {
			t.Error(err)
		}
		if err := s.Close(ctx); err != nil {
			t.Error(err)
		}
		if err := pool.Close(ctx); err != nil {
			t.Error(err)
		}
		db.Close()
	})
	return s, v, fs
}

// piSession creates a VM of tenant t1 that runs pi against a fresh mock
// model, and opens a session with it.
func piSession(ctx context.Context, t *testing.T, s *Service, v *vms.Service, id string) (gateway.VM, gateway.Session) {
	t.Helper()
	mock := mockanthropic.Start(t)
	tenant := gateway.Tenant{ID: "t1"}
	vm, err := v.Create(ctx, tenant, gateway.VMSpec{Agents: []string{"pi"}, LoopbackExemptPorts: []uint16{uint16(mock.Port())}})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := s.Open(ctx, tenant, vm.ID, OpenRequest{SessionID: id, Agent: "pi", Env: mock.Env()})
	if err != nil {
		t.Fatal(err)
	}
	return vm, sess
}

// collector follows a session and keeps its durable sequences.
type collector struct {
	mu   sync.Mutex
	seqs []uint64
	done chan error
}

func followDurable(t *testing.T, s *Service, vmID, id string) *collector {
	ctx, cancel := context.WithCancel(context.Background())
	c := &collector{done: make(chan error, 1)}
	go func() {
		c.done <- s.Follow(ctx, "t1", vmID, id, 0, func(ev Event) error {
			if ev.Type == TypeDurable {
				c.mu.Lock()
				c.seqs = append(c.seqs, ev.Sequence)
				c.mu.Unlock()
			}
			return nil
		})
	}()
	t.Cleanup(func() { cancel(); <-c.done })
	return c
}

func (c *collector) sequences() []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]uint64(nil), c.seqs...)
}

// TestRecorderHealsStoreFailures runs with the engine's history pages and
// with pages of one event, so that what was missed spans several pages.
func TestRecorderHealsStoreFailures(t *testing.T) {
	for _, page := range []uint32{0, 1} {
		t.Run(fmt.Sprintf("history page %d", page), func(t *testing.T) { testRecorderHeals(t, page) })
	}
}

func testRecorderHeals(t *testing.T, historyPage uint32) {
	s, v, fs := realService(t, Config{HistoryPage: historyPage})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	vm, sess := piSession(ctx, t, s, v, "heal")
	c := followDurable(t, s, vm.ID, sess.ID)
	text, _ := json.Marshal([]map[string]string{{"type": "text", "text": "hello"}})

	// The first turn's events are all refused by the store (after the
	// recorder's retries), so nothing of it is recorded or followed yet.
	fs.failing.Store(true)
	if _, err := s.Prompt(ctx, "t1", vm.ID, sess.ID, PromptRequest{Content: text}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the store to refuse the turn's events", func() bool { return fs.refused.Load() >= 8 })
	if got, _ := s.store.GetSession(ctx, "t1", vm.ID, sess.ID); got.LatestSequence != 0 {
		t.Fatalf("latest sequence %d while the store refuses", got.LatestSequence)
	}
	fs.failing.Store(false)
	waitFor(t, "the recorder to stop retrying", func() bool {
		st := s.Stats()
		return st.RecordFailures >= 2
	})

	// The next turn's first event shows the gap: the recorder reads the
	// missed events back from the engine and records all of them in order.
	if _, err := s.Prompt(ctx, "t1", vm.ID, sess.ID, PromptRequest{Content: text}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the whole record", func() bool {
		got, _ := s.store.GetSession(ctx, "t1", vm.ID, sess.ID)
		return got.LatestSequence == 4
	})
	page, err := s.History(ctx, "t1", vm.ID, sess.ID, gateway.HistoryQuery{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for i, e := range page.Events {
		if e.Sequence != uint64(i+1) {
			t.Fatalf("history sequences %+v", page.Events)
		}
		types = append(types, e.Type)
	}
	want := []string{"user_message_chunk", "agent_message_chunk", "user_message_chunk", "agent_message_chunk"}
	if len(types) != len(want) {
		t.Fatalf("history types %v, want %v", types, want)
	}
	for i := range want {
		if types[i] != want[i] {
			t.Fatalf("history types %v, want %v", types, want)
		}
	}
	waitFor(t, "the follower to see every event", func() bool { return len(c.sequences()) == 4 })
	for i, seq := range c.sequences() {
		if seq != uint64(i+1) {
			t.Fatalf("followed %v", c.sequences())
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSlowFollowerOverflowsAndCatchesUp follows a session with a queue of
// two events and a reader stalled through a turn of 7 events: the
// follower is cut off instead of slowing anyone, told so with an overflow
// event, and then gets every durable event once, in order, from the store.
func TestSlowFollowerOverflowsAndCatchesUp(t *testing.T) {
	s, v, _ := realService(t, Config{WatchBuffer: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	vm, sess := piSession(ctx, t, s, v, "slow-reader")
	var (
		mu    sync.Mutex
		kinds []string
		seqs  []uint64
	)
	stall := make(chan struct{})
	started := make(chan struct{}, 1)
	fctx, stop := context.WithCancel(context.Background())
	followed := make(chan error, 1)
	go func() {
		first := true
		followed <- s.Follow(fctx, "t1", vm.ID, sess.ID, 0, func(ev Event) error {
			if first {
				// Stall on the turn's first event until the turn is over.
				first = false
				started <- struct{}{}
				<-stall
			}
			mu.Lock()
			defer mu.Unlock()
			kinds = append(kinds, ev.Type)
			if ev.Type == TypeDurable {
				seqs = append(seqs, ev.Sequence)
			}
			return nil
		})
	}()
	defer func() { stop(); <-followed }()
	text, _ := json.Marshal([]map[string]string{{"type": "text", "text": "hello"}})
	if _, err := s.Prompt(ctx, "t1", vm.ID, sess.ID, PromptRequest{Content: text}); err != nil {
		t.Fatal(err)
	}
	<-started
	close(stall)
	latest := func() uint64 {
		got, _ := s.store.GetSession(ctx, "t1", vm.ID, sess.ID)
		return got.LatestSequence
	}
	waitFor(t, "the follower to catch up", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seqs) > 0 && seqs[len(seqs)-1] == latest()
	})
	mu.Lock()
	defer mu.Unlock()
	overflowed := false
	for _, k := range kinds {
		overflowed = overflowed || k == TypeOverflow
	}
	if !overflowed {
		t.Errorf("no overflow event in %v", kinds)
	}
	for i, seq := range seqs {
		if seq != uint64(i+1) {
			t.Fatalf("durable sequences %v", seqs)
		}
	}
}
