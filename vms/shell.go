package vms

import (
	"context"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/agentos"
)

// ShellRequest opens an interactive shell.
type ShellRequest struct {
	Shell      string
	Cols, Rows uint16
	Cwd        string
	Env        map[string]string
}

// Shell is an interactive shell on a PTY in a VM.
type Shell struct {
	id  string
	p   *agentos.Process
	out *Log[Chunk]
}

// ID returns the shell id.
func (sh *Shell) ID() string { return sh.id }

// Output returns the shell's output log.
func (sh *Shell) Output() *Log[Chunk] { return sh.out }

// OpenShell starts a shell.
func (s *Service) OpenShell(ctx context.Context, tenant gateway.Tenant, vmID string, req ShellRequest) (*Shell, error) {
	lv, err := s.lookupAt(ctx, tenant.ID, vmID, req.Cwd)
	if err != nil {
		return nil, err
	}
	release, err := s.countProcess(tenant)
	if err != nil {
		return nil, err
	}
	out := NewLog[Chunk](s.cfg.OutputBufferBytes)
	p, err := lv.vm.OpenShell(ctx, agentos.ShellOptions{
		Shell: req.Shell, Cols: req.Cols, Rows: req.Rows, Cwd: req.Cwd, Env: req.Env,
		OnOutput: func(o agentos.Output) {
			out.Append(o.Seq, len(o.Data), Chunk{Stream: "stdout", Data: o.Data, Time: o.Time})
		},
	})
	if err != nil {
		release()
		return nil, EngineError(err, "open shell")
	}
	sh := &Shell{id: newID("sh_"), p: p, out: out}
	lv.mu.Lock()
	lv.shells[sh.id] = sh
	lv.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer release()
		_, err := p.Wait(context.Background())
		lv.mu.Lock()
		delete(lv.shells, sh.id)
		lv.mu.Unlock()
		out.Close(engineErrorOrNil(err))
	}()
	return sh, nil
}

func engineErrorOrNil(err error) error {
	if err == nil {
		return nil
	}
	return EngineError(err, "shell")
}

// Shell returns an open shell of a VM and a hold on the VM.
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

// Input sends keystrokes.
func (sh *Shell) Input(ctx context.Context, data []byte) error {
	_, err := sh.p.Write(ctx, data)
	return EngineError(err, "shell input")
}

// Resize changes the terminal size.
func (sh *Shell) Resize(ctx context.Context, cols, rows uint16) error {
	return EngineError(sh.p.Resize(ctx, cols, rows), "resize shell")
}

// Close kills the shell.
func (sh *Shell) Close(ctx context.Context) error {
	if err := sh.p.Kill(ctx); err != nil {
		return EngineError(err, "close shell")
	}
	_, _ = sh.p.Wait(ctx)
	return nil
}
