package agentos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

// Stream names an output stream of a process.
type Stream uint8

// Output streams. PTY output of a shell arrives as Stdout.
const (
	Stdout Stream = iota + 1
	Stderr
)

func (s Stream) String() string {
	switch s {
	case Stdout:
		return "stdout"
	case Stderr:
		return "stderr"
	}
	return "unknown"
}

// Output is one chunk of process output. Seq numbers a process's chunks from
// 1 without gaps; Time is when the client received the chunk (the legacy
// process event carries neither).
type Output struct {
	Seq    uint64
	Stream Stream
	Data   []byte
	Time   time.Time
}

// ProcessInfo is a row of a VM's process table.
type ProcessInfo struct {
	ProcessID string
	Pid       uint32 // guest pid
	Command   string
	Args      []string
	Cwd       string
	Running   bool
	Exit      *gateway.ExitStatus
	StartedAt time.Time
	ExitedAt  time.Time
	// Err is set when the process's fate is unknown: its VM was disposed or
	// its sidecar died while it ran.
	Err error
}

// Process is a process inside a VM.
type Process struct {
	vm        *VM
	id        string
	command   string
	args      []string
	cwd       string
	startedAt time.Time
	onOutput  func(Output)
	bufMax    int
	drain     time.Duration

	mu         sync.Mutex
	pid        uint32
	seq        uint64
	queue      []Output
	queued     int
	overflowed bool
	wake       chan struct{}
	exitCode   int
	exitSeen   bool
	drainTimer *time.Timer
	finished   bool
	err        error
	exitedAt   time.Time
	lastSignal string
	done       chan struct{}
	tty        bool
}

// SpawnOptions configure a process.
type SpawnOptions struct {
	// Cwd defaults to /workspace.
	Cwd string
	// Env is added to the VM's environment.
	Env map[string]string
	// CloseStdin closes stdin right after start, for programs that read it
	// to EOF. Streaming processes leave it open for Write.
	CloseStdin bool
	// OnOutput, when set, receives every chunk in order on the sidecar's
	// event lane instead of the process buffering it for Next. It must not
	// block.
	OnOutput func(Output)
	// OutputBuffer bounds what Next may fall behind by (default from
	// Options.ProcessOutputBuffer); past it, Next returns ErrOutputOverflow.
	OutputBuffer int
	// TTY runs the process on a pseudo-terminal.
	TTY bool
}

// Spawn starts argv[0] with arguments argv[1:].
func (vm *VM) Spawn(ctx context.Context, argv []string, o SpawnOptions) (*Process, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, fmt.Errorf("%w: empty command", ErrInvalidArgument)
	}
	cwd := o.Cwd
	if cwd == "" {
		cwd = DefaultCwd
	}
	bufMax := o.OutputBuffer
	if bufMax <= 0 {
		bufMax = vm.s.opts.ProcessOutputBuffer
	}
	p := &Process{
		vm:        vm,
		id:        vm.newProcessID(),
		command:   argv[0],
		args:      slices.Clone(argv[1:]),
		cwd:       cwd,
		startedAt: time.Now(),
		onOutput:  o.OnOutput,
		bufMax:    bufMax,
		drain:     vm.s.opts.ExitDrain,
		wake:      make(chan struct{}, 1),
		done:      make(chan struct{}),
		tty:       o.TTY,
	}
	args := p.args
	if IsPythonCommand(p.command) {
		// The process keeps the arguments it was given; the engine gets
		// them in the form it runs (see pythonArgs).
		var err error
		if args, err = pythonArgs(argv); err != nil {
			return nil, err
		}
	}
	env := protocol.MapOf(vm.processEnv(o.Env))
	if !o.CloseStdin {
		env.Set("AGENTOS_KEEP_STDIN_OPEN", "1")
	}
	if o.TTY {
		env.Set("AGENTOS_EXEC_TTY", "1")
	}
	// Registered before the request is sent: with events and responses on
	// different lanes, output can arrive before ProcessStartedResponse.
	if err := vm.addProcess(p); err != nil {
		return nil, err
	}
	req := protocol.ExecuteRequest{ProcessID: p.id, Command: &p.command, Args: args, Env: env, Cwd: &cwd}
	resp, err := vm.call(context.WithoutCancel(ctx), req)
	// Measured on 0.2.21: two launches on one VM that meet are refused
	// (ERR_AGENTOS_VM_EXECUTION_CONFLICT). The refused one never ran, so it
	// is sent again, with a short backoff, for at most launchRetryWindow.
	for delay, deadline := 5*time.Millisecond, time.Now().Add(launchRetryWindow); isLaunchConflict(err) && time.Now().Before(deadline); delay = min(2*delay, 100*time.Millisecond) {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			vm.removeProcess(p.id)
			return nil, ctx.Err()
		}
		resp, err = vm.call(context.WithoutCancel(ctx), req)
	}
	if err != nil {
		vm.removeProcess(p.id)
		var rej *RejectedError
		if errors.As(err, &rej) {
			if isCommandNotFound(rej) {
				err = &CommandNotFoundError{Name: argv[0], Err: err}
			}
			return nil, &LaunchError{Command: strings.Join(argv, " "), Err: err}
		}
		return nil, err
	}
	started, ok := resp.(protocol.ProcessStartedResponse)
	if !ok {
		vm.removeProcess(p.id)
		return nil, unexpected("ExecuteRequest", resp)
	}
	p.mu.Lock()
	if started.Pid != nil {
		p.pid = *started.Pid
	}
	p.mu.Unlock()
	if o.CloseStdin {
		// A process that already exited has no stdin to close; the sidecar
		// may say so before its exit event arrives, so a rejection here is
		// not an error (the process's own outcome tells what happened).
		if err := p.CloseStdin(ctx); err != nil && !isRejected(err) {
			p.killDetached()
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		// The caller gave up while the launch was in flight: do not leave an
		// orphan running.
		p.killDetached()
		return nil, err
	}
	return p, nil
}

