package agentos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

// Options configure a sidecar process.
type Options struct {
	// Engine locates the binary and software; the zero value means LocateEngine.
	Engine Engine
	// Args are extra command-line arguments, e.g. {"--max-active-vms", "8"}.
	Args []string
	// Env is added to the gateway's own environment for the sidecar.
	Env []string
	// TempDir is where the sidecar's private temporary directory is made
	// (default os.TempDir()). The engine writes per-process caches, sockets
	// and VM shadow trees under TMPDIR and leaves them behind, so each
	// sidecar gets a directory of its own, removed once it has been reaped.
	TempDir string
	// MaxFrameBytes bounds every inbound frame (default 16 MiB, what the
	// sidecar advertises).
	MaxFrameBytes int
	// SilenceTimeout is how long the sidecar may send nothing at all before it
	// is declared hung and killed (default 30 s; it heartbeats every 10 s).
	// It applies once the sidecar has answered the handshake: until then the
	// process may still be loading, and Start's context bounds the wait.
	SilenceTimeout time.Duration
	// ShutdownGrace is how long Close waits for a clean exit before SIGKILL
	// (default 5 s).
	ShutdownGrace time.Duration
	// ExitDrain is how long a process stays open for output that follows
	// its exit event (default none; a negative value also means none). The
	// sidecar sends a process's output and its exit event on the one events
	// lane, output first: the engine's own Rust client ends an exec at the
	// exit event, and over 500 measured execs on 0.2.21 (pipelines, both
	// streams, 300 KB outputs, two VMs running side by side) never had
	// output after it. A window adds its whole length to every exec.
	ExitDrain time.Duration
	// ProcessOutputBuffer bounds the output a streamed process may hold for a
	// consumer that has not read it yet (default 8 MiB).
	ProcessOutputBuffer int
}

func (o *Options) setDefaults() error {
	if o.Engine == (Engine{}) {
		e, err := LocateEngine()
		if err != nil {
			return err
		}
		o.Engine = e
	} else if err := o.Engine.Check(); err != nil {
		return err
	}
	if o.MaxFrameBytes <= 0 {
		o.MaxFrameBytes = protocol.DefaultMaxFrameBytes
	}
	if o.SilenceTimeout <= 0 {
		o.SilenceTimeout = 30 * time.Second
	}
	if o.ShutdownGrace <= 0 {
		o.ShutdownGrace = 5 * time.Second
	}
	if o.ExitDrain < 0 {
		o.ExitDrain = 0
	}
	if o.ProcessOutputBuffer <= 0 {
		o.ProcessOutputBuffer = 8 << 20
	}
	return nil
}

// The handshake values the official SDK sends; the sidecar accepts them.
const (
	clientName    = "agentos-core-client"
	clientToken   = "agentos-core-client-token"
	bridgeVersion = 1
)

// Sidecar is one agentos-sidecar process and the connection to it. It hosts
// many VMs. Its life is its own: it is never tied to the context of the call
// that started it, and it ends only through Close or a crash.
type Sidecar struct {
	opts   Options
	cmd    *exec.Cmd
	pid    int
	tmpDir string // the sidecar's TMPDIR, removed after it is reaped

	reqW *os.File      // host end of fd 0: requests
	evR  *os.File      // host end of fd 1: events
	ctl  *net.UnixConn // host end of fd 3: responses, sidecar requests, control
	errR *os.File      // host end of fd 2: logs

	reqLane *laneWriter // fd 0
	ctlLane *laneWriter // fd 3

	connectionID string
	sessionID    string
	maxSendBytes int

	nextID       atomic.Int64
	lastActivity atomic.Int64 // unix nanoseconds of the last inbound frame

	mu      sync.Mutex
	pending map[int64]chan response
	vms     map[string]*VM
	// orphans holds events for VM ids not registered yet: READY usually
	// arrives before VmCreatedResponse. Kept only while a create is in flight.
	orphans  map[string][]protocol.EventPayload
	creating int
	closing  bool
	deadErr  error
	dead     chan struct{} // closed once deadErr is set
	tripOnce sync.Once
	tripped  chan struct{}
	answered chan struct{} // closed once the handshake succeeded
	cause    error

	closeErr  error         // how the process ended when Close was called
	exited    chan struct{} // closed once the process was reaped
	exitState *os.ProcessState
	stderr    *stderrLog
	stderrEOF chan struct{}

	wg sync.WaitGroup // every goroutine the sidecar owns

	// life is cancelled when the sidecar dies; work done on its behalf (not
	// on a caller's) derives from it.
	life    context.Context
	endLife context.CancelFunc

	startedAt time.Time
}

