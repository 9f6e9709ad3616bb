package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/vms"
)

// recorder follows the ACP events of one live VM: it stores every durable
// event of the VM's sessions before it publishes it to the sessions'
// watchers, keeps the permission requests, and takes the default decision
// of those nobody answered in time. It ends with the VM.
type recorder struct {
	s                *Service
	vm               vms.AgentHost
	tenantID, vmID   string
	wake             chan struct{}  // a deadline changed
	defaultDecisions sync.WaitGroup // default decisions in flight

	mu       sync.Mutex
	sub      *vms.SessionEvents
	sessions map[string]*sessionState
	// deleted are the sessions deleted while the VM lives: a request that
	// read the record just before the deletion must not register it again.
	deleted  map[string]bool
	stopping bool // Close closed sub on purpose
	ended    bool
}

// sessionState is what the recorder knows of one session.
type sessionState struct {
	rec      gateway.Session
	lastSeq  uint64 // the highest sequence stored
	turn     *turn  // the running prompt, or nil
	watchers map[*watcher]struct{}
	pending  map[string]*pendingPermission // by request id
	// noCredentials, when set, are the variables of which the agent
	// needed one at the open and had none: its prompts are refused.
	noCredentials []string
}

// recorderBuffer bounds the events waiting between the engine and the
// recorder; when the store falls that far behind, the recorder resubscribes
// and reads what it missed from the engine's history.
const recorderBuffer = 4096

func newRecorder(s *Service, vm vms.AgentHost, tenantID, vmID string) *recorder {
	return &recorder{
		s: s, vm: vm, tenantID: tenantID, vmID: vmID, wake: make(chan struct{}, 1),
		sub: vm.SubscribeSessions(recorderBuffer), sessions: map[string]*sessionState{}, deleted: map[string]bool{},
	}
}

// register registers a session being opened, deleted before or not.
func (r *recorder) register(rec gateway.Session) {
	r.mu.Lock()
	delete(r.deleted, rec.ID)
	r.mu.Unlock()
	r.ensure(rec)
}

// ensure registers a stored session, so that its events are recorded.
func (r *recorder) ensure(rec gateway.Session) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.sessions[rec.ID]; ok || r.ended || r.deleted[rec.ID] {
		return
	}
	r.sessions[rec.ID] = &sessionState{
		rec: rec, lastSeq: rec.LatestSequence,
		watchers: map[*watcher]struct{}{}, pending: map[string]*pendingPermission{},
	}
}

// setNoCredentials records that the session's agent was opened without
// the model credentials it needs (vars, of which one is needed).
func (r *recorder) setNoCredentials(id string, vars []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st := r.sessions[id]; st != nil {
		st.noCredentials = vars
	}
}

// noCredentials returns what setNoCredentials recorded of a session, with
// its agent.
func (r *recorder) noCredentials(id string) (agent string, vars []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st := r.sessions[id]; st != nil {
		return st.rec.Agent, st.noCredentials
	}
	return "", nil
}

// unregister forgets a session (its open failed, or it was deleted) and
// ends its watchers with state.
func (r *recorder) unregister(id, state string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if state == endDeleted {
		r.deleted[id] = true
	}
	st := r.sessions[id]
	if st == nil {
		return
	}
	delete(r.sessions, id)
	st.endWatchersLocked(state)
}

// setStoredState notes the state the store has for a session and reports
// whether it changed, so that the store is written only then.
func (r *recorder) setStoredState(id string, state gateway.SessionState) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.sessions[id]
	if st == nil || st.rec.State == state {
		return false
	}
	st.rec.State = state
	return true
}

func (r *recorder) turnRunning(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.sessions[id]
	return st != nil && st.turn != nil
}

// close stops the recorder at shutdown.
func (r *recorder) close() {
	r.mu.Lock()
	r.stopping = true
	sub := r.sub
	r.mu.Unlock()
	sub.Close()
}

