// Package sessions runs agent sessions (Pi, Claude Code, Codex, OpenCode
// over ACP) in tenants' VMs. Every durable event of a session is written to
// the store before anyone sees it, so a session's history and the resume
// position of its event streams outlive the VM, its sidecar and the gateway
// process; permission requests are kept as resources with a default decision
// after a timeout, so that an unattended turn never hangs.
package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/idempotency"
	"github.com/agentos-gateway/agentos-gateway/vms"
)

// Store is what the service needs of the database.
type Store interface {
	GetVM(ctx context.Context, tenantID, id string) (gateway.VM, error)
	GetTenant(ctx context.Context, id string) (gateway.Tenant, error)

	CreateSession(ctx context.Context, s gateway.Session) (gateway.Session, error)
	GetSession(ctx context.Context, tenantID, vmID, id string) (gateway.Session, error)
	ListSessions(ctx context.Context, tenantID, vmID, cursor string, limit int) (gateway.Page[gateway.Session], error)
	SetSessionState(ctx context.Context, vmID, id string, state gateway.SessionState) error
	DeleteSession(ctx context.Context, tenantID, vmID, id string) error
	AppendSessionEvents(ctx context.Context, events ...gateway.SessionEvent) error
	SessionHistory(ctx context.Context, vmID, sessionID string, q gateway.HistoryQuery) (gateway.HistoryPage, error)

	AddPermission(ctx context.Context, vmID, sessionID string, p gateway.Permission) error
	ResolvePermission(ctx context.Context, vmID, sessionID, requestID, status string, d gateway.PermissionDecision) error
	Permissions(ctx context.Context, vmID, sessionID string, pendingOnly bool) ([]gateway.Permission, error)
	DropPendingPermissions(ctx context.Context, vmID string, d gateway.PermissionDecision) (int, error)
	PurgeExpiredSessions(ctx context.Context, now time.Time) (int, error)
}

// VMs gives the agent host of a tenant's live VM, held busy until
// release is called, and tells when a VM's end is recorded; *vms.Service
// implements it.
type VMs interface {
	AgentHost(ctx context.Context, tenantID, vmID string) (host vms.AgentHost, release func(), err error)
	Ended(vmID string) <-chan struct{}
}

// PermissionWebhook asks a permission webhook to decide a request:
// webhookURL when it is set (the session's or its tenant's
// permissionDefault), else the VM's own; *bindings.Service implements it. ok
// is false when there is none; an error means it was asked and gave no
// usable answer.
type PermissionWebhook interface {
	DecidePermission(ctx context.Context, tenantID, vmID, sessionID, webhookURL string, p gateway.Permission) (v gateway.PermissionVerdict, ok bool, err error)
}

// Config tunes the service.
type Config struct {
	// PermissionDefault is the decision taken for permission requests of
	// sessions and tenants that set none (default: reject after 10 minutes).
	PermissionDefault gateway.PermissionDefault
	// PurgeInterval is how often expired sessions are deleted (default 1 h).
	PurgeInterval time.Duration
	// WatchBuffer bounds the events queued for one event stream before it
	// is cut off and has to catch up from the store (default 1024).
	WatchBuffer int
	// Idempotency runs prompts that carry an idempotency key; without it
	// such prompts are refused.
	Idempotency *idempotency.Keeper
	// HistoryPage is how many events one read of the engine's history asks
	// for when the recorder reads back what it missed (default: the
	// engine's own page size).
	HistoryPage uint32
	// PermissionWebhook, when set, is asked to decide each permission
	// request before anyone else; its failure takes the default decision
	// at once.
	PermissionWebhook PermissionWebhook
	// Events, when set, is told of turns' ends and permission requests,
	// for webhooks.
	Events EventSink
	Log    zerolog.Logger
	Now    func() time.Time
}

// EventSink is told of the events webhooks deliver (notify.Service).
type EventSink interface {
	Publish(ctx context.Context, evs ...gateway.Event) error
}

