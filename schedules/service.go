// Package schedules runs the cron schedules of VMs: it parses and validates
// them, stores them, and on the node that runs a VM arms them on a robfig
// cron runner; each tick runs the schedule's exec (through the vms service)
// or session prompt, records the run and publishes it as a VM event. A VM's
// schedules end with it.
package schedules

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/robfig/cron/v3"
	"github.com/rs/zerolog"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/sessions"
	"github.com/agentos-gateway/agentos-gateway/vms"
)

// Store is what the service keeps in the database.
type Store interface {
	GetTenant(ctx context.Context, id string) (gateway.Tenant, error)
	CreateSchedule(ctx context.Context, s gateway.Schedule, maxTenant int) (gateway.Schedule, error)
	GetSchedule(ctx context.Context, tenantID, vmID, id string) (gateway.Schedule, error)
	ListSchedules(ctx context.Context, tenantID, vmID, cursor string, limit int) (gateway.Page[gateway.Schedule], error)
	SchedulesOfVM(ctx context.Context, vmID string) ([]gateway.Schedule, error)
	SchedulesOfHibernatedVMs(ctx context.Context, node string) ([]gateway.Schedule, error)
	DeleteSchedule(ctx context.Context, tenantID, vmID, id string) error
	DeleteVMSchedules(ctx context.Context, vmID string) (int, error)
	DeleteEndedVMSchedules(ctx context.Context) (int, error)
	RecordRun(ctx context.Context, r gateway.ScheduleRun) (gateway.ScheduleRun, error)
	ListRuns(ctx context.Context, tenantID, vmID, scheduleID, cursor string, limit int) (gateway.Page[gateway.ScheduleRun], error)
}

// VMs is what the service needs of the vms service: to run a command, to
// know that a VM can take calls and when it ended, and to publish events.
type VMs interface {
	Usable(ctx context.Context, tenantID, id string) error
	Get(ctx context.Context, tenantID, id string) (gateway.VM, error)
	ExecTimeout(requested time.Duration) (time.Duration, error)
	CheckCwd(ctx context.Context, tenantID, vmID, cwd string) error
	Exec(ctx context.Context, tenant gateway.Tenant, vmID string, req vms.ExecRequest, onOutput func(vms.Chunk)) (*vms.ExecResult, error)
	Ended(id string) <-chan struct{}
	Runs(id string) bool
	Publish(vmID string, ev gateway.VMEvent)
}

// Prompter sends a prompt to a session: the sessions service.
type Prompter interface {
	Prompt(ctx context.Context, tenantID, vmID, id string, req sessions.PromptRequest) (sessions.PromptOutcome, error)
}

// Config configures the service.
type Config struct {
	Log zerolog.Logger
	// Now is the clock of run records (time.Now when nil).
	Now func() time.Time
	// NodeID names this node: Start arms the schedules of the VMs it
	// hibernated.
	NodeID string
}

// storeWriteTimeout bounds the store writes the service does on its own
// behalf (run records, a VM's end), outside any request.
const storeWriteTimeout = 10 * time.Second

