package agentmcp

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// maxToolOutput bounds the output of each stream a tool returns: the
// answer goes into a model's context, and the gateway's own default bound
// of an exec's output is the same.
const maxToolOutput = 1 << 20

// ExecInput is exec's input.
type ExecInput struct {
	VM             string            `json:"vm" jsonschema:"the VM's id"`
	Command        string            `json:"command" jsonschema:"a command line, run through sh -c unless it is a simple command"`
	Cwd            string            `json:"cwd,omitempty" jsonschema:"the working directory (default: the VM's home)"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"environment variables added for this command"`
	Stdin          string            `json:"stdin,omitempty" jsonschema:"text written to the command's standard input, which is then closed"`
	TimeoutSeconds int               `json:"timeoutSeconds,omitempty" jsonschema:"end the command after this many seconds (0: the gateway's default, 10 minutes)"`
	IdempotencyKey string            `json:"idempotencyKey,omitempty" jsonschema:"a key of your own: a call again with the same key answers the first run's outcome instead of running the command twice (default: a new key per call)"`
}

// ExecOutput is exec's output.
type ExecOutput struct {
	ExitCode int    `json:"exitCode" jsonschema:"the command's exit code (-1 when a signal ended it)"`
	Signal   string `json:"signal,omitempty" jsonschema:"the signal that ended the command, such as SIGKILL"`
	Stdout   string `json:"stdout" jsonschema:"the standard output (invalid UTF-8 replaced)"`
	Stderr   string `json:"stderr" jsonschema:"the standard error (invalid UTF-8 replaced)"`
	// Truncated says that output past the bound was dropped.
	Truncated  bool  `json:"truncated,omitempty" jsonschema:"output past 1 MiB of a stream was dropped"`
	DurationMs int64 `json:"durationMs"`
}

// SpawnInput is spawn_process's input.
type SpawnInput struct {
	VM      string            `json:"vm" jsonschema:"the VM's id"`
	Command string            `json:"command" jsonschema:"a command line, run through sh -c unless it is a simple command"`
	Cwd     string            `json:"cwd,omitempty" jsonschema:"the working directory (default: the VM's home)"`
	Env     map[string]string `json:"env,omitempty" jsonschema:"environment variables added for this process"`
	// IdempotencyKey is as exec's.
	IdempotencyKey string `json:"idempotencyKey,omitempty" jsonschema:"a key of your own: a call again with the same key answers the first spawn's process instead of starting another (default: a new key per call)"`
}

// ProcessInfo is spawn_process's output.
type ProcessInfo struct {
	Pid     uint32 `json:"pid" jsonschema:"the process's id, which read_process_log takes"`
	Command string `json:"command"`
}

// ProcessLogInput is read_process_log's input.
type ProcessLogInput struct {
	VM          string `json:"vm" jsonschema:"the VM's id"`
	Pid         uint32 `json:"pid" jsonschema:"the process's id"`
	After       string `json:"after,omitempty" jsonschema:"return only the output after this cursor, the next of an earlier answer (default: from the start of what is buffered)"`
	WaitSeconds int    `json:"waitSeconds,omitempty" jsonschema:"follow the output of a running process for up to this many seconds, at most 60 (default 1)"`
}

// ProcessLog is read_process_log's output.
type ProcessLog struct {
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	// Next is the cursor to pass as after to read only what comes next.
	Next      string `json:"next,omitempty" jsonschema:"pass as after to read only the output that comes next"`
	Running   bool   `json:"running" jsonschema:"the process had not exited when the answer was made"`
	ExitCode  *int   `json:"exitCode,omitempty" jsonschema:"the exit code, once the process exited"`
	Signal    string `json:"signal,omitempty" jsonschema:"the signal that ended the process"`
	Truncated bool   `json:"truncated,omitempty" jsonschema:"output past 1 MiB of a stream, or older than the gateway's buffer, was dropped"`
}

const (
	defaultLogWait = time.Second
	maxLogWait     = time.Minute
)

