package agentos

import (
	"context"
	"fmt"

	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

// ShellOptions configure an interactive shell.
type ShellOptions struct {
	// Shell is "sh" (default) or "bash".
	Shell string
	Cols  uint16
	Rows  uint16
	Cwd   string
	Env   map[string]string
	// OnOutput receives the terminal's output; see SpawnOptions.OnOutput.
	OnOutput func(Output)
}

// OpenShell starts a real interactive shell on a pseudo-terminal inside the
// VM. (The official SDK emulates one on the host and runs each typed line as
// its own process; this is a shell process with a PTY, so job control, state
// between lines and full-screen programs behave.) Keystrokes go in with
// Write, Resize changes the window, Wait returns when the shell exits.
func (vm *VM) OpenShell(ctx context.Context, o ShellOptions) (*Process, error) {
	shell, err := ShellName(o.Shell)
	if err != nil {
		return nil, err
	}
	env := map[string]string{"TERM": "xterm-256color"}
	for k, v := range o.Env {
		env[k] = v
	}
	// brush, the guest's sh and bash, runs with its minimal input backend:
	// it reads whole lines from the terminal in canonical mode, where the
	// kernel echoes and edits them, and never switches to raw mode or asks
	// the terminal for the cursor position. Its default line editor does
	// both, and on agentOS 0.2.21 that loses lines typed before a prompt
	// (the engine's terminal keeps canonical input it has not delivered
	// when raw mode starts) and ends one shell start in ten waiting for a
	// cursor answer the engine holds back.
	p, err := vm.Spawn(ctx, []string{shell, "-i", "--input-backend", "minimal"}, SpawnOptions{Cwd: o.Cwd, Env: env, TTY: true, OnOutput: o.OnOutput})
	if err != nil {
		return nil, err
	}
	if o.Cols > 0 && o.Rows > 0 {
		if err := p.Resize(ctx, o.Cols, o.Rows); err != nil {
			p.killDetached()
			return nil, err
		}
	}
	return p, nil
}

// Resize changes the window size of a process running on a PTY.
func (p *Process) Resize(ctx context.Context, cols, rows uint16) error {
	if cols == 0 || rows == 0 {
		return fmt.Errorf("%w: cols and rows must be positive", ErrInvalidArgument)
	}
	resp, err := p.vm.call(ctx, protocol.ResizePTYRequest{ProcessID: p.id, Cols: cols, Rows: rows})
	if err != nil {
		return fmt.Errorf("agentos: resize %s: %w", p.id, err)
	}
	if _, ok := resp.(protocol.PTYResizedResponse); !ok {
		return unexpected("ResizePtyRequest", resp)
	}
	return nil
}

// ShellName returns the guest shell a request names: "sh" (also for "") or
// "bash", both brush in the guest; any other name is ErrInvalidArgument.
func ShellName(name string) (string, error) {
	switch name {
	case "":
		return "sh", nil
	case "sh", "bash":
		return name, nil
	}
	return "", fmt.Errorf("%w: shell must be sh or bash, not %q", ErrInvalidArgument, name)
}