// parser reads five fields, an optional leading seconds field (so that
// tests and tight loops can tick more than once a minute), descriptors
// (@hourly, @every 2s) and the CRON_TZ= prefix the service adds for the
// schedule's time zone.
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Service runs schedules. Start it before use; Close stops every run
// and waits for them.
type Service struct {
	cfg      Config
	store    Store
	vms      VMs
	prompter Prompter
	log      zerolog.Logger
	runner   *cron.Cron

	mu      sync.Mutex
	closing bool
	armed   map[string]*armed // by schedule id
	watched map[string]bool   // VMs whose end is watched
	stop    chan struct{}
	ctx     context.Context // cancelled at Close: the runs' parent
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// armed is a schedule on the runner.
type armed struct {
	s       gateway.Schedule
	entry   cron.EntryID
	running bool
	queued  bool
	removed bool
}

// New returns a service; prompter may be nil when sessions are not served,
// and then prompt actions are refused.
func New(cfg Config, store Store, v VMs, prompter Prompter) *Service {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Service{
		cfg: cfg, store: store, vms: v, prompter: prompter, log: cfg.Log,
		runner: cron.New(cron.WithParser(parser), cron.WithLocation(time.UTC)),
		armed:  map[string]*armed{}, watched: map[string]bool{}, stop: make(chan struct{}),
		ctx: ctx, cancel: cancel,
	}
}

// Start removes the schedules of VMs that ended while the gateway was down
// (a restart loses every VM of this node that it did not hibernate), arms
// those of the VMs this node hibernated (their runs wake them), and starts
// the runner. A node that wakes a VM arms its schedules (SetUpVM).
func (s *Service) Start(ctx context.Context) error {
	n, err := s.store.DeleteEndedVMSchedules(ctx)
	if err != nil {
		return err
	}
	if n > 0 {
		s.log.Info().Int("schedules", n).Msg("removed the schedules of VMs that ended")
	}
	if s.cfg.NodeID != "" {
		list, err := s.store.SchedulesOfHibernatedVMs(ctx, s.cfg.NodeID)
		if err != nil {
			return err
		}
		for _, sc := range list {
			if err := s.arm(sc); err != nil {
				return err
			}
		}
	}
	s.runner.Start()
	return nil
}

// SetUpVM arms the schedules of a VM this node wakes (a new VM has none
// yet). It implements vms.VMSetup with VMEnded.
func (s *Service) SetUpVM(ctx context.Context, vm gateway.VM, _ vms.BindingHost) error {
	if vm.State != gateway.VMWaking {
		return nil
	}
	return s.ArmVM(ctx, vm.ID)
}

// VMEnded does nothing: the end of a VM is watched by arm, which tells an
// ended VM from a hibernated one.
func (s *Service) VMEnded(string) {}

// Close stops the runner, cancels the runs in progress and waits for
// every goroutine of the service: the runs end once cancelled, and every
// store write has its own timeout, so nothing outlives Close even when
// ctx expires first (which it reports).
func (s *Service) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil
	}
	s.closing = true
	close(s.stop)
	s.mu.Unlock()
	stopped := s.runner.Stop()
	s.cancel()
	<-stopped.Done()
	s.wg.Wait()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("schedules: shutdown: %w", err)
	}
	return nil
}

// Parse checks a cron expression in a time zone and returns its schedule;
// each mistake is invalid_argument naming its field.
func Parse(expr, timezone string) (cron.Schedule, error) {
	if timezone == "" {
		timezone = "UTC"
	}
	if _, err := time.LoadLocation(timezone); err != nil || strings.ContainsAny(timezone, " \t") {
		return nil, gateway.Errorf(gateway.CodeInvalidArgument, "timezone %q is not an IANA time zone name", timezone).WithDetail("field", "timezone")
	}
	expr = strings.TrimSpace(expr)
	if expr == "" || strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return nil, gateway.Errorf(gateway.CodeInvalidArgument, "cron must be a cron expression (the time zone goes in timezone)").WithDetail("field", "cron")
	}
	sched, err := parser.Parse("CRON_TZ=" + timezone + " " + expr)
	if err != nil {
		return nil, gateway.Wrap(gateway.CodeInvalidArgument, err, "cron %q is not a valid expression: %s", expr, err).WithDetail("field", "cron")
	}
	// robfig rounds a shorter @every up to a second: say so instead.
	if d, err := time.ParseDuration(strings.TrimSpace(strings.TrimPrefix(expr, "@every "))); strings.HasPrefix(expr, "@every ") && err == nil && d < time.Second {
		return nil, gateway.Errorf(gateway.CodeInvalidArgument, "cron %q ticks more often than once a second", expr).WithDetail("field", "cron")
	}
	return sched, nil
}