func (t *tools) addExecTools(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{Name: "exec", Title: "Run a command",
		Description: "Runs a command in a VM to completion and returns its exit code and output. " +
			"With a progress token, the output also comes as it is printed, in the progress notifications' messages.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true)}},
		handle(t.exec))
	mcp.AddTool(s, &mcp.Tool{Name: "spawn_process", Title: "Start a process",
		Description: "Starts a long-running process in a VM (a server, a build) and returns at once with its pid; read_process_log reads its output.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true)}},
		handle(func(ctx context.Context, _ *mcp.CallToolRequest, in SpawnInput) (ProcessInfo, error) {
			// The answer is the spawn's own: reading the process back would
			// need vm:read besides the exec scope the spawn needs.
			return answer(func(p *client.ProcessHandle) ProcessInfo { return ProcessInfo{Pid: p.Pid(), Command: in.Command} })(
				t.c.VM(in.VM).Spawn(ctx, client.SpawnRequest{Command: in.Command, Cwd: in.Cwd, Env: in.Env}, keyed(in.IdempotencyKey)))
		}))
	mcp.AddTool(s, &mcp.Tool{Name: "read_process_log", Title: "Read a process's output",
		Description: "Returns a process's output so far (stdout and stderr) and whether it still runs; " +
			"pass the answer's next as after to read only what comes later.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		handle(t.processLog))
}

// keyed sends every exec and spawn with an Idempotency-Key: the caller's,
// or a new one for this call. With a key the client retries a call the
// gateway refused for the moment (a 503 while a sidecar restarts, a 429)
// without running the command twice, and without one it does not retry at
// all; a caller's own key also makes its retry of the whole tool call safe.
func keyed(key string) client.CallOption {
	if key == "" {
		key = "mcp-" + rand.Text()
	}
	return client.WithIdempotencyKey(key)
}

// exec runs the command as a stream, so that the output can be reported as
// it comes when the caller asked for progress, and buffered otherwise.
func (t *tools) exec(ctx context.Context, req *mcp.CallToolRequest, in ExecInput) (ExecOutput, error) {
	r := client.ExecRequest{Command: in.Command, Cwd: in.Cwd, Env: in.Env, Timeout: time.Duration(in.TimeoutSeconds) * time.Second}
	if in.Stdin != "" {
		r.Stdin = []byte(in.Stdin)
	}
	vm := t.c.VM(in.VM)
	token := req.Params.GetProgressToken()
	if token == nil {
		return answer(func(res *client.ExecResult) ExecOutput {
			return ExecOutput{ExitCode: res.ExitCode, Signal: string(res.Signal), Stdout: text(res.Stdout), Stderr: text(res.Stderr),
				Truncated: res.Truncated, DurationMs: res.Duration.Milliseconds()}
		})(vm.Exec(ctx, r, keyed(in.IdempotencyKey)))
	}
	st, err := vm.ExecStream(ctx, r, keyed(in.IdempotencyKey))
	if err != nil {
		return ExecOutput{}, err
	}
	defer st.Close()
	// A first notification as the command starts: over HTTP it opens the
	// answer's event stream, which the gateway then keeps alive with
	// heartbeats however long the command stays quiet.
	if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Message: "started"}); err != nil {
		return ExecOutput{}, fmt.Errorf("agentmcp: report progress: %w", err)
	}
	var out streams
	var progress float64
	for {
		ev, err := st.Next(ctx)
		if err != nil {
			return ExecOutput{}, err
		}
		switch ev := ev.(type) {
		case *client.Output:
			out.add(ev.Stream, ev.Data)
			// Progress counts the bytes printed, which only grow, as the
			// spec asks of it (from 0, the start's); the total is unknown.
			progress += float64(len(ev.Data))
			if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token,
				Progress: progress, Message: string(ev.Stream) + ": " + text(ev.Data)}); err != nil {
				return ExecOutput{}, fmt.Errorf("agentmcp: report progress: %w", err)
			}
		case *client.Gap:
			out.truncated = true
		case *client.Exit:
			return ExecOutput{ExitCode: ev.ExitCode, Signal: string(ev.Signal), Stdout: text(out.stdout), Stderr: text(out.stderr),
				Truncated: ev.Truncated || out.truncated, DurationMs: ev.Duration.Milliseconds()}, nil
		}
	}
}

// processLog reads the process's output from after, until the process's
// exit or for the wait, whichever comes first.
func (t *tools) processLog(ctx context.Context, _ *mcp.CallToolRequest, in ProcessLogInput) (ProcessLog, error) {
	wait := min(time.Duration(in.WaitSeconds)*time.Second, maxLogWait)
	if wait <= 0 {
		wait = defaultLogWait
	}
	p := t.c.VM(in.VM).Process(in.Pid)
	// The wait ends the read, and not the call: its own context.
	rctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	st, err := p.Output(rctx, client.StreamOptions{LastEventID: in.After})
	if err != nil {
		return ProcessLog{}, err
	}
	defer st.Close()
	var out streams
	log := ProcessLog{Running: true}
	for {
		ev, err := st.Next(rctx)
		if err != nil {
			if rctx.Err() != nil && ctx.Err() == nil {
				break // the wait is over and the process runs on
			}
			return ProcessLog{}, err
		}
		if ev, ok := ev.(*client.Output); ok {
			out.add(ev.Stream, ev.Data)
			log.Next = strconv.FormatUint(ev.Seq, 10)
			continue
		}
		if _, ok := ev.(*client.Gap); ok {
			out.truncated = true
			continue
		}
		if ev, ok := ev.(*client.Exit); ok {
			log.Running, log.ExitCode, log.Signal = false, &ev.ExitCode, string(ev.Signal)
			log.Next = st.LastEventID()
			break
		}
	}
	log.Stdout, log.Stderr, log.Truncated = text(out.stdout), text(out.stderr), out.truncated
	if log.Next == "" {
		log.Next = in.After
	}
	return log, nil
}

// streams gathers a command's output, each stream within maxToolOutput.
type streams struct {
	stdout, stderr []byte
	truncated      bool
}

func (s *streams) add(which client.OutputStream, data []byte) {
	b := &s.stdout
	if which == client.Stderr {
		b = &s.stderr
	}
	room := maxToolOutput - len(*b)
	if len(data) > room {
		data, s.truncated = data[:max(room, 0)], true
	}
	*b = append(*b, data...)
}

// text is output as a JSON string carries it: a model reads text, and a
// byte that is not UTF-8 would not survive the encoding anyway.
func text(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return string(bytes.ToValidUTF8(b, []byte("\uFFFD")))
}