// tell writes ev to the event sink, if there is one, within a timeout of
// its own; a failure is logged, and what it tells of stands.
func (s *Service) tell(ev gateway.Event) {
	if s.cfg.Events == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), 10*time.Second)
	defer cancel()
	if err := s.cfg.Events.Publish(ctx, ev); err != nil {
		s.log.Error().Err(err).Str("vm", ev.VMID).Str("event", string(ev.Type)).Msg("write an event to the webhooks' outbox")
	}
}

// defaultPermissionDefault is the decision taken when neither the
// configuration, the tenant nor the session sets one.
var defaultPermissionDefault = gateway.PermissionDefault{Decision: gateway.DecisionReject, TimeoutSeconds: 600}

// Service runs agent sessions.
type Service struct {
	cfg   Config
	store Store
	vms   VMs
	log   zerolog.Logger

	// ctx is cancelled at shutdown; turns run on it, not on the request
	// that started them.
	ctx    context.Context
	cancel context.CancelFunc

	eventsRecorded   atomic.Uint64
	recordFailures   atomic.Uint64
	defaultDecisions atomic.Uint64

	mu        sync.Mutex
	recorders map[string]*recorder // by VM id
	closing   bool
	wg        sync.WaitGroup // recorders, turns, the purger
}

// New returns a service and starts its purger; Close stops it.
func New(cfg Config, st Store, v VMs) *Service {
	if cfg.PermissionDefault.Decision == "" {
		cfg.PermissionDefault = defaultPermissionDefault
	}
	if cfg.PurgeInterval <= 0 {
		cfg.PurgeInterval = time.Hour
	}
	if cfg.WatchBuffer <= 0 {
		cfg.WatchBuffer = 1024
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Service{cfg: cfg, store: st, vms: v, log: cfg.Log, recorders: map[string]*recorder{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(1)
	go s.purge()
	return s
}

// Close stops recording (the VMs' events end with them; call it after
// the VMs were disposed), cancels running turns and waits for every
// goroutine of the service. It waits even when ctx expires first, and then
// returns ctx's error: nothing it started outlives it, and every one of
// those goroutines is bounded (engine calls by the service's context, which
// Close cancels, store writes by storeWriteTimeout).
func (s *Service) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	recs := slices.Collect(maps.Values(s.recorders))
	s.mu.Unlock()
	s.cancel()
	for _, r := range recs {
		r.close()
	}
	s.wg.Wait()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sessions: shutdown: %w", err)
	}
	return nil
}

// storeWriteTimeout bounds every store write the service makes on its own
// behalf, outside any request's deadline.
const storeWriteTimeout = 10 * time.Second

// Stats are the service's counters and gauges, for metrics.
type Stats struct {
	LiveSessions       int    // sessions of live VMs this gateway records
	RunningTurns       int    // prompts running
	PendingPermissions int    // permission requests waiting for an answer
	EventsRecorded     uint64 // durable events stored
	RecordFailures     uint64 // durable events the store refused (read back later from the engine)
	DefaultDecisions   uint64 // permission requests settled by their default decision
}

// Stats returns the service's counters and gauges.
func (s *Service) Stats() Stats {
	st := Stats{
		EventsRecorded: s.eventsRecorded.Load(), RecordFailures: s.recordFailures.Load(),
		DefaultDecisions: s.defaultDecisions.Load(),
	}
	s.mu.Lock()
	recs := slices.Collect(maps.Values(s.recorders))
	s.mu.Unlock()
	for _, r := range recs {
		r.mu.Lock()
		for _, ss := range r.sessions {
			st.LiveSessions++
			if ss.turn != nil {
				st.RunningTurns++
			}
			st.PendingPermissions += len(ss.pending)
		}
		r.mu.Unlock()
	}
	return st
}

// purge deletes the records of sessions past their tenant's retention.
func (s *Service) purge() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.PurgeInterval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		n, err := s.store.PurgeExpiredSessions(s.ctx, s.cfg.Now())
		if err != nil {
			s.log.Error().Err(err).Msg("purge expired sessions")
		} else if n > 0 {
			s.log.Info().Int("sessions", n).Msg("purged expired sessions")
		}
	}
}

