package agentos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

// A code context is the engine's retained language context (its execution
// API: CreateContextRequest, then Python or JavaScript executions that name
// the context). Measured on 0.2.21, the engine keeps one runtime per
// context alive between runs, so variables, imports and functions stay: a
// Python context's first run pays Pyodide's start (about 5 s), the next
// ones take tens of milliseconds, where every `python3 -c` starts afresh. A
// JavaScript run takes a few milliseconds. State lives in the engine's
// memory only: a context does not survive its VM's hibernation or its
// sidecar.

// Language is what a code context runs.
type Language string

// The languages of code contexts.
const (
	LanguagePython     Language = "python"
	LanguageJavaScript Language = "javascript"
)

// CodeContext is a retained language context of a VM. Its runs are one at
// a time: Run waits for the one in progress.
type CodeContext struct {
	vm   *VM
	id   string
	lang Language
	cwd  string
	env  map[string]string

	runMu sync.Mutex // held for a run, from its request to its end
}

// CodeContextOptions configure a code context.
type CodeContextOptions struct {
	Language Language
	// Cwd defaults to DefaultCwd.
	Cwd string
	// Env is added to the VM's environment for every run.
	Env map[string]string
}

// RunOptions configure one run of a code context.
type RunOptions struct {
	// Timeout is enforced by the engine, which then ends the run as timed
	// out (0: no limit).
	Timeout time.Duration
	// OnOutput, when set, receives each chunk as it arrives, on the
	// sidecar's event lane; it must not block.
	OnOutput func(Output)
}

// RunOutcome is how a run ended.
type RunOutcome string

// Run outcomes, as the engine reports them.
const (
	RunSucceeded RunOutcome = "succeeded"
	RunFailed    RunOutcome = "failed"
	RunCancelled RunOutcome = "cancelled"
	RunTimedOut  RunOutcome = "timed_out"
)

// RunResult is the outcome of a run.
type RunResult struct {
	Outcome  RunOutcome
	ExitCode int
	Stdout   []byte
	Stderr   []byte
	// Error is the engine's account of a run that failed, when it gave one.
	Error    *RunError
	Duration time.Duration
}

// RunError is the engine's description of a failed run.
type RunError struct {
	Code, Name, Message, Stack string
}

// codeRun is the run in progress of a context, fed by the VM's events.
type codeRun struct {
	forward func(Output)

	mu             sync.Mutex
	seq            uint64
	stdout, stderr []byte
	done           chan struct{}
	result         *protocol.ExecutionCompletedEvent
	err            error
}

func (r *codeRun) output(e protocol.ExecutionOutputEvent) {
	stream := Stdout
	if e.Channel == protocol.ExecutionStreamChannelStderr {
		stream = Stderr
	}
	r.mu.Lock()
	if r.result != nil || r.err != nil {
		r.mu.Unlock()
		return
	}
	r.seq++
	o := Output{Seq: r.seq, Stream: stream, Data: e.Chunk, Time: time.Now()}
	if stream == Stderr {
		r.stderr = append(r.stderr, e.Chunk...)
	} else {
		r.stdout = append(r.stdout, e.Chunk...)
	}
	fwd := r.forward
	r.mu.Unlock()
	if fwd != nil {
		fwd(o)
	}
}

// end records how the run ended, once.
func (r *codeRun) end(ev *protocol.ExecutionCompletedEvent, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.result != nil || r.err != nil {
		return
	}
	r.result, r.err = ev, err
	close(r.done)
}

// CreateCodeContext creates a retained language context in the VM.
func (vm *VM) CreateCodeContext(ctx context.Context, o CodeContextOptions) (*CodeContext, error) {
	switch o.Language {
	case LanguagePython, LanguageJavaScript:
	default:
		return nil, fmt.Errorf("%w: language %q: a code context runs %q or %q", ErrInvalidArgument, o.Language, LanguagePython, LanguageJavaScript)
	}
	cwd := o.Cwd
	if cwd == "" {
		cwd = DefaultCwd
	}
	c := &CodeContext{vm: vm, id: vm.newContextID(), lang: o.Language, cwd: cwd, env: maps.Clone(o.Env)}
	resp, err := vm.call(ctx, protocol.CreateContextRequest{ContextID: c.id})
	if err != nil {
		return nil, fmt.Errorf("agentos: create code context: %w", err)
	}
	if _, ok := resp.(protocol.ExecutionDescriptorResponse); !ok {
		return nil, unexpected("CreateContextRequest", resp)
	}
	return c, nil
}

// ID is the context's id, which the engine knows it by.
func (c *CodeContext) ID() string { return c.id }

// Language is what the context runs.
func (c *CodeContext) Language() Language { return c.lang }

