package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/store"
	"github.com/agentos-gateway/agentos-gateway/vms"
)

func durable(seq uint64) Event { return Event{Type: TypeDurable, Sequence: seq} }
func ephemeral(after uint64) Event {
	return Event{Type: TypeEphemeral, AfterSequence: after}
}

// label names an event for comparisons: D<seq>, E<afterSequence> or its kind.
func label(ev Event) string {
	switch ev.Type {
	case TypeDurable:
		return fmt.Sprintf("D%d", ev.Sequence)
	case TypeEphemeral:
		return fmt.Sprintf("E%d", ev.AfterSequence)
	}
	return ev.Type
}

func TestPump(t *testing.T) {
	errEmit := errors.New("client went away")
	for _, tc := range []struct {
		name       string
		cursor     uint64
		events     []Event
		open       bool // leave the channel open (the case must return by itself)
		failAt     int  // emit fails on this call (1-based); 0: never
		wantGap    bool
		wantErr    error
		wantEmit   []string
		wantCursor uint64
		wantLeft   int // events left unread in the channel
	}{
		{name: "closed empty", cursor: 4, wantCursor: 4},
		{name: "in order", cursor: 0, events: []Event{durable(1), durable(2), durable(3)}, wantEmit: []string{"D1", "D2", "D3"}, wantCursor: 3},
		{name: "resumes after cursor", cursor: 7, events: []Event{durable(8), durable(9)}, wantEmit: []string{"D8", "D9"}, wantCursor: 9},
		{name: "duplicates skipped", cursor: 3, events: []Event{durable(1), durable(2), durable(3), durable(4), durable(4), durable(3), durable(5)}, wantEmit: []string{"D4", "D5"}, wantCursor: 5},
		{name: "all already emitted", cursor: 10, events: []Event{durable(9), durable(10)}, wantCursor: 10},
		{name: "gap after some", cursor: 3, events: []Event{durable(4), durable(6), durable(7)}, open: true, wantGap: true, wantEmit: []string{"D4"}, wantCursor: 4, wantLeft: 1},
		{name: "gap at once", cursor: 0, events: []Event{durable(2), durable(3)}, open: true, wantGap: true, wantCursor: 0, wantLeft: 1},
		{name: "gap wins over close", cursor: 5, events: []Event{durable(7)}, wantGap: true, wantCursor: 5},
		{
			name: "ephemeral", cursor: 5,
			events:   []Event{ephemeral(3), ephemeral(4), ephemeral(5), durable(6), ephemeral(5), ephemeral(6), ephemeral(6)},
			wantEmit: []string{"E5", "D6", "E6", "E6"}, wantCursor: 6,
		},
		{name: "ephemeral ahead of cursor", cursor: 2, events: []Event{ephemeral(3)}, wantEmit: []string{"E3"}, wantCursor: 2},
		{
			name: "other kinds pass through", cursor: 9,
			events: []Event{
				{Type: TypeAgentStderr, Data: json.RawMessage(`{}`)}, durable(9),
				{Type: TypeAgentExit, Data: json.RawMessage(`{}`)}, durable(10),
			},
			wantEmit: []string{TypeAgentStderr, TypeAgentExit, "D10"}, wantCursor: 10,
		},
		{name: "emit error on durable", cursor: 0, events: []Event{durable(1), durable(2)}, failAt: 2, wantErr: errEmit, wantEmit: []string{"D1"}, wantLeft: 0},
		{name: "emit error on ephemeral", cursor: 1, events: []Event{ephemeral(1), durable(2)}, open: true, failAt: 1, wantErr: errEmit, wantCursor: 1, wantLeft: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &watcher{ch: make(chan Event, len(tc.events)+1)}
			for _, ev := range tc.events {
				w.ch <- ev
			}
			if !tc.open {
				close(w.ch)
			}
			var emitted []string
			calls := 0
			emit := func(ev Event) error {
				calls++
				if calls == tc.failAt {
					return errEmit
				}
				emitted = append(emitted, label(ev))
				return nil
			}
			cursor := tc.cursor
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			gap, err := pump(ctx, w, &cursor, emit)
			if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Fatalf("pump error = %v, want %v", err, tc.wantErr)
			}
			if gap != tc.wantGap {
				t.Errorf("gap = %v, want %v", gap, tc.wantGap)
			}
			if !reflect.DeepEqual(emitted, tc.wantEmit) {
				t.Errorf("emitted %v, want %v", emitted, tc.wantEmit)
			}
			if tc.wantErr == nil && cursor != tc.wantCursor {
				t.Errorf("cursor = %d, want %d", cursor, tc.wantCursor)
			}
			if tc.open && len(w.ch) != tc.wantLeft {
				t.Errorf("%d events left unread, want %d", len(w.ch), tc.wantLeft)
			}
		})
	}
}

