package vms

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/agentos"
	"github.com/agentos-gateway/agentos-gateway/lineshell"
	"github.com/agentos-gateway/agentos-gateway/streamlog"
)

// ShellRequest opens an interactive shell.
type ShellRequest struct {
	Shell      string
	Cols, Rows uint16
	Cwd        string
	Env        map[string]string
}

// Shell is an interactive shell of a VM: a lineshell.Shell, whose line
// editing happens in the gateway so that no guest process waits on stdin
// while it sits at its prompt (on the pinned engine such a wait stalls
// every VM of the sidecar).
type Shell struct {
	id        string
	shell     string
	startedAt time.Time
	p         shellProcess
	out       *streamlog.Log[Chunk]
	done      chan struct{}

	mu sync.Mutex
	// cols and rows are the window's size, as the client last set it; the
	// lines run without a terminal, so the size is the line editor's only.
	cols, rows uint16
	exitedAt   time.Time
	exit       *gateway.ExitStatus
	err        error
}

// A shell opened without a size reports a terminal's customary one.
const defaultCols, defaultRows = 80, 24

// shellProcess is what a Shell needs of the shell it runs.
type shellProcess interface {
	Write(ctx context.Context, data []byte) (int, error)
	Resize(ctx context.Context, cols, rows uint16) error
	Kill(ctx context.Context) error
	Wait(ctx context.Context) (gateway.ExitStatus, error)
	// Abandon ends the shell because its VM ended; Wait returns err.
	Abandon(err error)
}

// ID returns the shell id.
func (sh *Shell) ID() string { return sh.id }

// Output returns the shell's output log; its sequence numbers are the
// shell's output sequence numbers.
func (sh *Shell) Output() *streamlog.Log[Chunk] { return sh.out }

// Done is closed when the shell ended.
func (sh *Shell) Done() <-chan struct{} { return sh.done }

// Exit returns the exit status once the shell ended (nil while it runs), or
// the error that made its end unknowable.
func (sh *Shell) Exit() (*gateway.ExitStatus, error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.exit, sh.err
}

func (sh *Shell) running() bool {
	select {
	case <-sh.done:
		return false
	default:
		return true
	}
}

// Info describes the shell.
func (sh *Shell) Info() gateway.ShellInfo {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	info := gateway.ShellInfo{ID: sh.id, Shell: sh.shell, State: gateway.ShellRunning, Cols: sh.cols, Rows: sh.rows, StartedAt: sh.startedAt, Exit: sh.exit}
	if !sh.exitedAt.IsZero() {
		t := sh.exitedAt
		info.ExitedAt = &t
		info.State = gateway.ShellExited
	}
	if sh.err != nil {
		info.Error = gateway.ErrorMessage(sh.err)
	}
	return info
}

// OpenShell starts a shell.
func (s *Service) OpenShell(ctx context.Context, tenant gateway.Tenant, vmID string, req ShellRequest) (*Shell, error) {
	lv, unhold, err := s.lookupAt(ctx, tenant.ID, vmID, req.Cwd)
	if err != nil {
		return nil, err
	}
	defer unhold()
	shell, err := agentos.ShellName(req.Shell)
	if err != nil {
		return nil, EngineError(err, "open shell")
	}
	release, err := s.countProcess(tenant)
	if err != nil {
		return nil, err
	}
	cols, rows := req.Cols, req.Rows
	if cols == 0 || rows == 0 {
		cols, rows = defaultCols, defaultRows
	}
	sh := &Shell{id: newID("sh_"), shell: shell, startedAt: s.cfg.Now().UTC(), out: streamlog.New[Chunk](s.cfg.OutputBufferBytes),
		done: make(chan struct{}), cols: cols, rows: rows}
	cwd := req.Cwd
	if cwd == "" {
		cwd = agentos.DefaultCwd
	}
	p, err := lineshell.Start(lineVM{lv.vm}, lineshell.Options{
		ID: sh.id, Shell: shell, Cols: req.Cols, Rows: req.Rows, Cwd: cwd, Env: req.Env,
		Direct: agentos.PythonLineArgv,
		OnOutput: func(o lineshell.Output) {
			sh.out.Append(o.Seq, len(o.Data), Chunk{Stream: "stdout", Data: o.Data, Time: o.Time})
		},
	})
	if err != nil {
		release()
		return nil, EngineError(err, "open shell")
	}
	sh.p = p
	lv.mu.Lock()
	lv.shells[sh.id] = sh
	lv.mu.Unlock()
	if !s.goTracked(func() { s.awaitShell(lv, sh, release) }) {
		// Close began while the shell started: it disposes the VM and
		// the shell with it, and no watcher may start after its Wait.
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killTimeout)
		_ = p.Kill(kctx)
		_, _ = p.Wait(kctx)
		cancel()
		release()
		return nil, errShuttingDown()
	}
	return sh, nil
}

// awaitShell records a shell's end and closes its log. Ended shells stay
// listed, bounded like exited processes, so that a late request gets a
// clear conflict and the exit status stays readable.
func (s *Service) awaitShell(lv *liveVM, sh *Shell, release func()) {
	defer release()
	st, err := sh.p.Wait(context.Background())
	sh.mu.Lock()
	if err != nil {
		if sh.err == nil {
			sh.err = EngineError(err, "shell")
		}
	} else {
		sh.exit = &st
	}
	sh.exitedAt = s.cfg.Now().UTC()
	perr := sh.err
	sh.mu.Unlock()
	close(sh.done)
	sh.out.Close(perr)
	lv.mu.Lock()
	defer lv.mu.Unlock()
	if _, ok := lv.shells[sh.id]; !ok {
		return // deleted while it ended
	}
	lv.exitedShells = append(lv.exitedShells, sh.id)
	for len(lv.exitedShells) > maxExitedShells {
		delete(lv.shells, lv.exitedShells[0])
		lv.exitedShells = lv.exitedShells[1:]
	}
}