// launchRetryWindow bounds how long a launch refused for a concurrent one is
// retried.
const launchRetryWindow = 10 * time.Second

// ErrCommandNotFound reports a launch refused because the program named by
// argv[0] does not exist in the guest; errors.Is finds it in a LaunchError.
var ErrCommandNotFound = errors.New("agentos: command not found")

// CommandNotFoundError is the cause of a LaunchError whose program does not
// exist in the guest. It matches ErrCommandNotFound.
type CommandNotFoundError struct {
	Name string // argv[0]
	Err  error  // the engine's rejection
}

func (e *CommandNotFoundError) Error() string {
	return fmt.Sprintf("agentos: command not found: %s", e.Name)
}

func (e *CommandNotFoundError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrCommandNotFound) hold.
func (e *CommandNotFoundError) Is(target error) bool { return target == ErrCommandNotFound }

// isCommandNotFound reports the engine's refusal of a launch whose program
// does not exist. The rejection carries no errno for it, only this wording
// (measured on 0.2.21: "command not found on native sidecar path: foo").
func isCommandNotFound(rej *RejectedError) bool {
	return rej.EngineCode == EngineCommandNotFound
}

// isLaunchConflict reports the engine's refusal of a launch that met another.
func isLaunchConflict(err error) bool {
	return HasEngineCode(err, EngineExecutionConflict)
}

// IsLaunchConflict reports whether err is a launch the engine kept refusing
// because other processes of the VM were starting at the same moment.
func IsLaunchConflict(err error) bool { return isLaunchConflict(err) }

// SpawnCommand starts a command line: directly when it is a simple command
// or a shell's `-c` invocation, through `sh -c` otherwise (see commandArgv).
func (vm *VM) SpawnCommand(ctx context.Context, command string, o SpawnOptions) (*Process, error) {
	argv := commandArgv(command)
	if argv == nil {
		return nil, fmt.Errorf("%w: empty command", ErrInvalidArgument)
	}
	return vm.Spawn(ctx, argv, o)
}

func (vm *VM) addProcess(p *Process) error {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	switch vm.state {
	case VMLost, VMDisposed, VMDisposing:
		if vm.stateErr != nil {
			return vm.stateErr
		}
		return fmt.Errorf("%w: %s", ErrVMDisposed, vm.id)
	}
	vm.procs[p.id] = p
	vm.guestRan()
	return nil
}

func (vm *VM) removeProcess(id string) {
	vm.mu.Lock()
	delete(vm.procs, id)
	vm.mu.Unlock()
}

func (vm *VM) process(id string) *Process {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.procs[id]
}

// Process returns a process of the VM's table by id.
func (vm *VM) Process(id string) (*Process, bool) {
	p := vm.process(id)
	return p, p != nil
}

// Processes returns the VM's process table, running and exited, oldest first.
func (vm *VM) Processes() []ProcessInfo {
	vm.mu.Lock()
	ps := slices.Collect(maps.Values(vm.procs))
	vm.mu.Unlock()
	out := make([]ProcessInfo, len(ps))
	for i, p := range ps {
		out[i] = p.Info()
	}
	slices.SortFunc(out, func(a, b ProcessInfo) int { return a.StartedAt.Compare(b.StartedAt) })
	return out
}