// Create validates and stores a schedule of a live VM of the tenant, and
// arms it.
func (s *Service) Create(ctx context.Context, tenant gateway.Tenant, sc gateway.Schedule) (gateway.Schedule, error) {
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	if closing {
		return gateway.Schedule{}, gateway.Errorf(gateway.CodeUnavailable, "the gateway is shutting down")
	}
	// The VM first: another tenant's is not found, whatever the body says.
	if err := s.vms.Usable(ctx, tenant.ID, sc.VMID); err != nil {
		return gateway.Schedule{}, err
	}
	if sc.Timezone == "" {
		sc.Timezone = "UTC"
	}
	if sc.Overlap == "" {
		sc.Overlap = gateway.OverlapSkip
	}
	if !sc.Overlap.Valid() {
		return gateway.Schedule{}, gateway.Errorf(gateway.CodeInvalidArgument, "overlap must be skip or queue").WithDetail("field", "overlap")
	}
	if _, err := Parse(sc.Cron, sc.Timezone); err != nil {
		return gateway.Schedule{}, err
	}
	switch {
	case (sc.Exec == nil) == (sc.Prompt == nil):
		return gateway.Schedule{}, gateway.Errorf(gateway.CodeInvalidArgument, "action must hold exactly one of exec and prompt").WithDetail("field", "action")
	case sc.Prompt != nil && s.prompter == nil:
		return gateway.Schedule{}, gateway.Errorf(gateway.CodeInvalidArgument, "this gateway serves no sessions to prompt").WithDetail("field", "action.prompt")
	case sc.Prompt != nil && sc.Prompt.Session == "":
		return gateway.Schedule{}, gateway.Errorf(gateway.CodeInvalidArgument, "action.prompt.session is required").WithDetail("field", "action.prompt.session")
	case sc.Prompt != nil:
		if err := sessions.ValidateContent(sc.Prompt.Content); err != nil {
			return gateway.Schedule{}, err
		}
	case sc.Exec != nil:
		// What would fail every run is refused now, named where it is in
		// the body.
		if _, err := s.vms.ExecTimeout(sc.Exec.Timeout); err != nil {
			return gateway.Schedule{}, renameField(err, "action.exec.timeoutMs")
		}
		if err := s.vms.CheckCwd(ctx, tenant.ID, sc.VMID, sc.Exec.Cwd); err != nil {
			return gateway.Schedule{}, renameField(err, "action.exec.cwd")
		}
	}
	sc.TenantID = tenant.ID
	sc.ID = ""
	out, err := s.store.CreateSchedule(ctx, sc, tenant.Quotas.MaxSchedules)
	if err != nil {
		return gateway.Schedule{}, err
	}
	if err := s.arm(out); err != nil {
		return gateway.Schedule{}, err
	}
	return out, nil
}

// renameField names field in err's details, when it is an invalid_argument
// that names one.
func renameField(err error, field string) error {
	var ge *gateway.Error
	if errors.As(err, &ge) && ge.Code == gateway.CodeInvalidArgument && ge.Details["field"] != nil {
		ge.WithDetail("field", field)
	}
	return err
}

// Get returns a tenant's schedule.
func (s *Service) Get(ctx context.Context, tenantID, vmID, id string) (gateway.Schedule, error) {
	return s.store.GetSchedule(ctx, tenantID, vmID, id)
}

// List lists a tenant's schedules of a VM; another tenant's VM is
// CodeNotFound, as on every route.
func (s *Service) List(ctx context.Context, tenantID, vmID, cursor string, limit int) (gateway.Page[gateway.Schedule], error) {
	if _, err := s.vms.Get(ctx, tenantID, vmID); err != nil {
		return gateway.Page[gateway.Schedule]{}, err
	}
	return s.store.ListSchedules(ctx, tenantID, vmID, cursor, limit)
}

// Runs lists the recorded runs of a tenant's schedule, oldest first.
func (s *Service) Runs(ctx context.Context, tenantID, vmID, id, cursor string, limit int) (gateway.Page[gateway.ScheduleRun], error) {
	return s.store.ListRuns(ctx, tenantID, vmID, id, cursor, limit)
}

// Delete disarms and removes a tenant's schedule; a run in progress ends on
// its own and is not recorded.
func (s *Service) Delete(ctx context.Context, tenantID, vmID, id string) error {
	if err := s.store.DeleteSchedule(ctx, tenantID, vmID, id); err != nil {
		return err
	}
	s.disarm(id)
	return nil
}

// ArmVM arms every stored schedule of a VM this node runs: what the VM's
// owner calls when it takes the VM on.
func (s *Service) ArmVM(ctx context.Context, vmID string) error {
	list, err := s.store.SchedulesOfVM(ctx, vmID)
	if err != nil {
		return err
	}
	for _, sc := range list {
		if err := s.arm(sc); err != nil {
			return err
		}
	}
	return nil
}

