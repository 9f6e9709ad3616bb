// Package lineshell is an interactive shell whose line editing happens in
// the gateway: it keeps the line being typed (with history, arrow keys,
// Ctrl-C and Ctrl-D), and runs each finished line in the VM as a process of
// its own, carrying the working directory and the exported variables from
// one line to the next.
//
// Why not a shell process at its prompt: on the pinned engine (agentOS
// 0.2.21) a guest process waiting on its stdin parks a read that the sidecar
// re-examines in 10 s slices, and every other VM of that sidecar waits for
// the slice to end: an idle shell at its prompt stalled another tenant's
// `echo hi` for 40 to 70 s (docs/known-limits.md). Here nothing waits on
// stdin while the prompt is idle: between lines no guest process runs at
// all, and a line's own process has an empty stdin (as if from /dev/null),
// so no line waits on it either. (The official SDK's shell works the same
// way, on the host.) Keys typed while a line runs are typed ahead: they
// reach the prompt once the line is done, except Ctrl-C, which interrupts
// the line. A program that needs input while it runs is a process (the
// processes API), not a line.
//
// What a line's process sees: no terminal (the engine's pseudo-terminal
// repeats the output of a shell's children, measured on 0.2.21), the shell's
// working directory and exported variables, COLUMNS and LINES. What does not
// carry from line to line: shell variables that are not exported, functions,
// aliases and options, as after a subshell.
package lineshell

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// Prompt is what the shell shows when it waits for a line.
const Prompt = "$ "

// maxLineBytes bounds a typed line; keys past it ring the bell.
const maxLineBytes = 64 << 10

// callTimeout bounds one engine call the shell makes on its own (a line's
// kill, the state file's read): the engine can hold a call for seconds when
// its sidecar is busy or stalled.
const callTimeout = 45 * time.Second

// removeTimeout bounds the removal of the state file at the shell's end,
// which Wait waits for: a shell's end is not held up for long by a VM that
// is going away or a stalled engine.
const removeTimeout = 5 * time.Second

// VM is what the shell needs of the VM it runs lines in.
type VM interface {
	// Spawn starts a line's process with its stdin closed, so that it
	// never waits on input; its output, stdout and stderr alike, goes to
	// o.OnOutput.
	Spawn(ctx context.Context, argv []string, o SpawnOptions) (Process, error)
	ReadFile(ctx context.Context, path string) ([]byte, error)
	Remove(ctx context.Context, path string, recursive bool) error
}

// SpawnOptions start a line's process.
type SpawnOptions struct {
	Cwd string
	Env map[string]string
	// OnOutput receives the process's output in order; it must not block.
	OnOutput func(data []byte)
}

// Process is a line's running process.
type Process interface {
	// Done is closed once the process has exited.
	Done() <-chan struct{}
	Kill(ctx context.Context) error
	Wait(ctx context.Context) (gateway.ExitStatus, error)
}

// Output is what the terminal shows, in order: Seq counts from 1 over the
// shell's life.
type Output struct {
	Seq  uint64
	Data []byte
	Time time.Time
}

// Options configure a shell.
type Options struct {
	// ID names the shell; its state file in the VM is named after it.
	ID string
	// Shell runs each line, a shell the VM has (the caller checked it).
	Shell string
	// Cwd is where the first line runs.
	Cwd        string
	Env        map[string]string
	Cols, Rows uint16
	// OnOutput receives everything the terminal shows, in order: the
	// prompt, the echo of keys, the lines' output. It is called with the
	// shell's lock held and must not block.
	OnOutput func(Output)
	// Direct, when set, returns the argv of a line to launch as a process
	// of its own instead of in the shell, for programs the engine cannot
	// run under a guest shell (its Python). Such a line is one simple
	// command, which changes nothing a next line sees but its status; its
	// process gets the shell's working directory and exported variables,
	// though the VM's variables the shell unset come back for it.
	Direct func(line string) ([]string, bool)
}