// Agents lists the agents a tenant's VM can run.
func (s *Service) Agents(ctx context.Context, tenantID, vmID string) ([]gateway.Agent, error) {
	vm, release, err := s.vms.AgentHost(ctx, tenantID, vmID)
	if err != nil {
		return nil, err
	}
	defer release()
	list, err := vm.ListAgents(ctx)
	if err != nil {
		return nil, vms.EngineError(err, "list agents")
	}
	out := make([]gateway.Agent, len(list))
	for i, a := range list {
		out[i] = gateway.Agent{ID: a.ID, Installed: a.Installed}
	}
	return out, nil
}

// OpenRequest opens a session.
type OpenRequest struct {
	// SessionID is chosen by the caller; empty means a fresh one.
	SessionID              string
	Agent                  string
	Cwd                    string
	Env                    map[string]string
	AdditionalDirectories  []string
	MCPServers             json.RawMessage
	PermissionPolicy       string // ask, allow_all (default), reject_all
	PermissionDefault      *gateway.PermissionDefault
	AdditionalInstructions string
}

// openTimeout bounds starting an agent (seconds on a loaded machine).
const openTimeout = 3 * time.Minute

// Open starts an agent in a tenant's VM and opens a session with it.
func (s *Service) Open(ctx context.Context, tenant gateway.Tenant, vmID string, req OpenRequest) (gateway.Session, error) {
	vm, release, err := s.vms.AgentHost(ctx, tenant.ID, vmID)
	if err != nil {
		return gateway.Session{}, err
	}
	defer release()
	if err := s.checkAgent(ctx, vm, tenant.ID, vmID, req.Agent); err != nil {
		return gateway.Session{}, err
	}
	if req.SessionID == "" {
		req.SessionID = newSessionID()
	}
	if req.PermissionPolicy == "" {
		req.PermissionPolicy = "allow_all"
	}
	if req.Cwd == "" {
		req.Cwd = "/home/agentos"
	}
	r, err := s.recorderFor(vm, tenant.ID, vmID)
	if err != nil {
		return gateway.Session{}, err
	}
	// The record exists before the agent starts, so that its first events
	// have somewhere to go; a failed open deletes it again.
	now := s.cfg.Now().UTC()
	rec, err := s.store.CreateSession(ctx, gateway.Session{
		ID: req.SessionID, TenantID: tenant.ID, VMID: vmID, Agent: req.Agent, Cwd: req.Cwd,
		AdditionalDirectories: req.AdditionalDirectories, PermissionPolicy: req.PermissionPolicy,
		PermissionDefault: req.PermissionDefault, State: gateway.SessionIdle, CreatedAt: now, UpdatedAt: now,
	})
	if err != nil {
		return gateway.Session{}, err
	}
	r.register(rec)
	// The open runs to its end even if the caller goes away: abandoning it
	// half-way would leave an agent running in the VM with no record.
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), openTimeout)
	defer cancel()
	_, err = vm.OpenSession(octx, vms.OpenSessionOptions{
		SessionID: req.SessionID, Agent: req.Agent, Cwd: req.Cwd, Env: req.Env,
		AdditionalDirectories: req.AdditionalDirectories, MCPServers: req.MCPServers,
		PermissionPolicy: req.PermissionPolicy, AdditionalInstructions: req.AdditionalInstructions,
	})
	if err != nil {
		r.unregister(req.SessionID, "")
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeWriteTimeout)
		defer cancel()
		if derr := s.store.DeleteSession(dctx, tenant.ID, vmID, req.SessionID); derr != nil {
			s.log.Error().Err(derr).Str("vm", vmID).Str("session", req.SessionID).Msg("delete record of failed open")
		}
		return gateway.Session{}, vms.EngineError(err, "open session")
	}
	if vars := s.missingCredentials(ctx, tenant.ID, vmID, req); vars != nil {
		r.setNoCredentials(req.SessionID, vars)
	}
	rec.PendingPermissions = []gateway.Permission{}
	return rec, nil
}

// missingCredentials returns the variables of which the session's agent
// needs one for its model when neither the session's env nor the VM's
// sets any; nil when it has them, or needs none the gateway knows of.
func (s *Service) missingCredentials(ctx context.Context, tenantID, vmID string, req OpenRequest) []string {
	if missingCredentials(req.Agent, req.Env) == nil {
		return nil
	}
	vm, err := s.store.GetVM(ctx, tenantID, vmID)
	if err != nil {
		// The VM's env cannot be read: the prompt is let through, as
		// before the check existed, rather than refused on a guess.
		s.log.Warn().Err(err).Str("vm", vmID).Msg("read the VM's env for the agent's credentials")
		return nil
	}
	return missingCredentials(req.Agent, req.Env, vm.Spec.Env)
}