// noteExited records an exited process and evicts the oldest exited ones
// past maxExitedProcesses, so a long-lived VM's table stays bounded.
func (vm *VM) noteExited(id string) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	vm.exitedIDs = append(vm.exitedIDs, id)
	for len(vm.exitedIDs) > maxExitedProcesses {
		delete(vm.procs, vm.exitedIDs[0])
		vm.exitedIDs = vm.exitedIDs[1:]
	}
}

// ID returns the process id (the host-chosen protocol id, e.g. "proc-1000000").
func (p *Process) ID() string { return p.id }

// Pid returns the guest pid.
func (p *Process) Pid() uint32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid
}

// Done is closed when the process's fate is settled: it exited and its
// output was delivered, or its VM or sidecar went away.
func (p *Process) Done() <-chan struct{} { return p.done }

// Info returns the process's row of the process table.
func (p *Process) Info() ProcessInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	info := ProcessInfo{
		ProcessID: p.id, Pid: p.pid, Command: p.command, Args: slices.Clone(p.args), Cwd: p.cwd,
		Running: !p.finished, StartedAt: p.startedAt, ExitedAt: p.exitedAt, Err: p.err,
	}
	if p.finished && p.err == nil {
		st := p.statusLocked()
		info.Exit = &st
	}
	return info
}

func (p *Process) statusLocked() gateway.ExitStatus {
	st := gateway.ExitStatus{ExitCode: p.exitCode}
	if p.lastSignal != "" && p.exitCode == 128+signalNumber(p.lastSignal) {
		st.Signal = gateway.Signal(p.lastSignal)
	}
	return st
}

func (p *Process) exited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitSeen || p.finished
}

// output is called on the event lane.
func (p *Process) output(stream Stream, chunk []byte) {
	p.mu.Lock()
	if p.finished {
		p.mu.Unlock()
		return
	}
	p.seq++
	o := Output{Seq: p.seq, Stream: stream, Data: chunk, Time: time.Now()}
	if p.exitSeen && p.drainTimer != nil {
		// Trailing output: give the rest of it the same window.
		p.drainTimer.Reset(p.drain)
	}
	if p.onOutput != nil {
		cb := p.onOutput
		p.mu.Unlock()
		cb(o)
		return
	}
	if !p.overflowed {
		if p.queued+len(chunk) > p.bufMax {
			p.overflowed = true
		} else {
			p.queue = append(p.queue, o)
			p.queued += len(chunk)
		}
	}
	p.mu.Unlock()
	p.notify()
}