// Shell is a running line shell. Its methods are safe for concurrent use.
type Shell struct {
	vm      VM
	shell   string
	state   string // the state file's path in the VM
	onOut   func(Output)
	direct  func(line string) ([]string, bool)
	life    context.Context
	endLife context.CancelFunc
	done    chan struct{}
	wg      sync.WaitGroup

	mu     sync.Mutex
	ed     *editor
	seq    uint64
	lastNL bool // the terminal's last byte ended a line
	cwd    string
	env    map[string]string
	unset  []string // variables of the VM's environment the shell unset
	status int      // the last line's exit status
	lines  int      // lines run so far
	cols   uint16
	rows   uint16
	// While a line runs: its process (nil until it started), the keys
	// typed ahead of it, and whether Ctrl-C asked to interrupt it.
	busy      bool
	typeahead []byte
	proc      Process
	interrupt bool
	kick      chan struct{}
	ended     bool
	exit      gateway.ExitStatus
	err       error
}

// Start starts a shell: it shows its prompt at once, and runs no process
// until a line is entered.
func Start(vm VM, o Options) (*Shell, error) {
	if o.Shell == "" || o.Cwd == "" || o.ID == "" || strings.ContainsAny(o.ID, "/\x00") {
		return nil, errors.New("lineshell: a shell needs a shell, a cwd and an id that can name a file")
	}
	shell, cwd := o.Shell, o.Cwd
	env := map[string]string{"TERM": "dumb"}
	for k, v := range o.Env {
		env[k] = v
	}
	life, end := context.WithCancel(context.Background())
	s := &Shell{
		vm: vm, shell: shell, state: "/tmp/.agentos-shell-" + o.ID, onOut: o.OnOutput, direct: o.Direct,
		life: life, endLife: end, done: make(chan struct{}),
		ed: newEditor(Prompt, maxLineBytes), lastNL: true, cwd: cwd, env: env,
		cols: o.Cols, rows: o.Rows, kick: make(chan struct{}, 1),
	}
	s.mu.Lock()
	s.emitLocked(s.ed.Prompt())
	s.mu.Unlock()
	return s, nil
}

// Done is closed when the shell has ended.
func (s *Shell) Done() <-chan struct{} { return s.done }

// Wait waits for the shell's end and returns its exit status: the status
// of `exit N`, or of the last line at Ctrl-D, or SIGKILL after Kill.
func (s *Shell) Wait(ctx context.Context) (gateway.ExitStatus, error) {
	select {
	case <-s.done:
	case <-ctx.Done():
		return gateway.ExitStatus{}, ctx.Err()
	}
	// The shell's goroutines end soon after: a running line is killed,
	// and the state file's removal is bounded by removeTimeout.
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exit, s.err
}

// ErrEnded is returned for input to a shell that has ended.
var ErrEnded = errors.New("lineshell: the shell has ended")

// Write types keys at the shell. It never waits for the engine. Keys typed
// while a line runs (in the write whose Enter started it, or later) wait
// for it and are then typed at the prompt, as a terminal's type-ahead is;
// a Ctrl-C among them interrupts the line and drops what was typed ahead.
func (s *Shell) Write(_ context.Context, p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return 0, ErrEnded
	}
	if s.busy {
		s.aheadLocked(p)
		return len(p), nil
	}
	s.keysLocked(p)
	return len(p), nil
}

// aheadLocked keeps keys typed while a line runs, bounded like a line.
func (s *Shell) aheadLocked(p []byte) {
	if i := bytes.LastIndexByte(p, 0x03); i >= 0 {
		s.emitLocked([]byte("^C"))
		s.typeahead = append(s.typeahead[:0], p[i+1:]...)
		s.interrupt = true
		s.kickRunner()
		return
	}
	if len(s.typeahead)+len(p) > maxLineBytes {
		s.emitLocked([]byte{0x07})
		return
	}
	s.typeahead = append(s.typeahead, p...)
}

// keysLocked types keys at the prompt, up to the first that starts a line
// or ends the shell; the rest waits in typeahead.
func (s *Shell) keysLocked(p []byte) {
	for i := range p {
		out, events := s.ed.Keys(p[i : i+1])
		s.emitLocked(out)
		for _, ev := range events {
			switch ev.kind {
			case evRun:
				if strings.TrimSpace(ev.line) == "" {
					s.emitLocked(s.ed.Prompt())
					continue
				}
				s.startLocked(ev.line)
				s.aheadLocked(p[i+1:])
				return
			case evInterrupt:
				s.status = 130
				s.emitLocked(s.ed.Prompt())
			case evEOF:
				s.emitLocked([]byte("exit\r\n"))
				s.endLocked(gateway.ExitStatus{ExitCode: s.status}, nil)
				return
			}
		}
	}
}