// maxExitedShells bounds how many ended shells a VM keeps listed.
const maxExitedShells = maxExitedProcesses

// vmEnded records that the shell's VM ended: its end is unknowable.
func (sh *Shell) vmEnded(err error) {
	sh.mu.Lock()
	if sh.exit == nil && sh.err == nil {
		sh.err = err
	}
	sh.mu.Unlock()
	sh.p.Abandon(err)
	sh.out.Close(err)
}

// Shells lists a VM's shells, ended ones included, oldest first.
func (s *Service) Shells(ctx context.Context, tenantID, vmID string) ([]gateway.ShellInfo, error) {
	lv, err := s.lookup(ctx, tenantID, vmID)
	if err != nil {
		return nil, err
	}
	lv.mu.Lock()
	shs := make([]*Shell, 0, len(lv.shells))
	for _, sh := range lv.shells {
		shs = append(shs, sh)
	}
	lv.mu.Unlock()
	out := make([]gateway.ShellInfo, len(shs))
	for i, sh := range shs {
		out[i] = sh.Info()
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].StartedAt.Equal(out[j].StartedAt) {
			return out[i].StartedAt.Before(out[j].StartedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// Shell returns a shell of a VM, running or ended, and a hold on the VM.
func (s *Service) Shell(ctx context.Context, tenantID, vmID, id string) (*Shell, func(), error) {
	lv, err := s.lookup(ctx, tenantID, vmID)
	if err != nil {
		return nil, nil, err
	}
	lv.mu.Lock()
	sh := lv.shells[id]
	lv.mu.Unlock()
	if sh == nil {
		return nil, nil, gateway.Errorf(gateway.CodeNotFound, "no shell %s in VM %s", id, vmID)
	}
	return sh, lv.hold(s.cfg.Now()), nil
}

// DeleteShell kills a running shell, waiting for its end (bounded by ctx),
// or removes the record of an ended one; either way the shell is gone
// afterwards and a second delete is not_found.
func (s *Service) DeleteShell(ctx context.Context, tenantID, vmID, id string) error {
	sh, release, err := s.Shell(ctx, tenantID, vmID, id)
	if err != nil {
		return err
	}
	defer release()
	if sh.running() {
		// The engine can hold a kill for a while: the wait is bounded, so
		// that a client is told instead of left hanging.
		kctx, cancel := context.WithTimeout(ctx, shellKillTimeout)
		defer cancel()
		if err := sh.p.Kill(kctx); err != nil && sh.running() {
			return EngineError(err, "close shell")
		}
		select {
		case <-sh.done:
		case <-kctx.Done():
			return gateway.Wrap(gateway.CodeDeadlineExceeded, kctx.Err(), "shell %s did not end within %s of SIGKILL; it may still end", id, shellKillTimeout)
		}
	}
	lv, err := s.lookup(ctx, tenantID, vmID)
	if err != nil {
		return err
	}
	lv.mu.Lock()
	defer lv.mu.Unlock()
	if lv.shells[id] != sh {
		return gateway.Errorf(gateway.CodeNotFound, "no shell %s in VM %s", id, vmID)
	}
	delete(lv.shells, id)
	for i, x := range lv.exitedShells {
		if x == id {
			lv.exitedShells = append(lv.exitedShells[:i], lv.exitedShells[i+1:]...)
			break
		}
	}
	return nil
}

func (sh *Shell) exited() error {
	return gateway.Errorf(gateway.CodeConflict, "shell %s has exited", sh.id).WithDetail("state", gateway.ShellExited)
}

// Input sends keystrokes.
func (sh *Shell) Input(ctx context.Context, data []byte) error {
	if !sh.running() {
		return sh.exited()
	}
	if _, err := sh.p.Write(ctx, data); err != nil {
		if !sh.running() || errors.Is(err, lineshell.ErrEnded) {
			return sh.exited()
		}
		return EngineError(err, "shell input")
	}
	return nil
}

// Resize changes the terminal size.
func (sh *Shell) Resize(ctx context.Context, cols, rows uint16) error {
	if !sh.running() {
		return sh.exited()
	}
	if err := sh.p.Resize(ctx, cols, rows); err != nil {
		if !sh.running() || errors.Is(err, lineshell.ErrEnded) {
			return sh.exited()
		}
		return EngineError(err, "resize shell")
	}
	sh.mu.Lock()
	sh.cols, sh.rows = cols, rows
	sh.mu.Unlock()
	return nil
}

// lineVM runs a line shell's lines as the engine's processes.
type lineVM struct{ vm *agentos.VM }

func (l lineVM) Spawn(ctx context.Context, argv []string, o lineshell.SpawnOptions) (lineshell.Process, error) {
	p, err := l.vm.Spawn(ctx, argv, agentos.SpawnOptions{Cwd: o.Cwd, Env: o.Env, CloseStdin: true,
		OnOutput: func(out agentos.Output) { o.OnOutput(out.Data) }})
	if err != nil {
		return nil, err
	}
	return p, nil
}

func (l lineVM) ReadFile(ctx context.Context, path string) ([]byte, error) {
	return l.vm.ReadFile(ctx, path)
}

func (l lineVM) Remove(ctx context.Context, path string, recursive bool) error {
	return l.vm.Remove(ctx, path, recursive)
}
