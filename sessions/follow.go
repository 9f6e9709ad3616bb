package sessions

import (
	"context"
	"encoding/json"
	"errors"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/vms"
)

// Types of Event: an event's Type is its name in the session's event stream.
const (
	TypeDurable     = "durable"      // a stored event, with its Sequence
	TypeEphemeral   = "ephemeral"    // a streamed delta, not stored
	TypeAgentStderr = "agent_stderr" // output of the agent process
	TypeAgentExit   = "agent_exit"   // the agent process ended
	TypeOverflow    = "overflow"     // the follower fell behind: ephemeral events were dropped
	TypeEnd         = "end"          // the session ended: closed, lost or deleted
)

// endDeleted is the final state of a session deleted while followed.
const endDeleted = "deleted"

// Event is an event of a session's stream. Data is its JSON as the API
// serves it.
type Event struct {
	Type          string
	Sequence      uint64 // durable: its sequence
	AfterSequence uint64 // ephemeral: the last durable sequence before it
	Data          json.RawMessage
}

// watcher is one follower's bounded queue of live events. A watcher that
// falls behind is cut off (overflowed) rather than slowing the recorder;
// its follower catches up from the store.
type watcher struct {
	ch chan Event
	// Set before ch is closed, read after.
	overflowed bool
	end        string // the session's final state, when it ended
}

func (st *sessionState) publishLocked(ev Event) {
	for w := range st.watchers {
		select {
		case w.ch <- ev:
		default:
			w.overflowed = true
			close(w.ch)
			delete(st.watchers, w)
		}
	}
}

func (st *sessionState) endWatchersLocked(state string) {
	for w := range st.watchers {
		w.end = state
		close(w.ch)
		delete(st.watchers, w)
	}
}

func (r *recorder) publish(sid string, ev Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st := r.sessions[sid]; st != nil {
		st.publishLocked(ev)
	}
}

// watch adds a watcher to a registered session. It returns nil when the
// recorder has ended or the session is gone, with endDeleted when it was
// deleted.
func (r *recorder) watch(sid string, buffer int) (*watcher, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.sessions[sid]
	if r.deleted[sid] {
		return nil, endDeleted
	}
	if r.ended || st == nil {
		return nil, ""
	}
	w := &watcher{ch: make(chan Event, buffer)}
	st.watchers[w] = struct{}{}
	return w, ""
}

func (r *recorder) unwatch(sid string, w *watcher) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st := r.sessions[sid]; st != nil {
		if _, ok := st.watchers[w]; ok {
			delete(st.watchers, w)
			close(w.ch)
		}
	}
}

// Follow emits a session's events after the durable sequence after: the
// stored ones first, then live ones as they happen, until the session ends
// (a final TypeEnd event), emit fails or ctx ends. Durable events are
// emitted exactly once each, in order, with no gap: live events are
// subscribed to before the store is read, and whatever a slow follower
// missed is read from the store again.
func (s *Service) Follow(ctx context.Context, tenantID, vmID, id string, after uint64, emit func(Event) error) error {
	// Each round's live() reads the session's record first: an unknown
	// session is not_found, and a conflict means it exists but its VM has
	// ended.
	cursor := after
	for {
		var (
			w       *watcher
			ls      liveSession
			release = func() {}
			ended   string
		)
		l, rel, err := s.liveSession(ctx, tenantID, vmID, id)
		switch {
		case err == nil:
			ls, release = l, rel
			w, ended = ls.r.watch(id, s.cfg.WatchBuffer)
		case !errors.Is(err, vms.ErrVMEnded):
			return err
		}
		if ended == endDeleted {
			release()
			return emit(endEvent(endDeleted))
		}
		if cursor, err = s.catchUp(ctx, vmID, id, cursor, emit); err != nil {
			if w != nil {
				ls.r.unwatch(id, w)
			}
			release()
			return err
		}
		if w == nil {
			release()
			return s.emitEnd(ctx, tenantID, vmID, "", emit)
		}
		gap, err := pump(ctx, w, &cursor, emit)
		ls.r.unwatch(id, w)
		release()
		switch {
		case err != nil:
			return err
		case gap:
			continue
		case w.overflowed:
			if err := emit(Event{Type: TypeOverflow, Data: overflowData}); err != nil {
				return err
			}
			continue
		}
		if w.end == endDeleted {
			return emit(endEvent(endDeleted))
		}
		if cursor, err = s.catchUp(ctx, vmID, id, cursor, emit); err != nil {
			return err
		}
		return s.emitEnd(ctx, tenantID, vmID, w.end, emit)
	}
}

// pump emits a watcher's live events until its queue closes or a durable
// event jumps past the cursor (reported as gap: read the store again).
func pump(ctx context.Context, w *watcher, cursor *uint64, emit func(Event) error) (gap bool, err error) {
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case ev, ok := <-w.ch:
			if !ok {
				return false, nil
			}
			switch ev.Type {
			case TypeDurable:
				if ev.Sequence <= *cursor {
					continue
				}
				if ev.Sequence > *cursor+1 {
					return true, nil
				}
				*cursor = ev.Sequence
			case TypeEphemeral:
				if ev.AfterSequence < *cursor {
					continue // a delta of a message already emitted whole
				}
			}
			if err := emit(ev); err != nil {
				return false, err
			}
		}
	}
}

// catchUp emits the stored events after cursor and returns the new cursor.
func (s *Service) catchUp(ctx context.Context, vmID, id string, cursor uint64, emit func(Event) error) (uint64, error) {
	for {
		page, err := s.store.SessionHistory(ctx, vmID, id, gateway.HistoryQuery{After: cursor, Limit: 500})
		if err != nil {
			return cursor, err
		}
		for _, e := range page.Events {
			if err := emit(Event{Type: TypeDurable, Sequence: e.Sequence, Data: e.Data}); err != nil {
				return cursor, err
			}
			cursor = e.Sequence
		}
		if !page.HasMoreAfter || len(page.Events) == 0 {
			return cursor, nil
		}
	}
}

// emitEnd emits the final event of a session whose VM has ended; state is
// the recorder's view, or empty to read it from the VM's record.
func (s *Service) emitEnd(ctx context.Context, tenantID, vmID, state string, emit func(Event) error) error {
	if state == "" {
		state = string(gateway.SessionClosed)
		if vm, err := s.store.GetVM(ctx, tenantID, vmID); err == nil && vm.State == gateway.VMLost {
			state = string(gateway.SessionLost)
		}
	}
	return emit(endEvent(state))
}

func endEvent(state string) Event {
	data, _ := json.Marshal(gateway.SessionEndEvent{State: gateway.SessionState(state)})
	return Event{Type: TypeEnd, Data: data}
}

// overflowData is the data of every overflow event.
var overflowData, _ = json.Marshal(gateway.OverflowEvent{Reason: "the stream fell behind; streamed deltas were dropped, durable events follow from the store"})