// arm puts a schedule on the runner and watches its VM's end.
func (s *Service) arm(sc gateway.Schedule) error {
	sched, err := Parse(sc.Cron, sc.Timezone)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return gateway.Errorf(gateway.CodeUnavailable, "the gateway is shutting down")
	}
	if _, ok := s.armed[sc.ID]; ok {
		return nil
	}
	a := &armed{s: sc}
	a.entry = s.runner.Schedule(sched, cron.FuncJob(func() { s.tick(a) }))
	s.armed[sc.ID] = a
	s.watchLocked(sc.TenantID, sc.VMID)
	return nil
}

// watchLocked watches the end of a VM whose schedules are armed, unless it
// is watched already: an ended VM's schedules go with it; a hibernated
// VM's stay armed, and the next run (which wakes it) watches it again.
func (s *Service) watchLocked(tenantID, vmID string) {
	if s.watched[vmID] || s.closing {
		return
	}
	s.watched[vmID] = true
	ended := s.vms.Ended(vmID)
	s.wg.Go(func() {
		select {
		case <-ended:
		case <-s.stop:
			return
		}
		ctx, cancel := context.WithTimeout(s.ctx, storeWriteTimeout)
		vm, err := s.vms.Get(ctx, tenantID, vmID)
		cancel()
		if (err == nil && !vm.State.Final()) || (err != nil && gateway.ErrorCode(err) != gateway.CodeNotFound) {
			s.mu.Lock()
			delete(s.watched, vmID)
			s.mu.Unlock()
			return
		}
		s.vmEnded(vmID)
	})
}

// disarmVM takes the schedules of a VM off this node's runner, and keeps
// them in the store: another node runs the VM and armed them.
func (s *Service) disarmVM(vmID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, a := range s.armed {
		if a.s.VMID == vmID {
			s.runner.Remove(a.entry)
			a.removed = true
			delete(s.armed, id)
		}
	}
}

// disarm takes a schedule off the runner.
func (s *Service) disarm(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.armed[id]; ok {
		s.runner.Remove(a.entry)
		a.removed = true
		delete(s.armed, id)
	}
}

// vmEnded disarms and removes the schedules of a VM that ended.
func (s *Service) vmEnded(vmID string) {
	s.mu.Lock()
	for id, a := range s.armed {
		if a.s.VMID == vmID {
			s.runner.Remove(a.entry)
			a.removed = true
			delete(s.armed, id)
		}
	}
	delete(s.watched, vmID)
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), storeWriteTimeout)
	defer cancel()
	if _, err := s.store.DeleteVMSchedules(ctx, vmID); err != nil {
		s.log.Error().Err(err).Str("vm", vmID).Msg("delete the schedules of an ended vm")
	}
}

// tick is the runner's job for a schedule: it starts a run, or applies the
// overlap policy when one runs.
func (s *Service) tick(a *armed) {
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing || a.removed {
		return
	}
	if a.running {
		if a.s.Overlap == gateway.OverlapQueue && !a.queued {
			a.queued = true
			return
		}
		run := gateway.ScheduleRun{ScheduleID: a.s.ID, VMID: a.s.VMID, StartedAt: now, EndedAt: now, Outcome: gateway.RunSkipped}
		s.wg.Go(func() { s.record(a, run) })
		return
	}
	a.running = true
	s.wg.Go(func() { s.runLoop(a) })
}

// runLoop runs a schedule's action, then its queued tick if there is one.
func (s *Service) runLoop(a *armed) {
	for {
		s.record(a, s.run(a.s))
		s.afterRun(a.s)
		s.mu.Lock()
		if a.queued && !a.removed && !s.closing {
			a.queued = false
			s.mu.Unlock()
			continue
		}
		a.running, a.queued = false, false
		s.mu.Unlock()
		return
	}
}