type response struct {
	ownership protocol.OwnershipScope
	payload   protocol.ResponsePayload
}

// Start spawns a sidecar and completes the handshake. ctx bounds the spawn
// and handshake only; on failure the child is killed and reaped before Start
// returns, so a later Start begins from a clean slate.
func Start(ctx context.Context, opts Options) (*Sidecar, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	s := &Sidecar{
		opts:      opts,
		pending:   make(map[int64]chan response),
		vms:       make(map[string]*VM),
		orphans:   make(map[string][]protocol.EventPayload),
		dead:      make(chan struct{}),
		tripped:   make(chan struct{}),
		answered:  make(chan struct{}),
		exited:    make(chan struct{}),
		stderr:    newStderrLog(16<<10, 48<<10),
		stderrEOF: make(chan struct{}),
		startedAt: time.Now(),
	}
	s.life, s.endLife = context.WithCancel(context.Background())
	if err := s.spawn(); err != nil {
		s.endLife()
		return nil, err
	}
	if err := s.handshake(ctx); err != nil {
		s.trip(fmt.Errorf("handshake: %w", err))
		s.wait()
		return nil, fmt.Errorf("agentos: sidecar handshake: %w", err)
	}
	close(s.answered)
	return s, nil
}

// spawn starts the process with the split-lane descriptor layout of SPEC §2.1
// and the goroutines that own it.
func (s *Sidecar) spawn() (err error) {
	var closers []*os.File
	defer func() {
		if err != nil {
			for _, f := range closers {
				f.Close()
			}
		}
	}()
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			closers = append(closers, r, w)
		}
		return r, w, err
	}
	stdinR, stdinW, err := pipe()
	if err != nil {
		return fmt.Errorf("agentos: stdin pipe: %w", err)
	}
	stdoutR, stdoutW, err := pipe()
	if err != nil {
		return fmt.Errorf("agentos: stdout pipe: %w", err)
	}
	stderrR, stderrW, err := pipe()
	if err != nil {
		return fmt.Errorf("agentos: stderr pipe: %w", err)
	}
	// fd 3 must be one full-duplex descriptor: a socketpair, not two pipes.
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("agentos: control socketpair: %w", err)
	}
	hostCtl := os.NewFile(uintptr(fds[0]), "sidecar-ctl")
	childCtl := os.NewFile(uintptr(fds[1]), "sidecar-ctl-child")
	closers = append(closers, childCtl)
	fc, err := net.FileConn(hostCtl) // dups the descriptor into the poller
	hostCtl.Close()
	if err != nil {
		return fmt.Errorf("agentos: control socket: %w", err)
	}
	ctl := fc.(*net.UnixConn)
	defer func() {
		if err != nil {
			ctl.Close()
		}
	}()

	tmp, err := makeTempDir(s.opts.TempDir)
	if err != nil {
		return fmt.Errorf("agentos: sidecar temporary directory: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(tmp)
		}
	}()
	s.tmpDir = tmp

	cmd := exec.Command(s.opts.Engine.SidecarBin, s.opts.Args...)
	// The pinned engine (0.2.21) keeps at most 4 warm V8 isolates per
	// process but refills each (snapshot, heap limit) key up to 4 by
	// evicting other keys' workers: two keys refilling at once (an agent's
	// JavaScript and a WebAssembly command it runs) evict each other in a
	// loop that held a Claude turn for 39 s on 2 cores, and past 150 s in
	// CI. One per key (three keys are in use) fits in the 4. The gateway's
	// own environment and Options.Env come later and win.
	cmd.Env = append([]string{warmIsolatesEnv + "=1"}, os.Environ()...)
	cmd.Env = append(append(cmd.Env, "TMPDIR="+tmp), s.opts.Env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdinR, stdoutW, stderrW
	cmd.ExtraFiles = []*os.File{childCtl}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Its own process group, so the sidecar and anything it starts are
		// killed together and a signal to the gateway's group does not reach it.
		Setpgid: true,
		// Belt and braces next to stdin EOF: if the gateway dies even by
		// SIGKILL, the kernel kills the sidecar. Pdeathsig fires when the
		// *thread* that forked exits, so the fork happens on a locked thread
		// that lives until the process is reaped (see runProcess).
		Pdeathsig: syscall.SIGKILL,
	}
	s.cmd = cmd

	started := make(chan error, 1)
	s.wg.Add(1)
	go s.runProcess(started)
	if err := <-started; err != nil {
		return fmt.Errorf("agentos: start sidecar %s: %w", s.opts.Engine.SidecarBin, err)
	}
	s.pid = cmd.Process.Pid
	// The child has its copies; close ours so EOF propagates when it exits.
	for _, f := range []*os.File{stdinR, stdoutW, stderrW, childCtl} {
		f.Close()
	}
	s.ctl = ctl
	s.reqW, s.evR, s.errR = stdinW, stdoutR, stderrR
	s.reqLane, s.ctlLane = newLaneWriter(stdinW), newLaneWriter(ctl)

	s.wg.Add(5)
	go s.readStderr()
	go s.readLane("events", s.evR)
	go s.readLane("control", s.ctl)
	go s.watchdog()
	go s.supervise()
	return nil
}