func (p *Process) notify() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// exit is called on the event lane when ProcessExitedEvent arrives. The
// process's output came before it on the same lane, so it is settled at once,
// unless Options.ExitDrain asks for a quiet window for output that follows.
func (p *Process) exit(code int) {
	p.mu.Lock()
	if p.finished || p.exitSeen {
		p.mu.Unlock()
		return
	}
	p.exitSeen = true
	p.exitCode = code
	p.exitedAt = time.Now()
	if p.drain > 0 {
		p.drainTimer = time.AfterFunc(p.drain, p.settle)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	p.settle()
}

func (p *Process) settle() {
	p.mu.Lock()
	if p.finished {
		p.mu.Unlock()
		return
	}
	p.finished = true
	st := p.statusLocked()
	p.mu.Unlock()
	// The exit event goes out before waiters wake, so that whatever a waiter
	// does next (dispose the VM, say) comes after it in the VM's events.
	p.vm.noteExited(p.id)
	p.vm.events.publish(Event{Type: "process_exit", Time: time.Now(), Process: &ProcessExit{ProcessID: p.id, ExitStatus: st}})
	close(p.done)
	p.notify()
}

// fail settles a process whose exit was not observed: its VM or sidecar went
// away. Waiters get err, never an invented exit code.
func (p *Process) fail(err error) {
	p.mu.Lock()
	if p.finished {
		p.mu.Unlock()
		return
	}
	if p.drainTimer != nil {
		p.drainTimer.Stop()
	}
	if p.exitSeen {
		// The exit was confirmed; only the drain window is cut short.
		p.finished = true
		close(p.done)
		p.mu.Unlock()
		p.notify()
		return
	}
	p.finished = true
	p.err = err
	p.exitedAt = time.Now()
	close(p.done)
	p.mu.Unlock()
	p.notify()
}

// Wait waits for the process to exit. It returns the exit status, or an
// error when the exit could not be observed (VM disposed, sidecar died).
func (p *Process) Wait(ctx context.Context) (gateway.ExitStatus, error) {
	select {
	case <-p.done:
	case <-ctx.Done():
		return gateway.ExitStatus{}, ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return gateway.ExitStatus{}, p.err
	}
	return p.statusLocked(), nil
}

// Next returns the next chunk of buffered output. After the last chunk it
// returns io.EOF once the process exited, the process's error if it was lost,
// or ErrOutputOverflow if the consumer fell more than the buffer behind.
func (p *Process) Next(ctx context.Context) (Output, error) {
	for {
		p.mu.Lock()
		if len(p.queue) > 0 {
			o := p.queue[0]
			p.queue[0] = Output{}
			p.queue = p.queue[1:]
			p.queued -= len(o.Data)
			p.mu.Unlock()
			return o, nil
		}
		overflowed, finished, err := p.overflowed, p.finished, p.err
		p.mu.Unlock()
		switch {
		case overflowed:
			return Output{}, ErrOutputOverflow
		case finished && err != nil:
			return Output{}, err
		case finished:
			return Output{}, io.EOF
		}
		select {
		case <-p.wake:
		case <-ctx.Done():
			return Output{}, ctx.Err()
		}
	}
}

// MaxStdinWrite is the largest stdin write the client sends in one call.
// Measured on 0.2.21 (with the official SDK too): a process given more than
// its 64 KiB pipe holds before it reads never sees the end of its input, and
// a second write to a process blocked reading stdin can stall for seconds or
// for ever. Larger writes are refused rather than left to hang the VM.
const MaxStdinWrite = 64 << 10

// Write sends data to the process's stdin in one request of at most
// MaxStdinWrite bytes.
func (p *Process) Write(ctx context.Context, data []byte) (int, error) {
	if len(data) > MaxStdinWrite {
		return 0, fmt.Errorf("%w: a stdin write of %d bytes exceeds %d, the most agentOS delivers reliably", ErrInvalidArgument, len(data), MaxStdinWrite)
	}
	if len(data) == 0 {
		return 0, nil
	}
	resp, err := p.vm.call(ctx, protocol.WriteStdinRequest{ProcessID: p.id, Chunk: data})
	if err != nil {
		return 0, fmt.Errorf("agentos: write stdin of %s: %w", p.id, err)
	}
	w, ok := resp.(protocol.StdinWrittenResponse)
	if !ok {
		return 0, unexpected("WriteStdinRequest", resp)
	}
	if n := int(min(w.AcceptedBytes, uint64(len(data)))); n < len(data) {
		return n, fmt.Errorf("agentos: write stdin of %s: %w", p.id, io.ErrShortWrite)
	}
	return len(data), nil
}

// CloseStdin closes the process's stdin.
func (p *Process) CloseStdin(ctx context.Context) error {
	resp, err := p.vm.call(ctx, protocol.CloseStdinRequest{ProcessID: p.id})
	if err != nil {
		return fmt.Errorf("agentos: close stdin of %s: %w", p.id, err)
	}
	if _, ok := resp.(protocol.StdinClosedResponse); !ok {
		return unexpected("CloseStdinRequest", resp)
	}
	return nil
}

// Signal sends a signal by name ("SIGTERM", "SIGKILL", "SIGINT", ...) to the
// process only.
func (p *Process) Signal(ctx context.Context, sig string) error {
	sig, err := normalizeSignal(sig)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.lastSignal = sig
	p.mu.Unlock()
	return p.vm.signal(ctx, p.id, sig)
}

func (vm *VM) signal(ctx context.Context, processID, sig string) error {
	resp, err := vm.call(ctx, protocol.KillProcessRequest{ProcessID: processID, Signal: sig})
	if err != nil {
		return fmt.Errorf("agentos: signal %s to %s: %w", sig, processID, err)
	}
	if _, ok := resp.(protocol.ProcessKilledResponse); !ok {
		return unexpected("KillProcessRequest", resp)
	}
	return nil
}

// Kill sends SIGKILL to the process. On the pinned sidecar the guest kernel
// takes the process's children down with it (measured: `sh -c "yes | head"`
// leaves nothing behind); terminate checks that, because a process tree
// that survives is the one failure a timeout must not hide.
func (p *Process) Kill(ctx context.Context) error {
	p.mu.Lock()
	p.lastSignal = "SIGKILL"
	p.mu.Unlock()
	err := p.vm.signal(ctx, p.id, "SIGKILL")
	if isRejected(err) {
		// The process exited on its own meanwhile (its exit event may still
		// be on its way); waiting for it confirms either way.
		return nil
	}
	return err
}

func isRejected(err error) bool {
	var rej *RejectedError
	return errors.As(err, &rej)
}

// GuestProcess is a row of the guest kernel's process table.
type GuestProcess struct {
	ProcessID string `json:"processId"`
	Pid       uint32 `json:"pid"`
	Ppid      uint32 `json:"ppid"`
	Pgid      uint32 `json:"pgid"`
	Command   string `json:"command"`
	Running   bool   `json:"running"`
	ExitCode  *int32 `json:"exitCode,omitempty"`
}

// GuestProcesses returns the guest kernel's process table, children included
// (e.g. "proc-1000000/child-1" for a pipeline stage).
func (vm *VM) GuestProcesses(ctx context.Context) ([]GuestProcess, error) {
	resp, err := vm.call(ctx, protocol.GetProcessSnapshotRequest{})
	if err != nil {
		return nil, fmt.Errorf("agentos: process snapshot: %w", err)
	}
	snap, ok := resp.(protocol.ProcessSnapshotResponse)
	if !ok {
		return nil, unexpected("GetProcessSnapshotRequest", resp)
	}
	out := make([]GuestProcess, len(snap.Processes))
	for i, e := range snap.Processes {
		out[i] = GuestProcess{ProcessID: e.ProcessID, Pid: e.Pid, Ppid: e.Ppid, Pgid: e.Pgid, Command: e.Command,
			Running: e.Status != protocol.ProcessSnapshotStatusExited, ExitCode: e.ExitCode}
	}
	return out, nil
}

// survivors returns the still-running processes started by p.
func (p *Process) survivors(ctx context.Context) ([]string, error) {
	procs, err := p.vm.GuestProcesses(ctx)
	if err != nil {
		return nil, err
	}
	var left []string
	for _, g := range procs {
		if g.Running && strings.HasPrefix(g.ProcessID, p.id+"/") {
			left = append(left, g.ProcessID)
		}
	}
	return left, nil
}

// killDetached kills the process tree on behalf of a caller that is gone,
// bounded so that it cannot outlive the VM by much.
func (p *Process) killDetached() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = p.Kill(ctx)
}