func (s *Shell) kickRunner() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Resize records the terminal's size, which the next lines get as COLUMNS
// and LINES.
func (s *Shell) Resize(_ context.Context, cols, rows uint16) error {
	if cols == 0 || rows == 0 {
		return gateway.Errorf(gateway.CodeInvalidArgument, "cols and rows must be positive")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return ErrEnded
	}
	s.cols, s.rows = cols, rows
	return nil
}

// Kill ends the shell, killing the line that runs, and waits (bounded by
// ctx) for that line's process to end. The exit status is SIGKILL's.
func (s *Shell) Kill(ctx context.Context) error {
	s.mu.Lock()
	p := s.proc
	if !s.ended {
		s.endLocked(gateway.ExitStatus{ExitCode: 128 + 9, Signal: "SIGKILL"}, nil)
	}
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	if err := p.Kill(ctx); err != nil {
		return err
	}
	_, err := p.Wait(ctx)
	return err
}

// Abandon ends the shell because its VM is gone: Wait returns err. It makes
// no engine call of its own (a running line's kill is tried, bounded).
func (s *Shell) Abandon(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endLocked(gateway.ExitStatus{}, err)
}

// endLocked records the shell's end; the line that runs, if any, is killed
// by its runner.
func (s *Shell) endLocked(st gateway.ExitStatus, err error) {
	if s.ended {
		return
	}
	s.ended = true
	s.exit, s.err = st, err
	s.endLife()
	// The state file is removed in the background; the VM may be gone.
	// The goroutine is counted before done closes: Wait waits for the
	// count once done is closed.
	s.wg.Add(1)
	close(s.done)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), removeTimeout)
		defer cancel()
		_ = s.vm.Remove(ctx, s.state, false)
	}()
}

// emitLocked sends terminal output to OnOutput.
func (s *Shell) emitLocked(b []byte) {
	if len(b) == 0 || s.onOut == nil {
		return
	}
	s.seq++
	s.lastNL = b[len(b)-1] == '\n'
	s.onOut(Output{Seq: s.seq, Data: b, Time: time.Now()})
}

// wrapper runs one line: $1 is the line, $2 its number, $3 the state file,
// $4 the variables to unset first, $5 the last line's status (the line's
// $?). It writes the line's number, exit status, working directory and
// exported variables (NAME=value, each ended by a NUL) to the state file,
// with builtins only; a line that exits the shell
// (`exit 3`, `exec`) writes nothing, which is how the shell tells.
const wrapper = `unset $4 2>/dev/null
__agentos_return() { return "$1"; }
__agentos_return "$5"
eval "$1"
__agentos_status=$?
{ printf '%s\n%s\n' "$2" "$__agentos_status"; pwd; for __agentos_n in $(compgen -e); do printf '%s=%s\0' "$__agentos_n" "${!__agentos_n}"; done; } >"$3" 2>/dev/null ||
	printf '%s: the shell could not save its state to %s; it ends here\n' "$0" "$3" >&2
exit $__agentos_status`

// startLocked starts running a line.
func (s *Shell) startLocked(line string) {
	s.lines++
	s.busy, s.proc, s.interrupt = true, nil, false
	env := make(map[string]string, len(s.env)+2)
	for k, v := range s.env {
		env[k] = v
	}
	if s.cols > 0 && s.rows > 0 {
		env["COLUMNS"], env["LINES"] = strconv.Itoa(int(s.cols)), strconv.Itoa(int(s.rows))
	}
	argv := []string{s.shell, "-c", wrapper, s.shell, line, strconv.Itoa(s.lines), s.state, strings.Join(s.unset, " "), strconv.Itoa(s.status)}
	direct := false
	if s.direct != nil {
		if a, ok := s.direct(line); ok {
			argv, direct = a, true
		}
	}
	n, cwd := s.lines, s.cwd
	s.wg.Add(1)
	go s.run(n, argv, cwd, env, direct)
}