// runProcess forks on a locked OS thread and keeps that thread until the
// process is reaped, because Pdeathsig follows the forking thread, not the
// process (golang/go#27505). When this goroutine returns the thread exits,
// which is harmless by then.
func (s *Sidecar) runProcess(started chan<- error) {
	defer s.wg.Done()
	runtime.LockOSThread()
	if err := s.cmd.Start(); err != nil {
		started <- err
		close(s.exited)
		return
	}
	started <- nil
	_ = s.cmd.Wait() // the exit status is read from ProcessState
	s.exitState = s.cmd.ProcessState
	close(s.exited)
}

func (s *Sidecar) readStderr() {
	defer s.wg.Done()
	defer close(s.stderrEOF)
	buf := make([]byte, 32<<10)
	for {
		n, err := s.errR.Read(buf)
		s.stderr.Write(buf[:n])
		if err != nil {
			return
		}
	}
}

// trip records the first reason the sidecar must die and wakes the supervisor.
func (s *Sidecar) trip(cause error) {
	s.tripOnce.Do(func() {
		s.cause = cause
		close(s.tripped)
	})
}

// supervise owns the teardown: whatever ends the sidecar first (an exit, a
// broken lane, the watchdog, Close), it kills the whole process group, reaps
// the child, and only then fails every waiter with an error that carries the
// real exit status and the stderr tail.
func (s *Sidecar) supervise() {
	defer s.wg.Done()
	select {
	case <-s.exited:
		s.trip(errors.New("sidecar process exited"))
	case <-s.tripped:
	}
	s.endLife()
	s.killGroup()
	<-s.exited // SIGKILL cannot be ignored, so this is prompt
	// Children that inherited stderr were killed with the group; bound the
	// wait anyway so a stuck descriptor never wedges teardown.
	select {
	case <-s.stderrEOF:
	case <-time.After(time.Second):
	}
	s.reqW.Close()
	s.ctl.Close()
	s.evR.Close()
	s.errR.Close()
	// Nothing of the group is left to write there.
	if err := os.RemoveAll(s.tmpDir); err != nil {
		s.stderr.Write([]byte("\nagentos: remove the sidecar's temporary directory: " + err.Error() + "\n"))
	}

	s.mu.Lock()
	var err error = s.exitError(s.cause)
	if s.closing {
		// Close asked for this; the exit status is reported by Close itself.
		s.closeErr = err
		err = ErrClosed
	}
	s.deadErr = err
	pending := s.pending
	s.pending = nil
	vms := s.vms
	s.vms = map[string]*VM{}
	close(s.dead)
	s.mu.Unlock()

	for _, ch := range pending {
		close(ch) // a closed channel means "look at deadErr"
	}
	for _, vm := range vms {
		vm.lost(err)
	}
}

var errClosing = errors.New("closed by the client")

func (s *Sidecar) exitError(cause error) *SidecarExitedError {
	e := &SidecarExitedError{Pid: s.pid, ExitCode: -1, Cause: cause, StderrTail: s.stderr.Tail(4 << 10)}
	if st := s.exitState; st != nil {
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			e.Signal = ws.Signal().String()
		} else {
			e.ExitCode = st.ExitCode()
		}
	}
	return e
}