// KillTimeout bounds how long a killed process may take to confirm its exit
// before the kill is reported as termination_failed.
var KillTimeout = 30 * time.Second

// terminate kills the process, waits for the sidecar to confirm the exit and
// checks that none of its children survived, all within KillTimeout.
func (p *Process) terminate() error {
	ctx, cancel := context.WithTimeout(context.Background(), KillTimeout)
	defer cancel()
	if err := p.Kill(ctx); err != nil {
		if ctx.Err() != nil {
			return ErrTerminationFailed
		}
		return err
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		return ErrTerminationFailed
	}
	for {
		left, err := p.survivors(ctx)
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("%w: children still running: %v", ErrTerminationFailed, left)
		case err != nil:
			return err
		case len(left) == 0:
			return nil
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

var signalNumbers = map[string]syscall.Signal{
	"SIGHUP": syscall.SIGHUP, "SIGINT": syscall.SIGINT, "SIGQUIT": syscall.SIGQUIT, "SIGKILL": syscall.SIGKILL,
	"SIGUSR1": syscall.SIGUSR1, "SIGUSR2": syscall.SIGUSR2, "SIGPIPE": syscall.SIGPIPE, "SIGALRM": syscall.SIGALRM,
	"SIGTERM": syscall.SIGTERM, "SIGCONT": syscall.SIGCONT, "SIGSTOP": syscall.SIGSTOP, "SIGTSTP": syscall.SIGTSTP,
	"SIGWINCH": syscall.SIGWINCH,
}

func signalNumber(name string) int { return int(signalNumbers[name]) }

// normalizeSignal accepts "TERM", "sigterm" or "SIGTERM" and returns
// "SIGTERM"; unknown names are an ErrInvalidArgument.
func normalizeSignal(sig string) (string, error) {
	s := strings.ToUpper(strings.TrimSpace(sig))
	if !strings.HasPrefix(s, "SIG") {
		s = "SIG" + s
	}
	if _, ok := signalNumbers[s]; !ok {
		return "", fmt.Errorf("%w: unknown signal %q", ErrInvalidArgument, sig)
	}
	return s, nil
}

// ValidSignal reports whether sig names a signal Signal accepts.
func ValidSignal(sig string) bool { _, err := normalizeSignal(sig); return err == nil }