// output shows a line's output, with each newline as the terminal's CR LF.
func (s *Shell) output(data []byte) {
	b := make([]byte, 0, len(data)+8)
	for i, c := range data {
		if c == '\n' && (i == 0 || data[i-1] != '\r') {
			b = append(b, '\r')
		}
		b = append(b, c)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.emitLocked(b)
	}
}

// errDirect stands for the state file a direct line does not write.
var errDirect = errors.New("lineshell: a direct line leaves no state")

// run runs line number n and then shows the prompt again, or ends the
// shell when the line ended it. A direct line is argv itself, with no
// state file to read: its exit status is the line's.
func (s *Shell) run(n int, argv []string, cwd string, env map[string]string, direct bool) {
	defer s.wg.Done()
	p, err := s.vm.Spawn(s.life, argv, SpawnOptions{Cwd: cwd, Env: env, OnOutput: s.output})
	if err != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.ended {
			s.emitLocked([]byte(fmt.Sprintf("%s: the line could not start: %v\r\n", s.shell, err)))
			s.status = 126
			s.doneLocked()
		}
		return
	}
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()
	s.kickRunner()
	interrupted := false
	for waiting := true; waiting; {
		select {
		case <-p.Done():
			waiting = false
		case <-s.life.Done():
			ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			_ = p.Kill(ctx)
			_, _ = p.Wait(ctx)
			cancel()
			return
		case <-s.kick:
			s.mu.Lock()
			intr := s.interrupt
			s.interrupt = false
			s.mu.Unlock()
			if intr && !interrupted {
				interrupted = true
				ctx, cancel := context.WithTimeout(s.life, callTimeout)
				_ = p.Kill(ctx) // its exit ends the wait
				cancel()
			}
		}
	}
	st, werr := p.Wait(s.life)
	// A direct line has no state file to read: its exit status is the
	// line's, and it cannot end the shell.
	var raw []byte
	rerr := errDirect
	if !direct {
		ctx, cancel := context.WithTimeout(s.life, callTimeout)
		raw, rerr = s.vm.ReadFile(ctx, s.state)
		cancel()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	if !s.lastNL {
		s.emitLocked([]byte("\r\n"))
	}
	state, mine, perr := parseState(raw, n)
	switch {
	case interrupted:
		s.status = 130
	case werr != nil:
		s.endLocked(gateway.ExitStatus{}, werr)
		return
	case rerr == nil && mine:
		s.status = state.status
		if state.cwd != "" {
			s.cwd = state.cwd
		}
		if perr != nil {
			// The line ran; what it left for the next is unreadable, so
			// the next line gets the environment this one had.
			s.emitLocked([]byte(fmt.Sprintf("%s: the line's variables could not be carried over (%v)\r\n", s.shell, perr)))
		} else {
			s.applyEnvLocked(state.env)
		}
	case st.Signal != "":
		s.status = 128 + st.ExitCode
		if st.ExitCode == 0 {
			s.status = 128 + 9
		}
	case direct:
		s.status = st.ExitCode
	default:
		// The line ended the shell: `exit N`, `exec`, `set -e` and a
		// failure. Its status is the shell's.
		s.endLocked(st, nil)
		return
	}
	s.doneLocked()
}

// doneLocked returns the shell to its prompt after a line, and types the
// keys typed ahead of it.
func (s *Shell) doneLocked() {
	s.busy, s.proc = false, nil
	s.emitLocked(s.ed.Prompt())
	ahead := s.typeahead
	s.typeahead = nil
	s.keysLocked(ahead)
}

// applyEnvLocked takes the exported variables a line left as the next
// lines' environment, and notes the ones it unset.
func (s *Shell) applyEnvLocked(env map[string]string) {
	for k := range s.env {
		if _, ok := env[k]; !ok && !slices.Contains(s.unset, k) {
			s.unset = append(s.unset, k)
		}
	}
	kept := s.unset[:0]
	for _, k := range s.unset {
		if _, ok := env[k]; !ok {
			kept = append(kept, k)
		}
	}
	s.unset = kept
	s.env = env
}