// checkAgent refuses an agent the VM does not know (400), has not
// installed (422) or cannot run (422) with a problem that says what to do,
// instead of the engine's generic invalid state.
func (s *Service) checkAgent(ctx context.Context, vm vms.AgentHost, tenantID, vmID, agent string) error {
	list, err := vm.ListAgents(ctx)
	if err != nil {
		return vms.EngineError(err, "list agents")
	}
	known := make([]string, 0, len(list))
	for _, a := range list {
		if a.ID == agent {
			if !a.Installed {
				return gateway.Errorf(gateway.CodeUnprocessable, "agent %q is not installed in this VM; create the VM with \"agents\": [%q]", agent, agent).
					WithDetail("field", "agent").WithDetail("reason", "agent_not_installed")
			}
			return nil
		}
		known = append(known, a.ID)
	}
	// The engine lists only the agents the VM was created with; one the
	// gateway can install is not unknown, just not installed here, or, when
	// the VM was created with it, its package projects no ACP adapter (Codex
	// on agentOS 0.2.21: codex-cli ships commands only).
	if pkg, ok := vms.AgentPackages[agent]; ok {
		rec, err := s.store.GetVM(ctx, tenantID, vmID)
		if err != nil {
			return fmt.Errorf("sessions: look up VM %s: %w", vmID, err)
		}
		if slices.Contains(rec.Spec.Agents, agent) {
			return gateway.Errorf(gateway.CodeUnprocessable, "agent %q cannot run sessions: its package %s is installed in this VM but provides no ACP adapter for this engine", agent, pkg).
				WithDetail("field", "agent").WithDetail("reason", "agent_has_no_adapter")
		}
		return gateway.Errorf(gateway.CodeUnprocessable, "agent %q is not installed in this VM; create the VM with \"agents\": [%q]", agent, agent).
			WithDetail("field", "agent").WithDetail("reason", "agent_not_installed")
	}
	msg := fmt.Sprintf("unknown agent %q; this VM has no agents", agent)
	if len(known) > 0 {
		msg = fmt.Sprintf("unknown agent %q; this VM has %s", agent, strings.Join(known, ", "))
	}
	return gateway.Errorf(gateway.CodeInvalidArgument, "%s", msg).
		WithDetail("field", "agent").WithDetail("reason", "unknown_agent")
}

// Get returns a tenant's session with its current state.
func (s *Service) Get(ctx context.Context, tenantID, vmID, id string) (gateway.Session, error) {
	rec, err := s.store.GetSession(ctx, tenantID, vmID, id)
	if err != nil {
		return gateway.Session{}, err
	}
	vm, err := s.store.GetVM(ctx, tenantID, vmID)
	if err != nil {
		return gateway.Session{}, err
	}
	if err := s.describe(ctx, vm, &rec); err != nil {
		return gateway.Session{}, err
	}
	return rec, nil
}

// List pages a tenant's sessions of a VM, oldest first.
func (s *Service) List(ctx context.Context, tenantID, vmID, cursor string, limit int) (gateway.Page[gateway.Session], error) {
	vm, err := s.store.GetVM(ctx, tenantID, vmID)
	if err != nil {
		return gateway.Page[gateway.Session]{}, err
	}
	page, err := s.store.ListSessions(ctx, tenantID, vmID, cursor, limit)
	if err != nil {
		return page, err
	}
	for i := range page.Items {
		if err := s.describe(ctx, vm, &page.Items[i]); err != nil {
			return gateway.Page[gateway.Session]{}, err
		}
	}
	return page, nil
}

