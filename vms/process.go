package vms

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/agentos"
	"github.com/agentos-gateway/agentos-gateway/streamlog"
)

// Chunk is a piece of process or shell output.
type Chunk struct {
	Stream string // "stdout" | "stderr"
	Data   []byte
	Time   time.Time
}

// ExecRequest is a one-shot command: a command line (Command), or an argv
// run without a shell.
type ExecRequest struct {
	Command string
	Argv    []string
	Cwd     string
	Env     map[string]string
	Stdin   []byte
	// Timeout is the deadline; 0 means Config.ExecTimeoutDefault, and more
	// than Config.ExecTimeoutMax is refused.
	Timeout time.Duration
	// MaxOutputBytes caps what is kept of each of stdout and stderr
	// (0: DefaultMaxOutputBytes).
	MaxOutputBytes int
}

// DefaultMaxOutputBytes is what a buffered exec keeps of each of its output
// streams when the request does not say: an answer carries both streams in
// one JSON document, so their size must stay reasonable by default.
const DefaultMaxOutputBytes = 1 << 20

// ExecTimeout resolves the deadline of an exec: the default when requested
// is 0, or an invalid_argument error when it is above the maximum.
func (s *Service) ExecTimeout(requested time.Duration) (time.Duration, error) {
	switch {
	case requested <= 0:
		return s.cfg.ExecTimeoutDefault, nil
	case requested > s.cfg.ExecTimeoutMax:
		return 0, gateway.Errorf(gateway.CodeInvalidArgument, "timeoutMs %d is above the gateway's maximum exec deadline of %d ms",
			requested.Milliseconds(), s.cfg.ExecTimeoutMax.Milliseconds()).
			WithDetail("field", "timeoutMs").WithDetail("maximum", s.cfg.ExecTimeoutMax.Milliseconds())
	}
	return requested, nil
}

// CheckCwd refuses a working directory that does not exist in the VM or is
// not a directory, so that nothing runs in a place the caller did not mean.
// An empty cwd (the default, /workspace) is accepted.
func (s *Service) CheckCwd(ctx context.Context, tenantID, vmID, cwd string) error {
	lv, err := s.lookup(ctx, tenantID, vmID)
	if err != nil {
		return err
	}
	return checkCwd(ctx, lv.vm, cwd)
}

// lookupAt is lookup for a call that runs something in cwd: it also checks
// that cwd is a directory of the VM (see CheckCwd). The VM is held busy
// from the check on until release is called, so the idle reaper cannot
// dispose of it while the call launches its process (a launch cut short
// that way was answered as a bad command).
func (s *Service) lookupAt(ctx context.Context, tenantID, vmID, cwd string) (lv *liveVM, release func(), err error) {
	lv, err = s.lookup(ctx, tenantID, vmID)
	if err != nil {
		return nil, nil, err
	}
	// What runs may write anywhere: until it ends, checkpoints compare the
	// whole tree.
	done, guestDone := lv.hold(s.cfg.Now()), lv.guestRuns()
	release = func() { guestDone(); done() }
	if err := checkCwd(ctx, lv.vm, cwd); err != nil {
		release()
		return nil, nil, err
	}
	return lv, release, nil
}

func checkCwd(ctx context.Context, vm *agentos.VM, cwd string) error {
	if cwd == "" {
		return nil
	}
	info, err := vm.Stat(ctx, cwd)
	var rej *agentos.RejectedError
	switch {
	case errors.Is(err, agentos.ErrNotFound):
		return gateway.Errorf(gateway.CodeInvalidArgument, "cwd %s does not exist in the VM", cwd).WithDetail("field", "cwd")
	case errors.As(err, &rej) && rej.Errno == "ENOTDIR", err == nil && !info.IsDir:
		return gateway.Errorf(gateway.CodeInvalidArgument, "cwd %s is not a directory", cwd).WithDetail("field", "cwd")
	case err != nil:
		var ge *gateway.Error
		if err = EngineError(err, "check cwd"); errors.As(err, &ge) && ge.Code == gateway.CodeInvalidArgument {
			return ge.WithDetail("field", "cwd")
		}
		return err
	}
	return nil
}

// launchError maps the failure of a launch: a program that does not exist
// is the caller's mistake, said in the gateway's words.
func launchError(err error, what string) error {
	var nf *agentos.CommandNotFoundError
	if errors.As(err, &nf) {
		return gateway.Wrap(gateway.CodeInvalidArgument, err, "command not found: %s", nf.Name).WithDetail("field", "command")
	}
	return EngineError(err, what)
}

// ExecResult is a finished one-shot command.
type ExecResult struct {
	ExitCode        int            `json:"exitCode"`
	Signal          gateway.Signal `json:"signal,omitempty"`
	Stdout          []byte         `json:"-"`
	Stderr          []byte         `json:"-"`
	StdoutTruncated bool           `json:"-"`
	StderrTruncated bool           `json:"-"`
	Duration        time.Duration  `json:"-"`
	Pid             uint32         `json:"-"`
}