func (r *recorder) run() {
	defer r.s.wg.Done()
	defer r.s.removeRecorder(r)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		r.mu.Lock()
		sub := r.sub
		next, ok := r.nextDeadlineLocked()
		r.mu.Unlock()
		if ok {
			timer.Reset(max(time.Until(next), 0))
		} else {
			timer.Stop()
		}
		select {
		case ev, ok := <-sub.C():
			if !ok {
				if errors.Is(sub.Err(), vms.ErrSessionEventsOverflow) && r.resubscribe() {
					continue
				}
				r.finish()
				return
			}
			r.handle(ev)
		case <-timer.C:
			r.expire()
		case <-r.wake:
		}
	}
}

// resubscribe replaces a subscription cut off for falling behind and reads
// what was missed of each session from the engine's history. Ephemeral
// events lost meanwhile are gone; the watchers learn it from the overflow
// of their own queues or not at all, as deltas are not part of the record.
func (r *recorder) resubscribe() bool {
	r.mu.Lock()
	if r.stopping {
		r.mu.Unlock()
		return false
	}
	r.sub = r.vm.SubscribeSessions(recorderBuffer)
	ids := make([]string, 0, len(r.sessions))
	for id := range r.sessions {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	r.s.log.Warn().Str("vm", r.vmID).Msg("session events fell behind the store; reading them back from the engine")
	for _, id := range ids {
		r.backfill(id, 0)
	}
	return true
}

// finish ends the watchers of every session with the VM's end and drops the
// permission requests nobody can answer any more.
func (r *recorder) finish() {
	// The engine tells of a VM's end before the VM's record says it: wait
	// for the record, so that a client that saw a stream end finds the
	// session in the same state.
	select {
	case <-r.s.vms.Ended(r.vmID):
	case <-r.s.ctx.Done():
	case <-time.After(time.Minute):
	}
	state := string(gateway.SessionClosed)
	if r.vm.Lost() {
		state = string(gateway.SessionLost)
	}
	r.mu.Lock()
	r.ended = true
	for _, st := range r.sessions {
		st.endWatchersLocked(state)
		st.pending = nil
	}
	r.mu.Unlock()
	r.defaultDecisions.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), storeWriteTimeout)
	defer cancel()
	d := gateway.PermissionDecision{By: gateway.DecidedByAgent, Status: "not_pending", Reason: "vm_ended", At: r.s.cfg.Now().UTC()}
	if _, err := r.s.store.DropPendingPermissions(ctx, r.vmID, d); err != nil {
		r.s.log.Error().Err(err).Str("vm", r.vmID).Msg("drop pending permissions")
	}
}

func (r *recorder) handle(ev vms.SessionEvent) {
	switch ev.Kind {
	case "durable":
		r.durable(ev)
	case "ephemeral":
		r.publish(ev.SessionID, Event{Type: TypeEphemeral, AfterSequence: ev.AfterSequence, Data: ephemeralData(ev)})
	case "agent_stderr":
		data, _ := json.Marshal(gateway.AgentStderrEvent{AgentType: ev.AgentType, ProcessID: ev.ProcessID, Text: string(ev.Chunk)})
		r.publish(ev.SessionID, Event{Type: TypeAgentStderr, Data: data})
	case "agent_exit":
		data, _ := json.Marshal(gateway.AgentExitEvent{AgentType: ev.AgentType, ProcessID: ev.ProcessID, ExitCode: ev.ExitCode, Restart: ev.Restart})
		r.publish(ev.SessionID, Event{Type: TypeAgentExit, Data: data})
	}
}

// durable records a durable event, first reading from the engine's history
// any the recorder has not seen (the engine numbers them without gaps).
func (r *recorder) durable(ev vms.SessionEvent) {
	r.mu.Lock()
	st := r.sessions[ev.SessionID]
	var last uint64
	if st != nil {
		last = st.lastSeq
	}
	r.mu.Unlock()
	switch {
	case st == nil || ev.Sequence <= last:
		return
	case ev.Sequence > last+1:
		r.backfill(ev.SessionID, ev.Sequence)
		return
	}
	r.record(ev)
}