// describe sets the state a stored session has now: closed or lost with its
// VM, running or waiting while a turn runs.
func (s *Service) describe(ctx context.Context, vm gateway.VM, rec *gateway.Session) error {
	rec.PendingPermissions = []gateway.Permission{}
	switch vm.State {
	case gateway.VMLost:
		rec.State = gateway.SessionLost
		return nil
	case gateway.VMDisposed, gateway.VMDisposing:
		rec.State = gateway.SessionClosed
		return nil
	}
	s.mu.Lock()
	r := s.recorders[vm.ID]
	s.mu.Unlock()
	if r == nil || !r.turnRunning(rec.ID) {
		return nil
	}
	rec.State = gateway.SessionRunning
	pending, err := s.store.Permissions(ctx, vm.ID, rec.ID, true)
	if err != nil {
		return err
	}
	if len(pending) > 0 {
		rec.State = gateway.SessionWaiting
		rec.PendingPermissions = pending
	}
	return nil
}

// Delete deletes a session and its history, from the VM's engine when the VM
// is live and from the store in any case.
func (s *Service) Delete(ctx context.Context, tenantID, vmID, id string) error {
	// liveSession reads the record first: an unknown session is not_found
	// (a delete is idempotent), and ErrVMEnded means the session exists but
	// its VM has ended.
	ls, release, err := s.liveSession(ctx, tenantID, vmID, id)
	if err == nil {
		defer release()
		if err := ls.handle().Delete(ctx); err != nil {
			return vms.EngineError(err, "delete session")
		}
		ls.r.unregister(id, endDeleted)
	} else if !errors.Is(err, vms.ErrVMEnded) {
		return err
	}
	return s.store.DeleteSession(ctx, tenantID, vmID, id)
}

// Unload stops a session's agent; a later prompt starts it again.
func (s *Service) Unload(ctx context.Context, tenantID, vmID, id string) (gateway.Session, error) {
	ls, release, err := s.live(ctx, tenantID, vmID, id)
	if err != nil {
		return gateway.Session{}, err
	}
	defer release()
	if err := ls.handle().Unload(ctx); err != nil {
		return gateway.Session{}, vms.EngineError(err, "unload session")
	}
	if err := s.store.SetSessionState(ctx, vmID, id, gateway.SessionUnloaded); err != nil {
		return gateway.Session{}, err
	}
	ls.r.setStoredState(id, gateway.SessionUnloaded)
	return s.Get(ctx, tenantID, vmID, id)
}

// History pages a session's durable events from the store.
func (s *Service) History(ctx context.Context, tenantID, vmID, id string, q gateway.HistoryQuery) (gateway.HistoryPage, error) {
	if _, err := s.store.GetSession(ctx, tenantID, vmID, id); err != nil {
		return gateway.HistoryPage{}, err
	}
	return s.store.SessionHistory(ctx, vmID, id, q)
}

// Permissions lists a session's pending permission requests.
func (s *Service) Permissions(ctx context.Context, tenantID, vmID, id string) ([]gateway.Permission, error) {
	if _, err := s.store.GetSession(ctx, tenantID, vmID, id); err != nil {
		return nil, err
	}
	vm, err := s.store.GetVM(ctx, tenantID, vmID)
	if err != nil {
		return nil, err
	}
	if vm.State.Final() || vm.State == gateway.VMDisposing {
		// Nobody can answer them any more.
		return []gateway.Permission{}, nil
	}
	return s.store.Permissions(ctx, vmID, id, true)
}

// SessionConfig is an agent's configuration options.
type SessionConfig = vms.SessionConfig

// Config returns a session's configuration options.
func (s *Service) Config(ctx context.Context, tenantID, vmID, id string) (SessionConfig, error) {
	return onLive(ctx, s, tenantID, vmID, id, "get session config", func(sess *vms.AgentSession) (SessionConfig, error) {
		return sess.Config(ctx)
	})
}

// SetConfig sets one configuration option. An agent that cannot change it
// answers with a conflict that says so.
func (s *Service) SetConfig(ctx context.Context, tenantID, vmID, id, configID string, value json.RawMessage) (SessionConfig, error) {
	return onLive(ctx, s, tenantID, vmID, id, "set session config "+configID, func(sess *vms.AgentSession) (SessionConfig, error) {
		return sess.SetConfig(ctx, configID, value)
	})
}