// countProcess enforces the tenant's process quota and returns its release.
func (s *Service) countProcess(tenant gateway.Tenant) (func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if max := tenant.Quotas.MaxProcesses; max > 0 && s.procCount[tenant.ID] >= max {
		return nil, gateway.Errorf(gateway.CodeResourceExhausted, "tenant %s runs %d processes, its quota", tenant.ID, max).WithDetail("quota", "maxProcesses")
	}
	s.procCount[tenant.ID]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			s.procCount[tenant.ID]--
			s.mu.Unlock()
		})
	}, nil
}

// Exec runs a command to completion: PrepareExec, then Run. onOutput, when
// set, receives the output as it arrives and must not block.
func (s *Service) Exec(ctx context.Context, tenant gateway.Tenant, vmID string, req ExecRequest, onOutput func(Chunk)) (*ExecResult, error) {
	p, err := s.PrepareExec(ctx, tenant, vmID, req)
	if err != nil {
		return nil, err
	}
	return p.Run(ctx, onOutput)
}

// PreparedExec is an exec whose deadline, VM and working directory were
// checked, each once, and whose VM is held from the checks on: Run runs it,
// once; Release lets the VM go when it will not run (both may be called,
// in any order).
type PreparedExec struct {
	s       *Service
	tenant  gateway.Tenant
	lv      *liveVM
	req     ExecRequest
	timeout time.Duration
	release sync.Once
	unhold  func()
}

// PrepareExec checks an exec before it runs: its deadline (ExecTimeout),
// its stdin's size, its VM (usable by the tenant) and its cwd (CheckCwd).
// A caller that must
// answer with a status before it starts streaming (a streamed exec)
// prepares, answers, then runs.
func (s *Service) PrepareExec(ctx context.Context, tenant gateway.Tenant, vmID string, req ExecRequest) (*PreparedExec, error) {
	timeout, err := s.ExecTimeout(req.Timeout)
	if err != nil {
		return nil, err
	}
	if len(req.Stdin) > MaxStdinWrite {
		return nil, gateway.Errorf(gateway.CodeInvalidArgument, "stdin of %d bytes exceeds %d, the most agentOS delivers reliably; write larger input to a file first", len(req.Stdin), MaxStdinWrite).
			WithDetail("field", "stdin").WithDetail("limit", MaxStdinWrite)
	}
	lv, unhold, err := s.lookupAt(ctx, tenant.ID, vmID, req.Cwd)
	if err != nil {
		return nil, err
	}
	return &PreparedExec{s: s, tenant: tenant, lv: lv, req: req, timeout: timeout, unhold: unhold}, nil
}

// Release lets the VM go without running the exec; after Run, it does
// nothing.
func (p *PreparedExec) Release() { p.release.Do(p.unhold) }

// Background runs the prepared command to completion on a goroutine the
// service owns (Close waits for it, after disposing the VM that would keep
// it running) and hands done its result; the context is the service's, not
// a request's. It reports false, releasing the VM, once Close has begun.
func (p *PreparedExec) Background(done func(*ExecResult, error)) bool {
	ok := p.s.goTracked(func() {
		done(p.Run(context.Background(), nil))
	})
	if !ok {
		p.Release()
	}
	return ok
}

// Run runs the prepared command to completion and releases the VM.
// onOutput, when set, receives the output as it arrives (for streamed
// exec) and must not block. A command killed at its deadline returns a
// deadline_exceeded error together with the output it had produced.
func (p *PreparedExec) Run(ctx context.Context, onOutput func(Chunk)) (*ExecResult, error) {
	defer p.Release()
	release, err := p.s.countProcess(p.tenant)
	if err != nil {
		return nil, err
	}
	defer release()
	req := p.req
	maxOut := req.MaxOutputBytes
	if maxOut <= 0 {
		maxOut = DefaultMaxOutputBytes
	}
	opts := agentos.ExecOptions{Cwd: req.Cwd, Env: req.Env, Stdin: req.Stdin, Timeout: p.timeout, MaxOutputBytes: maxOut}
	if onOutput != nil {
		opts.OnOutput = func(o agentos.Output) { onOutput(Chunk{Stream: o.Stream.String(), Data: o.Data, Time: o.Time}) }
	}
	var res *agentos.ExecResult
	err = launching(ctx, func() (err error) {
		if len(req.Argv) > 0 {
			res, err = p.lv.vm.ExecArgv(ctx, req.Argv, opts)
		} else {
			res, err = p.lv.vm.Exec(ctx, req.Command, opts)
		}
		return err
	})
	if err != nil {
		if errors.Is(err, agentos.ErrTimeout) && res != nil {
			// What the command printed before it was killed: a user
			// debugging a hung command needs it (the 504 carries it).
			return execResult(res), launchError(err, "exec")
		}
		return nil, launchError(err, "exec")
	}
	return execResult(res), nil
}

