package agentos

import (
	"context"
	"fmt"
	"sync"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// ExecOptions configure a one-shot command.
type ExecOptions struct {
	Cwd string
	Env map[string]string
	// Stdin is written to the process, then stdin is closed.
	Stdin []byte
	// Timeout kills the process tree when it runs longer (0: no limit).
	Timeout time.Duration
	// MaxOutputBytes caps what is kept of each of stdout and stderr
	// (default 16 MiB); the rest is counted as truncated.
	MaxOutputBytes int
	// OnOutput, when set, also receives every chunk as it arrives, on the
	// sidecar's event lane; it must not block.
	OnOutput func(Output)
}

// ExecResult is the outcome of Exec.
type ExecResult struct {
	ProcessID       string
	ExitCode        int
	Signal          gateway.Signal
	Stdout          []byte
	Stderr          []byte
	StdoutTruncated bool
	StderrTruncated bool
	Duration        time.Duration
}

// DefaultMaxOutputBytes is the default cap of ExecOptions.MaxOutputBytes.
const DefaultMaxOutputBytes = 16 << 20

// Exec runs a command line to completion: simple commands directly, others
// through `sh -c`.
func (vm *VM) Exec(ctx context.Context, command string, o ExecOptions) (*ExecResult, error) {
	argv := commandArgv(command)
	if argv == nil {
		return nil, fmt.Errorf("%w: empty command", ErrInvalidArgument)
	}
	return vm.ExecArgv(ctx, argv, o)
}

// ExecArgv runs argv to completion and collects its output.
//
// With a Timeout, a process still running at the deadline is killed with its
// whole process tree, and ErrTimeout is returned (with the output so far) only
// once the sidecar confirmed the exit; when it does not within KillTimeout,
// the error is ErrTerminationFailed. When ctx ends first the process tree is
// killed too and ctx's error returned. If the VM or the sidecar goes away
// meanwhile, the error says so: it is never turned into an exit code.
func (vm *VM) ExecArgv(ctx context.Context, argv []string, o ExecOptions) (*ExecResult, error) {
	start := time.Now()
	if len(o.Stdin) > MaxStdinWrite {
		return nil, fmt.Errorf("%w: stdin of %d bytes exceeds %d, the most agentOS delivers reliably", ErrInvalidArgument, len(o.Stdin), MaxStdinWrite)
	}
	max := o.MaxOutputBytes
	if max <= 0 {
		max = DefaultMaxOutputBytes
	}
	c := &collector{max: max, forward: o.OnOutput}
	p, err := vm.Spawn(ctx, argv, SpawnOptions{
		Cwd:        o.Cwd,
		Env:        o.Env,
		CloseStdin: o.Stdin == nil,
		OnOutput:   c.add,
	})
	if err != nil {
		return nil, err
	}
	if o.Stdin != nil {
		// A process may exit without reading its input; the sidecar then
		// rejects the write, which is not the exec's failure.
		if _, err := p.Write(ctx, o.Stdin); err != nil && !isRejected(err) {
			p.killDetached()
			return nil, err
		}
		if err := p.CloseStdin(ctx); err != nil && !isRejected(err) {
			p.killDetached()
			return nil, err
		}
	}

	var deadline <-chan time.Time
	if o.Timeout > 0 {
		t := time.NewTimer(o.Timeout - time.Since(start))
		defer t.Stop()
		deadline = t.C
	}
	select {
	case <-p.done:
	case <-deadline:
		if err := p.terminate(); err != nil {
			return c.result(p, start), fmt.Errorf("agentos: exec %q: %w (after %s)", argv[0], err, o.Timeout)
		}
		if _, err := p.Wait(context.Background()); err != nil {
			return nil, err // lost, not timed out
		}
		return c.result(p, start), fmt.Errorf("agentos: exec %q: %w (%s)", argv[0], ErrTimeout, o.Timeout)
	case <-ctx.Done():
		p.killDetached()
		return nil, ctx.Err()
	}
	if _, err := p.Wait(context.Background()); err != nil {
		return nil, err
	}
	return c.result(p, start), nil
}

// collector gathers exec output up to a cap per stream.
type collector struct {
	mu                   sync.Mutex
	max                  int
	stdout, stderr       []byte
	stdoutCut, stderrCut bool
	forward              func(Output)
}

func (c *collector) add(o Output) {
	c.mu.Lock()
	buf, cut := &c.stdout, &c.stdoutCut
	if o.Stream == Stderr {
		buf, cut = &c.stderr, &c.stderrCut
	}
	room := c.max - len(*buf)
	if room >= len(o.Data) {
		*buf = append(*buf, o.Data...)
	} else {
		if room > 0 {
			*buf = append(*buf, o.Data[:room]...)
		}
		*cut = true
	}
	fwd := c.forward
	c.mu.Unlock()
	if fwd != nil {
		fwd(o)
	}
}

func (c *collector) result(p *Process, start time.Time) *ExecResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	p.mu.Lock()
	st := p.statusLocked()
	p.mu.Unlock()
	return &ExecResult{
		ProcessID: p.id, ExitCode: st.ExitCode, Signal: st.Signal,
		Stdout: c.stdout, Stderr: c.stderr, StdoutTruncated: c.stdoutCut, StderrTruncated: c.stderrCut,
		Duration: time.Since(start),
	}
}