// afterRun follows the VM where the run found it: woken on this node, its
// end is watched again; running on another node (which woke it and armed
// its schedules), its schedules leave this node's runner.
func (s *Service) afterRun(sc gateway.Schedule) {
	if s.vms.Runs(sc.VMID) {
		s.mu.Lock()
		s.watchLocked(sc.TenantID, sc.VMID)
		s.mu.Unlock()
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, storeWriteTimeout)
	defer cancel()
	if vm, err := s.vms.Get(ctx, sc.TenantID, sc.VMID); err == nil && vm.State == gateway.VMReady {
		s.disarmVM(sc.VMID)
	}
}

// run runs a schedule's action once.
func (s *Service) run(sc gateway.Schedule) (r gateway.ScheduleRun) {
	r = gateway.ScheduleRun{ScheduleID: sc.ID, VMID: sc.VMID, StartedAt: s.cfg.Now()}
	defer func() { r.EndedAt = s.cfg.Now() }()
	tenant, err := s.store.GetTenant(s.ctx, sc.TenantID)
	if err != nil {
		r.Outcome, r.Error = gateway.RunError, gateway.ErrorMessage(err)
		return r
	}
	if p := sc.Prompt; p != nil {
		_, err := s.prompter.Prompt(s.ctx, sc.TenantID, sc.VMID, p.Session, sessions.PromptRequest{Content: p.Content})
		r.Outcome = gateway.RunSucceeded
		if err != nil {
			r.Outcome, r.Error = outcomeOf(err), gateway.ErrorMessage(err)
		}
		return r
	}
	res, err := s.vms.Exec(s.ctx, tenant, sc.VMID, execRequest(sc.Exec), nil)
	if err != nil {
		r.Outcome, r.Error = outcomeOf(err), gateway.ErrorMessage(err)
		return r
	}
	code := res.ExitCode
	r.ExitCode, r.Signal = &code, res.Signal
	r.Outcome = gateway.RunSucceeded
	if code != 0 || res.Signal != "" {
		r.Outcome = gateway.RunFailed
	}
	r.Stdout, r.Stderr = storable(res.Stdout), storable(res.Stderr)
	r.Truncated = res.StdoutTruncated || res.StderrTruncated
	return r
}

// outcomeOf tells a deadline from any other failure to run.
func outcomeOf(err error) gateway.RunOutcome {
	if gateway.ErrorCode(err) == gateway.CodeDeadlineExceeded {
		return gateway.RunTimedOut
	}
	return gateway.RunError
}

// execRequest is the vms service's request for a scheduled exec, resolved
// as POST /exec resolves its body: a program with args runs without a shell.
func execRequest(e *gateway.ScheduleExec) vms.ExecRequest {
	req := vms.ExecRequest{Command: e.Command, Argv: e.Argv, Cwd: e.Cwd, Env: e.Env, Timeout: e.Timeout, MaxOutputBytes: gateway.MaxRunOutputBytes}
	if e.Args != nil {
		req.Command, req.Argv = "", append([]string{e.Command}, e.Args...)
	}
	return req
}

// storable makes output a text column can hold: valid UTF-8 without NUL
// (PostgreSQL refuses both).
func storable(b []byte) string {
	return strings.ReplaceAll(strings.ToValidUTF8(string(b), string(utf8.RuneError)), "\x00", string(utf8.RuneError))
}

// record stores a run and publishes it on its VM's event stream; the run of
// a schedule deleted meanwhile is dropped.
func (s *Service) record(a *armed, r gateway.ScheduleRun) {
	ctx, cancel := context.WithTimeout(context.Background(), storeWriteTimeout)
	defer cancel()
	out, err := s.store.RecordRun(ctx, r)
	if gateway.ErrorCode(err) == gateway.CodeNotFound {
		return
	}
	if err != nil {
		s.log.Error().Err(err).Str("schedule", a.s.ID).Msg("record a schedule run")
		return
	}
	detail := map[string]string{"run": out.ID, "outcome": string(out.Outcome)}
	if out.ExitCode != nil {
		detail["exitCode"] = strconv.Itoa(*out.ExitCode)
	}
	s.vms.Publish(out.VMID, gateway.VMEvent{Type: gateway.VMEventScheduleRun, Time: out.EndedAt.UTC(), Name: out.ScheduleID, Detail: detail})
}