func TestPumpContextCancelled(t *testing.T) {
	w := &watcher{ch: make(chan Event, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cursor := uint64(3)
	gap, err := pump(ctx, w, &cursor, func(Event) error { t.Error("emitted"); return nil })
	if !errors.Is(err, context.Canceled) || gap {
		t.Errorf("pump = %v, %v; want false, context.Canceled", gap, err)
	}

	// Cancelled while waiting for events.
	ctx, cancel = context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := pump(ctx, w, &cursor, func(Event) error { return nil })
		done <- err
	}()
	w.ch <- durable(4)
	time.Sleep(10 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("pump = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("pump did not return after its context was cancelled")
	}
}

// recordingStore is the real store (SQLite in memory) noting the history
// queries made of it, so that tests see how Follow pages.
type recordingStore struct {
	*store.DB
	mu      sync.Mutex
	queries []gateway.HistoryQuery
}

func newRecordingStore(t *testing.T) *recordingStore {
	t.Helper()
	db, err := store.Open(context.Background(), ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &recordingStore{DB: db}
}

func (r *recordingStore) SessionHistory(ctx context.Context, vmID, sessionID string, q gateway.HistoryQuery) (gateway.HistoryPage, error) {
	r.mu.Lock()
	r.queries = append(r.queries, q)
	r.mu.Unlock()
	return r.DB.SessionHistory(ctx, vmID, sessionID, q)
}

// addSession stores a session of a VM in state with n events.
func (r *recordingStore) addSession(t *testing.T, tenantID, vmID string, state gateway.VMState, id string, n int) {
	t.Helper()
	ctx := context.Background()
	if _, err := r.EnsureTenant(ctx, gateway.Tenant{ID: tenantID, Name: tenantID}); err != nil {
		t.Fatal(err)
	}
	if err := r.CreateVM(ctx, gateway.VM{ID: vmID, TenantID: tenantID, State: gateway.VMReady}); err != nil {
		t.Fatal(err)
	}
	if state != gateway.VMReady {
		if _, err := r.SetVMState(ctx, vmID, state, "", ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.CreateSession(ctx, gateway.Session{ID: id, TenantID: tenantID, VMID: vmID, Agent: "pi", Cwd: "/"}); err != nil {
		t.Fatal(err)
	}
	evs := make([]gateway.SessionEvent, n)
	for i := range evs {
		seq := uint64(i + 1)
		evs[i] = gateway.SessionEvent{VMID: vmID, SessionID: id, Sequence: seq, Type: "agent_message_chunk",
			Data: json.RawMessage(fmt.Sprintf(`{"sequence":%d,"type":"agent_message_chunk"}`, seq))}
	}
	if n > 0 {
		if err := r.AppendSessionEvents(ctx, evs...); err != nil {
			t.Fatal(err)
		}
	}
}

// endedVMs answers every request for a live VM with err: the VMs have
// ended (a conflict) unless a test says otherwise.
type endedVMs struct {
	mu    sync.Mutex
	err   error
	calls int
}

func (v *endedVMs) AgentHost(ctx context.Context, tenantID, vmID string) (vms.AgentHost, func(), error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.calls++
	if v.err != nil {
		return vms.AgentHost{}, nil, v.err
	}
	return vms.AgentHost{}, nil, gateway.Wrap(gateway.CodeConflict, vms.ErrVMEnded, "vm %s has ended", vmID).WithDetail("state", gateway.VMDisposed)
}

func (v *endedVMs) Ended(string) <-chan struct{} { return noVMs{}.Ended("") }

func newTestService(t *testing.T, st Store, v VMs) *Service {
	t.Helper()
	s := New(Config{}, st, v)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return s
}

// follow runs Follow and collects what it emits.
func follow(t *testing.T, s *Service, tenantID, vmID, id string, after uint64) ([]Event, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []Event
	err := s.Follow(ctx, tenantID, vmID, id, after, func(ev Event) error {
		got = append(got, ev)
		return nil
	})
	return got, err
}

// checkFollowed checks that events are durable from..to in order, each with
// its stored data, then one end event with state.
func checkFollowed(t *testing.T, events []Event, from, to uint64, state gateway.SessionState) {
	t.Helper()
	want := 0
	if to >= from {
		want = int(to - from + 1)
	}
	if len(events) != want+1 {
		t.Fatalf("got %d events, want %d durable and an end", len(events), want)
	}
	for i, ev := range events[:want] {
		seq := from + uint64(i)
		if ev.Type != TypeDurable || ev.Sequence != seq {
			t.Fatalf("event %d is %s, want D%d", i, label(ev), seq)
		}
		if wantData := fmt.Sprintf(`{"sequence":%d,"type":"agent_message_chunk"}`, seq); string(ev.Data) != wantData {
			t.Fatalf("event %d data = %s, want %s", i, ev.Data, wantData)
		}
	}
	end := events[want]
	if end.Type != TypeEnd {
		t.Fatalf("last event is %s, want end", label(end))
	}
	var data struct {
		State string `json:"state"`
	}
	if err := json.Unmarshal(end.Data, &data); err != nil || data.State != string(state) {
		t.Errorf("end data = %s, want state %s", end.Data, state)
	}
}

func TestFollowEndedVM(t *testing.T) {
	for _, tc := range []struct {
		name    string
		vmState gateway.VMState
		n       int
		after   uint64
		want    gateway.SessionState
	}{
		{"lost, from start", gateway.VMLost, 5, 0, gateway.SessionLost},
		{"disposed, from start", gateway.VMDisposed, 5, 0, gateway.SessionClosed},
		{"disposing", gateway.VMDisposing, 3, 0, gateway.SessionClosed},
		{"lost, after 3", gateway.VMLost, 5, 3, gateway.SessionLost},
		{"disposed, after 2", gateway.VMDisposed, 5, 2, gateway.SessionClosed},
		{"after the last", gateway.VMDisposed, 5, 5, gateway.SessionClosed},
		{"after beyond the last", gateway.VMLost, 5, 9, gateway.SessionLost},
		{"no events", gateway.VMDisposed, 0, 0, gateway.SessionClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newRecordingStore(t)
			st.addSession(t, "t1", "vm1", tc.vmState, "ses1", tc.n)
			vms := &endedVMs{}
			s := newTestService(t, st, vms)
			got, err := follow(t, s, "t1", "vm1", "ses1", tc.after)
			if err != nil {
				t.Fatalf("Follow = %v", err)
			}
			checkFollowed(t, got, tc.after+1, uint64(tc.n), tc.want)
			if vms.calls != 1 {
				t.Errorf("Agent called %d times, want 1", vms.calls)
			}
		})
	}
}

func TestFollowPagesThroughLongHistory(t *testing.T) {
	for _, tc := range []struct {
		n, after    int
		wantQueries int
	}{
		{n: 500, wantQueries: 1},
		{n: 501, wantQueries: 2},
		{n: 1000, wantQueries: 2},
		{n: 1234, wantQueries: 3},
		{n: 1234, after: 700, wantQueries: 2},
	} {
		t.Run(fmt.Sprintf("%d after %d", tc.n, tc.after), func(t *testing.T) {
			st := newRecordingStore(t)
			st.addSession(t, "t1", "vm1", gateway.VMDisposed, "ses1", tc.n)
			s := newTestService(t, st, &endedVMs{})
			got, err := follow(t, s, "t1", "vm1", "ses1", uint64(tc.after))
			if err != nil {
				t.Fatalf("Follow = %v", err)
			}
			checkFollowed(t, got, uint64(tc.after)+1, uint64(tc.n), gateway.SessionClosed)
			st.mu.Lock()
			defer st.mu.Unlock()
			if len(st.queries) != tc.wantQueries {
				t.Errorf("%d history queries %v, want %d", len(st.queries), st.queries, tc.wantQueries)
			}
			for _, q := range st.queries {
				if q.Limit != 500 || q.Before != 0 {
					t.Errorf("history query %+v, want pages of 500 after a cursor", q)
				}
			}
		})
	}
}

func TestFollowUnknownSession(t *testing.T) {
	st := newRecordingStore(t)
	st.addSession(t, "t1", "vm1", gateway.VMDisposed, "ses1", 3)
	vms := &endedVMs{}
	s := newTestService(t, st, vms)
	for _, tc := range []struct{ tenant, vm, id string }{
		{"t1", "vm1", "nope"},
		{"t1", "vm2", "ses1"},
		{"t2", "vm1", "ses1"}, // another tenant's session
	} {
		got, err := follow(t, s, tc.tenant, tc.vm, tc.id, 0)
		if gateway.ErrorCode(err) != gateway.CodeNotFound {
			t.Errorf("Follow(%v) = %v, want not_found", tc, err)
		}
		if len(got) != 0 {
			t.Errorf("Follow(%v) emitted %d events", tc, len(got))
		}
	}
	if vms.calls != 0 {
		t.Errorf("Agent called %d times for unknown sessions", vms.calls)
	}
}

func TestFollowVMError(t *testing.T) {
	// Anything but the VM's end is the caller's answer: a VM still being
	// created is a conflict too, and must not end the stream as closed.
	for _, vmErr := range []error{
		gateway.Errorf(gateway.CodeUnavailable, "sidecar starting"),
		gateway.Errorf(gateway.CodeConflict, "the VM is creating").WithDetail("state", gateway.VMCreating),
	} {
		t.Run(gateway.ErrorMessage(vmErr), func(t *testing.T) {
			st := newRecordingStore(t)
			st.addSession(t, "t1", "vm1", gateway.VMReady, "ses1", 3)
			s := newTestService(t, st, &endedVMs{err: vmErr})
			got, err := follow(t, s, "t1", "vm1", "ses1", 0)
			if !errors.Is(err, vmErr) {
				t.Errorf("Follow = %v, want %v", err, vmErr)
			}
			if len(got) != 0 {
				t.Errorf("Follow emitted %d events", len(got))
			}
		})
	}
}

func TestFollowEmitError(t *testing.T) {
	st := newRecordingStore(t)
	st.addSession(t, "t1", "vm1", gateway.VMLost, "ses1", 800)
	s := newTestService(t, st, &endedVMs{})
	for _, failAt := range []int{1, 2, 500, 501, 801} {
		errGone := errors.New("client gone")
		calls := 0
		err := s.Follow(context.Background(), "t1", "vm1", "ses1", 0, func(Event) error {
			calls++
			if calls == failAt {
				return errGone
			}
			return nil
		})
		if !errors.Is(err, errGone) {
			t.Errorf("fail at %d: Follow = %v, want the emit error", failAt, err)
		}
		if calls != failAt {
			t.Errorf("fail at %d: emit called %d times", failAt, calls)
		}
	}
}

func TestFollowContextCancelled(t *testing.T) {
	st := newRecordingStore(t)
	st.addSession(t, "t1", "vm1", gateway.VMLost, "ses1", 3)
	s := newTestService(t, st, &endedVMs{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Follow(ctx, "t1", "vm1", "ses1", 0, func(Event) error { return nil })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Follow = %v, want context.Canceled", err)
	}
}

func TestServiceShutdownIdempotentAndRefuses(t *testing.T) {
	st := &purgeCounter{recordingStore: newRecordingStore(t)}
	s := New(Config{PurgeInterval: time.Millisecond}, st, &endedVMs{})
	waitFor(t, "the purger to run", func() bool { return st.runs.Load() > 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if _, err := s.recorderFor(vms.AgentHost{}, "t1", "vm1"); gateway.ErrorCode(err) != gateway.CodeUnavailable {
		t.Errorf("recorderFor after shutdown = %v, want unavailable", err)
	}
}

// purgeCounter counts the purger's runs.
type purgeCounter struct {
	*recordingStore
	runs atomic.Int64
}

func (p *purgeCounter) PurgeExpiredSessions(ctx context.Context, now time.Time) (int, error) {
	p.runs.Add(1)
	return p.recordingStore.PurgeExpiredSessions(ctx, now)
}