func (s *Sidecar) killGroup() {
	// The group id is the leader's pid; Linux does not reuse a pid while a
	// process group of that id still has members, so helpers the sidecar left
	// behind are reached even after the leader was reaped.
	if s.pid > 0 {
		_ = syscall.Kill(-s.pid, syscall.SIGKILL)
	}
}

// warmIsolatesEnv sizes the engine's pool of warm V8 isolates per key.
const warmIsolatesEnv = "AGENTOS_V8_WARM_ISOLATES"

// watchdog declares the sidecar hung after SilenceTimeout without any inbound
// frame; heartbeats arrive every 10 s, so silence means a wedged process. It
// starts counting at the handshake's answer: a process that is slow to load
// on a busy machine is not wedged, and Start's context bounds that wait.
func (s *Sidecar) watchdog() {
	defer s.wg.Done()
	select {
	case <-s.tripped:
		return
	case <-s.answered:
	}
	s.lastActivity.Store(time.Now().UnixNano())
	period := min(time.Second, s.opts.SilenceTimeout/4)
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-s.tripped:
			return
		case now := <-t.C:
			last := time.Unix(0, s.lastActivity.Load())
			if now.Sub(last) > s.opts.SilenceTimeout {
				s.trip(fmt.Errorf("%w (%s)", ErrSidecarSilent, s.opts.SilenceTimeout))
				return
			}
		}
	}
}

// wait blocks until every goroutine of the sidecar has returned.
func (s *Sidecar) wait() { s.wg.Wait() }

// Done is closed when the sidecar is dead and its waiters were failed.
func (s *Sidecar) Done() <-chan struct{} { return s.dead }

// Err returns why the sidecar died (nil while it lives): ErrClosed after
// Close, or a *SidecarExitedError.
func (s *Sidecar) Err() error {
	select {
	case <-s.dead:
		return s.deadErr
	default:
		return nil
	}
}

// Pid returns the sidecar's process id.
func (s *Sidecar) Pid() int { return s.pid }

// StartedAt returns when the process was spawned.
func (s *Sidecar) StartedAt() time.Time { return s.startedAt }

// Stderr returns the kept head and tail of the sidecar's log output.
func (s *Sidecar) Stderr() string { return s.stderr.String() }

// Close shuts the sidecar down the way the official SDK does: a
// ShutdownControl frame, EOF on its request lanes, up to ShutdownGrace (or
// ctx) for a clean exit, then SIGKILL to the whole group. It waits for every
// goroutine the sidecar owns. VMs still open are reported lost with ErrClosed.
func (s *Sidecar) Close(ctx context.Context) error {
	s.mu.Lock()
	already := s.closing
	s.closing = true
	s.mu.Unlock()
	if !already {
		select {
		case <-s.tripped:
		default:
			s.shutdownGracefully(ctx)
			s.trip(errClosing)
		}
	}
	s.wait()
	if err := s.Err(); !errors.Is(err, ErrClosed) {
		return err // it had died before Close was called
	}
	s.mu.Lock()
	e, _ := s.closeErr.(*SidecarExitedError)
	s.mu.Unlock()
	if e != nil && e.Signal != "" && errors.Is(e.Cause, errClosing) {
		return fmt.Errorf("agentos: sidecar ignored the shutdown request and was killed: %w", e)
	}
	return nil
}

// shutdownGracefully asks the sidecar to exit and waits for it, for at most
// ShutdownGrace. The lanes stay held afterwards so nothing else is written.
func (s *Sidecar) shutdownGracefully(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.ShutdownGrace)
	defer cancel()
	_ = s.send(ctx, s.ctlLane, protocol.ControlFrame{
		Schema:  protocol.Schema,
		Payload: protocol.ShutdownControl{Reason: "native sidecar disposed"},
	})
	// EOF on fd 0 and on the write side of fd 3 also tells it to exit.
	if s.holdLane(ctx, s.reqLane) {
		s.reqW.Close()
	}
	if s.holdLane(ctx, s.ctlLane) {
		_ = s.ctl.CloseWrite()
	}
	select {
	case <-s.exited:
	case <-ctx.Done():
	}
}

func (s *Sidecar) holdLane(ctx context.Context, l *laneWriter) bool {
	select {
	case l.sem <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	case <-s.dead:
		return false
	}
}

// MemoryRSS returns the sidecar's resident set size in bytes, read from
// /proc; 0 when it cannot be read.
func (s *Sidecar) MemoryRSS() int64 { return readRSS(s.pid) }