// backfill records a session's durable events after the last one stored,
// read from the engine's history a page at a time until it has no more, up
// to at least upTo.
func (r *recorder) backfill(id string, upTo uint64) {
	r.mu.Lock()
	st := r.sessions[id]
	if st == nil {
		r.mu.Unlock()
		return
	}
	last := st.lastSeq
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(r.s.ctx, 30*time.Second)
	defer cancel()
	for {
		after := last
		page, err := r.vm.Session(id).History(ctx, vms.HistoryQuery{After: &after, Limit: r.s.cfg.HistoryPage})
		if err != nil {
			// The events stay unrecorded; the next one tries again, and
			// watchers that saw the jump catch up from the store.
			r.s.log.Error().Err(err).Str("vm", r.vmID).Str("session", id).Uint64("after", last).Msg("read missed session events")
			return
		}
		for _, e := range page.Events {
			if e.Sequence <= last {
				continue
			}
			if e.Sequence != last+1 || !r.record(e) {
				return
			}
			last = e.Sequence
		}
		if !page.HasMoreAfter || last == after {
			break
		}
	}
	if last < upTo {
		r.s.log.Error().Str("vm", r.vmID).Str("session", id).Uint64("have", last).Uint64("want", upTo).Msg("session history is missing events")
	}
}

// record stores one durable event with its side effects, then publishes it.
// It reports whether the event was stored.
func (r *recorder) record(ev vms.SessionEvent) bool {
	now := r.s.cfg.Now().UTC()
	rec := r.describe(ev, now)
	raw, err := json.Marshal(rec.data)
	if err != nil {
		r.s.log.Error().Err(err).Msg("encode session event")
		return false
	}
	if err := r.store(func(ctx context.Context) error {
		return r.s.store.AppendSessionEvents(ctx, gateway.SessionEvent{
			VMID: r.vmID, SessionID: ev.SessionID, Sequence: ev.Sequence, Time: rec.at, Type: rec.data.Type, Data: raw,
		})
	}); err != nil {
		r.s.recordFailures.Add(1)
		r.s.log.Error().Err(err).Str("vm", r.vmID).Str("session", ev.SessionID).Uint64("sequence", ev.Sequence).Msg("store session event")
		return false
	}
	r.s.eventsRecorded.Add(1)
	r.storePermission(ev, rec)

	var def gateway.PermissionDefault
	if rec.perm != nil {
		def = r.permissionDefault(ev.SessionID)
		r.s.tell(gateway.NewEvent(gateway.EventSessionPermissionRequested, r.tenantID, r.vmID, rec.at,
			gateway.SessionPermissionRequestedData{VMID: r.vmID, SessionID: ev.SessionID, RequestID: ev.RequestID, ToolCall: rec.perm.ToolCall}))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.sessions[ev.SessionID]
	if st == nil {
		return true
	}
	st.lastSeq = ev.Sequence
	switch {
	case rec.perm != nil:
		p := &pendingPermission{
			options: rec.options, decision: def.Decision,
			deadline: now.Add(time.Duration(def.TimeoutSeconds) * time.Second),
		}
		st.pending[ev.RequestID] = p
		if r.s.cfg.PermissionWebhook != nil && !r.ended {
			r.defaultDecisions.Add(1)
			go r.askWebhook(ev.SessionID, def.WebhookURL, *rec.perm, p)
		}
	case rec.decision != nil:
		delete(st.pending, ev.RequestID)
	}
	st.publishLocked(Event{Type: TypeDurable, Sequence: ev.Sequence, Data: raw})
	return true
}

// store runs a write with a few retries: a durable event must not be lost
// to a passing database hiccup.
func (r *recorder) store(write func(ctx context.Context) error) error {
	const attempts = 4
	var err error
	for attempt, wait := 1, 100*time.Millisecond; ; attempt, wait = attempt+1, wait*3 {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.s.ctx), storeWriteTimeout)
		err = write(ctx)
		cancel()
		if err == nil || gateway.ErrorCode(err) == gateway.CodeNotFound || attempt == attempts {
			return err
		}
		select {
		case <-time.After(wait):
		case <-r.s.ctx.Done():
			return err
		}
	}
}