// Run runs code in the context and waits for its end. A run that raises is
// a result (RunFailed, with the error and its output), not an error; the
// context stays usable. When ctx ends first the run is cancelled and ctx's
// error returned.
func (c *CodeContext) Run(ctx context.Context, code string, o RunOptions) (*RunResult, error) {
	c.runMu.Lock()
	defer c.runMu.Unlock()
	start := time.Now()
	run := &codeRun{forward: o.OnOutput, done: make(chan struct{})}
	if err := c.vm.addRun(c.id, run); err != nil {
		return nil, err
	}
	defer c.vm.removeRun(c.id, run)

	opts := protocol.ProcessExecutionOptions{
		Identity: protocol.ExecutionIdentityOptions{ContextID: &c.id},
		Cwd:      &c.cwd,
	}
	if len(c.env) > 0 {
		env := protocol.MapOf(c.env)
		opts.Env = &env
	}
	if o.Timeout > 0 {
		ms := uint64(o.Timeout.Milliseconds())
		opts.TimeoutMs = &ms
	}
	var req protocol.RequestPayload = protocol.PythonExecutionRequest{Process: opts, Source: code}
	if c.lang == LanguageJavaScript {
		req = protocol.JavaScriptExecutionRequest{Process: opts, Source: code}
	}
	resp, err := c.vm.call(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("agentos: run in code context %s: %w", c.id, err)
	}
	if _, ok := resp.(protocol.ExecutionAcceptedResponse); !ok {
		return nil, unexpected("ExecutionRequest", resp)
	}
	select {
	case <-run.done:
	case <-ctx.Done():
		// The run goes on in the engine unless cancelled; its end is
		// awaited, briefly, so that its late events do not reach the next
		// run of the context.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := c.vm.call(cctx, protocol.CancelExecutionRequest{ExecutionID: c.id}); err == nil {
			select {
			case <-run.done:
			case <-cctx.Done():
			}
		}
		return nil, ctx.Err()
	}
	run.mu.Lock()
	defer run.mu.Unlock()
	if run.err != nil {
		return nil, run.err
	}
	ev := run.result
	res := &RunResult{Outcome: runOutcome(ev.Outcome), Stdout: run.stdout, Stderr: run.stderr, Duration: time.Since(start)}
	if ev.ExitCode != nil {
		res.ExitCode = int(*ev.ExitCode)
	}
	if ev.Error != nil {
		res.Error = &RunError{Code: ev.Error.Code, Name: ev.Error.Name, Message: ev.Error.Message}
		if ev.Error.Stack != nil {
			res.Error.Stack = *ev.Error.Stack
		}
	}
	return res, nil
}

func runOutcome(o protocol.ExecutionOutcome) RunOutcome {
	switch o {
	case protocol.ExecutionOutcomeSucceeded:
		return RunSucceeded
	case protocol.ExecutionOutcomeCancelled:
		return RunCancelled
	case protocol.ExecutionOutcomeTimedOut:
		return RunTimedOut
	}
	return RunFailed
}

// Close ends the context and its runtime in the engine.
func (c *CodeContext) Close(ctx context.Context) error {
	resp, err := c.vm.call(ctx, protocol.DeleteExecutionRequest{ExecutionID: c.id})
	if err != nil {
		return fmt.Errorf("agentos: close code context %s: %w", c.id, err)
	}
	if _, ok := resp.(protocol.ExecutionDeletedResponse); !ok {
		return unexpected("DeleteExecutionRequest", resp)
	}
	return nil
}

// errRunLost is the cause of a run whose VM ended while it ran.
var errRunLost = errors.New("agentos: the code context's VM ended during the run")

func (vm *VM) newContextID() string {
	return fmt.Sprintf("ctx-%d", vm.contextSeq.Add(1))
}

func (vm *VM) addRun(id string, r *codeRun) error {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	switch vm.state {
	case VMLost, VMDisposed, VMDisposing:
		if vm.stateErr != nil {
			return vm.stateErr
		}
		return fmt.Errorf("%w: %s", ErrVMDisposed, vm.id)
	}
	if vm.runs == nil {
		vm.runs = make(map[string]*codeRun)
	}
	vm.runs[id] = r
	vm.guestRan()
	return nil
}

func (vm *VM) removeRun(id string, r *codeRun) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.runs[id] == r {
		delete(vm.runs, id)
	}
}

func (vm *VM) run(id string) *codeRun {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.runs[id]
}

// failRuns ends the runs in progress when the VM ends.
func failRuns(runs []*codeRun, err error) {
	if err == nil {
		err = errRunLost
	}
	for _, r := range runs {
		r.end(nil, fmt.Errorf("%w: %w", errRunLost, err))
	}
}