func execResult(res *agentos.ExecResult) *ExecResult {
	return &ExecResult{
		ExitCode: res.ExitCode, Signal: res.Signal, Stdout: res.Stdout, Stderr: res.Stderr,
		StdoutTruncated: res.StdoutTruncated, StderrTruncated: res.StderrTruncated, Duration: res.Duration,
	}
}

// SpawnRequest starts a long-running process.
type SpawnRequest struct {
	Command string
	Argv    []string
	Cwd     string
	Env     map[string]string
}

// Process is a spawned process and its replayable output.
type Process struct {
	pid uint32
	// command is what the caller asked to run, for the process.exit event.
	command string
	ap      *agentos.Process
	out     *streamlog.Log[Chunk]
	done    chan struct{}

	mu   sync.Mutex
	exit *gateway.ExitStatus
	err  error
}

// Output returns the process's output log; its sequence numbers are the
// process's output sequence numbers.
func (p *Process) Output() *streamlog.Log[Chunk] { return p.out }

// Pid returns the guest pid.
func (p *Process) Pid() uint32 { return p.pid }

// Exit returns the exit status once the process ended (nil while it runs),
// or the error that made its end unknowable.
func (p *Process) Exit() (*gateway.ExitStatus, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exit, p.err
}

func (p *Process) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *Process) vmEnded(err error) {
	p.mu.Lock()
	if p.exit == nil && p.err == nil {
		p.err = err
	}
	p.mu.Unlock()
}

// Info describes the process.
func (p *Process) Info() gateway.ProcessInfo {
	ai := p.ap.Info()
	info := gateway.ProcessInfo{Pid: p.pid, Command: ai.Command, Args: ai.Args, Cwd: ai.Cwd, Running: p.running(), StartedAt: ai.StartedAt.UTC()}
	if info.Args == nil {
		info.Args = []string{}
	}
	exit, err := p.Exit()
	info.Exit = exit
	if err != nil {
		info.Error = gateway.ErrorMessage(err)
	}
	if !info.Running && !ai.ExitedAt.IsZero() {
		t := ai.ExitedAt.UTC()
		info.ExitedAt = &t
	}
	return info
}

// Spawn starts a process whose output is kept in a bounded log for
// streaming and resuming.
func (s *Service) Spawn(ctx context.Context, tenant gateway.Tenant, vmID string, req SpawnRequest) (gateway.ProcessInfo, error) {
	lv, unhold, err := s.lookupAt(ctx, tenant.ID, vmID, req.Cwd)
	if err != nil {
		return gateway.ProcessInfo{}, err
	}
	defer unhold()
	release, err := s.countProcess(tenant)
	if err != nil {
		return gateway.ProcessInfo{}, err
	}
	out := streamlog.New[Chunk](s.cfg.OutputBufferBytes)
	opts := agentos.SpawnOptions{Cwd: req.Cwd, Env: req.Env, OnOutput: func(o agentos.Output) {
		out.Append(o.Seq, len(o.Data), Chunk{Stream: o.Stream.String(), Data: o.Data, Time: o.Time})
	}}
	var ap *agentos.Process
	err = launching(ctx, func() (err error) {
		if len(req.Argv) > 0 {
			ap, err = lv.vm.Spawn(ctx, req.Argv, opts)
		} else {
			ap, err = lv.vm.SpawnCommand(ctx, req.Command, opts)
		}
		return err
	})
	if err != nil {
		release()
		return gateway.ProcessInfo{}, launchError(err, "spawn")
	}
	command := req.Command
	if len(req.Argv) > 0 {
		command = strings.Join(req.Argv, " ")
	}
	p := &Process{pid: ap.Pid(), command: command, ap: ap, out: out, done: make(chan struct{})}
	lv.mu.Lock()
	lv.procs[p.pid] = p
	lv.mu.Unlock()
	if !s.goTracked(func() { s.awaitExit(lv, p, release) }) {
		// Close began while the process started: it disposes the VM and
		// the process with it, and no watcher may start after its Wait.
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killTimeout)
		_ = ap.Kill(kctx)
		cancel()
		release()
		return gateway.ProcessInfo{}, errShuttingDown()
	}
	return p.Info(), nil
}