// Capabilities returns the agent's ACP capabilities.
func (s *Service) Capabilities(ctx context.Context, tenantID, vmID, id string) (json.RawMessage, error) {
	return onLive(ctx, s, tenantID, vmID, id, "get session capabilities", func(sess *vms.AgentSession) (json.RawMessage, error) {
		return sess.Capabilities(ctx)
	})
}

// AgentInfo returns the agent's description of itself.
func (s *Service) AgentInfo(ctx context.Context, tenantID, vmID, id string) (json.RawMessage, error) {
	return onLive(ctx, s, tenantID, vmID, id, "get agent info", func(sess *vms.AgentSession) (json.RawMessage, error) {
		return sess.AgentInfo(ctx)
	})
}

// onLive runs call on a tenant's session of a live VM, holding the VM for
// its length, and maps the engine's error.
func onLive[T any](ctx context.Context, s *Service, tenantID, vmID, id, what string, call func(*vms.AgentSession) (T, error)) (T, error) {
	var zero T
	ls, release, err := s.live(ctx, tenantID, vmID, id)
	if err != nil {
		return zero, err
	}
	defer release()
	v, err := call(ls.handle())
	if err != nil {
		return zero, vms.EngineError(err, what)
	}
	return v, nil
}

// liveSession is a stored session of a live VM, registered with the VM's
// recorder.
type liveSession struct {
	r  *recorder
	id string
}

func (ls liveSession) handle() *vms.AgentSession { return ls.r.vm.Session(ls.id) }

// live resolves a tenant's session of a live VM and holds the VM until
// release: CodeNotFound for an unknown session, CodeConflict when the VM has
// ended.
func (s *Service) live(ctx context.Context, tenantID, vmID, id string) (liveSession, func(), error) {
	ls, release, err := s.liveSession(ctx, tenantID, vmID, id)
	if err != nil {
		return ls, release, s.vmAtFault(ctx, tenantID, vmID, err)
	}
	return ls, release, nil
}

// liveSession is live for a reader of a session (Follow), to whom an unknown
// session is not_found whatever its VM's state.
func (s *Service) liveSession(ctx context.Context, tenantID, vmID, id string) (liveSession, func(), error) {
	rec, err := s.store.GetSession(ctx, tenantID, vmID, id)
	if err != nil {
		return liveSession{}, nil, err
	}
	vm, release, err := s.vms.AgentHost(ctx, tenantID, vmID)
	if err != nil {
		return liveSession{}, nil, err
	}
	r, err := s.recorderFor(vm, tenantID, vmID)
	if err != nil {
		release()
		return liveSession{}, nil, err
	}
	r.ensure(rec)
	return liveSession{r: r, id: id}, release, nil
}

// vmAtFault turns a session's not_found into what is wrong with its VM, when
// something is: an unknown VM is the VM's not_found, and a VM that ended is
// a conflict naming its state, as any other call to it says. A prompt to
// a disposed VM used to answer "session demo not found".
func (s *Service) vmAtFault(ctx context.Context, tenantID, vmID string, err error) error {
	if gateway.ErrorCode(err) != gateway.CodeNotFound {
		return err
	}
	vm, verr := s.store.GetVM(ctx, tenantID, vmID)
	switch {
	case verr != nil:
		return verr
	case vm.State.Final():
		e := gateway.Errorf(gateway.CodeConflict, "the VM is %s", vm.State).WithDetail("state", vm.State)
		if vm.Reason != "" {
			e = e.WithDetail("reason", vm.Reason)
		}
		return e
	}
	return err
}

// recorderFor returns the recorder of a live VM, starting it if needed.
func (s *Service) recorderFor(vm vms.AgentHost, tenantID, vmID string) (*recorder, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return nil, gateway.Errorf(gateway.CodeUnavailable, "the gateway is shutting down")
	}
	if r := s.recorders[vmID]; r != nil {
		return r, nil
	}
	r := newRecorder(s, vm, tenantID, vmID)
	s.recorders[vmID] = r
	s.wg.Add(1)
	go r.run()
	return r, nil
}

func (s *Service) removeRecorder(r *recorder) {
	s.mu.Lock()
	if s.recorders[r.vmID] == r {
		delete(s.recorders, r.vmID)
	}
	s.mu.Unlock()
}