// awaitExit records a process's end and closes its log.
func (s *Service) awaitExit(lv *liveVM, p *Process, release func()) {
	defer release()
	st, err := p.ap.Wait(context.Background())
	p.mu.Lock()
	if err != nil {
		if p.err == nil {
			p.err = EngineError(err, "process")
		}
	} else {
		p.exit = &st
	}
	exit, perr := p.exit, p.err
	p.mu.Unlock()
	close(p.done)
	if exit != nil {
		now := s.cfg.Now().UTC()
		lv.events.Append(0, 64, gateway.VMEvent{Type: gateway.VMEventProcessExit, Time: now, Pid: p.pid, Exit: exit})
		s.tell(gateway.NewEvent(gateway.EventProcessExit, lv.tenantID, lv.id, now,
			gateway.ProcessExitData{VMID: lv.id, Pid: p.pid, Command: p.command, ExitCode: exit.ExitCode, Signal: exit.Signal}))
	}
	p.out.Close(perr)
	// Exited processes stay listed, with their output for resuming, but only
	// the most recent ones: a long-lived VM must not grow without bound.
	lv.mu.Lock()
	lv.exited = append(lv.exited, p.pid)
	for len(lv.exited) > maxExitedProcesses {
		delete(lv.procs, lv.exited[0])
		lv.exited = lv.exited[1:]
	}
	lv.mu.Unlock()
}

// maxExitedProcesses bounds how many exited processes a VM keeps listed.
const maxExitedProcesses = 128

// Processes lists a VM's processes, exited ones included, by pid.
func (s *Service) Processes(ctx context.Context, tenantID, vmID string) ([]gateway.ProcessInfo, error) {
	lv, err := s.lookup(ctx, tenantID, vmID)
	if err != nil {
		return nil, err
	}
	lv.mu.Lock()
	ps := make([]*Process, 0, len(lv.procs))
	for _, p := range lv.procs {
		ps = append(ps, p)
	}
	lv.mu.Unlock()
	out := make([]gateway.ProcessInfo, len(ps))
	for i, p := range ps {
		out[i] = p.Info()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pid < out[j].Pid })
	return out, nil
}

// Process returns a VM's process by pid, with a release for the caller's
// hold on the VM (streams keep a VM from going idle).
func (s *Service) Process(ctx context.Context, tenantID, vmID string, pid uint32) (*Process, func(), error) {
	lv, err := s.lookup(ctx, tenantID, vmID)
	if err != nil {
		return nil, nil, err
	}
	lv.mu.Lock()
	p := lv.procs[pid]
	lv.mu.Unlock()
	if p == nil {
		return nil, nil, gateway.Errorf(gateway.CodeNotFound, "no process %d in VM %s", pid, vmID)
	}
	return p, lv.hold(s.cfg.Now()), nil
}

// MaxStdinWrite is the most bytes one write to a process's stdin (or a
// shell's input) carries: larger writes hang the engine, so they are
// refused, and callers bound what they accept in one piece by it.
const MaxStdinWrite = agentos.MaxStdinWrite

// WriteStdin sends bytes to a process's stdin.
func (p *Process) WriteStdin(ctx context.Context, data []byte) error {
	if !p.running() {
		return gateway.Errorf(gateway.CodeConflict, "process %d has exited", p.pid).WithDetail("state", "exited")
	}
	_, err := p.ap.Write(ctx, data)
	return EngineError(err, "write stdin")
}

// CloseStdin closes a process's stdin.
func (p *Process) CloseStdin(ctx context.Context) error {
	if !p.running() {
		return gateway.Errorf(gateway.CodeConflict, "process %d has exited", p.pid).WithDetail("state", "exited")
	}
	return EngineError(p.ap.CloseStdin(ctx), "close stdin")
}

// Signal sends a signal by name.
func (p *Process) Signal(ctx context.Context, sig string) error {
	if !agentos.ValidSignal(sig) {
		return gateway.Errorf(gateway.CodeInvalidArgument, "unknown signal %q", sig).WithDetail("field", "signal")
	}
	if !p.running() {
		return gateway.Errorf(gateway.CodeConflict, "process %d has exited", p.pid).WithDetail("state", "exited")
	}
	return EngineError(p.ap.Signal(ctx, sig), "signal")
}

// Wait waits for the process to end, at most timeout (0: until ctx ends);
// past it the error is deadline_exceeded.
func (p *Process) Wait(ctx context.Context, timeout time.Duration) (*gateway.ExitStatus, error) {
	var t <-chan time.Time
	if timeout > 0 {
		timer := time.NewTimer(timeout)
		defer timer.Stop()
		t = timer.C
	}
	select {
	case <-p.done:
	case <-t:
		return nil, gateway.Errorf(gateway.CodeDeadlineExceeded, "process %d still running after %s", p.pid, timeout)
	case <-ctx.Done():
		return nil, gateway.Wrap(gateway.CodeDeadlineExceeded, ctx.Err(), "wait for process %d", p.pid)
	}
	exit, err := p.Exit()
	if err != nil {
		return nil, err
	}
	return exit, nil
}

// Done is closed when the process ended.
func (p *Process) Done() <-chan struct{} { return p.done }
