package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentos-gateway/agentos-gateway/api"
)

// CreateVM creates a VM; c.VM(vm.ID) makes the calls about it.
func (c *Client) CreateVM(ctx context.Context, req CreateVMRequest) (*VM, error) {
	out, _, err := call[VM](ctx, c, http.MethodPost, "/v1/vms", req, nil)
	return out, err
}

func (o ListVMsOptions) withCursor(c string) ListVMsOptions { o.Cursor = c; return o }

// selectorEscaper escapes what a label selector reads as a separator: a
// comma ends a requirement, and a backslash escapes the character after it.
var selectorEscaper = strings.NewReplacer(`\`, `\\`, ",", `\,`)

// ListVMs returns one page of the caller's VMs.
func (c *Client) ListVMs(ctx context.Context, opts ListVMsOptions) (*List[VM], error) {
	q := url.Values{}
	if opts.AllStates {
		q.Set("state", "all")
	} else {
		for _, st := range opts.States {
			q.Add("state", string(st))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(opts.Labels)) {
		q.Add("label", selectorEscaper.Replace(k)+"="+selectorEscaper.Replace(opts.Labels[k]))
	}
	for _, k := range slices.Sorted(maps.Keys(opts.NotLabels)) {
		q.Add("label", selectorEscaper.Replace(k)+"!="+selectorEscaper.Replace(opts.NotLabels[k]))
	}
	setPage(q, opts.Cursor, opts.Limit)
	return get[List[VM]](ctx, c, "/v1/vms", q)
}

// VMs iterates over all of the caller's VMs that opts selects, page by
// page.
func (c *Client) VMs(ctx context.Context, opts ListVMsOptions) iter.Seq2[VM, error] {
	return pages(ctx, opts, c.ListVMs)
}

// VM returns the handle of a VM. It makes no call: a VM that does not
// exist shows in the first call made through the handle (not_found).
func (c *Client) VM(id string) *VMHandle { return &VMHandle{c: c, id: id} }

// VMHandle makes the calls about one VM: its processes, shells, files and
// agent sessions. It is safe for concurrent use.
type VMHandle struct {
	c  *Client
	id string
}

// ID returns the VM's id.
func (v *VMHandle) ID() string { return v.id }

// Get returns the VM.
func (v *VMHandle) Get(ctx context.Context) (*VM, error) {
	return get[VM](ctx, v.c, vmPath(v.id), nil)
}

// Delete ends the VM, and is idempotent: a live VM is disposed and its final
// record returned; the record of a VM that already ended (disposed or lost)
// is removed, and Delete returns nil, nil; after that the VM is not found.
func (v *VMHandle) Delete(ctx context.Context) (*VM, error) {
	resp, err := v.c.send(ctx, request{method: http.MethodDelete, path: vmPath(v.id), accept: "application/json"})
	if err != nil {
		return nil, err
	}
	defer drainClose(resp.Body)
	if resp.StatusCode == http.StatusNoContent {
		return nil, nil
	}
	var out VM
	if err := decodeJSONBody(resp, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Update changes the VM's labels and idle settings, and returns its record.
func (v *VMHandle) Update(ctx context.Context, req UpdateVMRequest) (*VM, error) {
	out, _, err := call[VM](ctx, v.c, http.MethodPatch, vmPath(v.id), req, nil)
	return out, err
}

// Hibernate captures the running VM's files into the gateway's store and
// stops it, and returns its hibernated record: its processes and shells end,
// everything else about it stays, and any call that needs it (or Wake)
// runs it again under the same id. A hibernated VM is returned as it is.
func (v *VMHandle) Hibernate(ctx context.Context) (*VM, error) {
	out, _, err := call[VM](ctx, v.c, http.MethodPost, vmPath(v.id, "hibernate"), nil, nil)
	return out, err
}

// Wake runs a hibernated VM again, or restores a lost one from its
// checkpoint (VM.Restorable), and returns its ready record; a running VM is
// returned as it is.
func (v *VMHandle) Wake(ctx context.Context) (*VM, error) {
	out, _, err := call[VM](ctx, v.c, http.MethodPost, vmPath(v.id, "wake"), nil, nil)
	return out, err
}

// Checkpoint stores what changed in the running VM's files since its last
// checkpoint, and returns its record with CheckpointAt; a hibernated VM is
// returned as it is.
func (v *VMHandle) Checkpoint(ctx context.Context) (*VM, error) {
	out, _, err := call[VM](ctx, v.c, http.MethodPost, vmPath(v.id, "checkpoint"), nil, nil)
	return out, err
}

// Events opens the VM's event stream: *VMEvent values (state changes,
// limit warnings, process exits) and *Gap. When the VM ends, the stream
// ends with an *Error of code conflict, after the *VMEvent of its final
// state.
func (v *VMHandle) Events(ctx context.Context, opts StreamOptions) (*Stream, error) {
	return v.c.openStream(ctx, vmStream, vmPath(v.id, "events"), opts)
}

// FollowEvents iterates over the VM's events (see Events), reconnecting
// after a dropped connection without losing or repeating one. It ends when
// the VM ends (after the *VMEvent of its final state); an error is yielded
// last.
func (v *VMHandle) FollowEvents(ctx context.Context) iter.Seq2[Event, error] {
	return v.c.follow(ctx, v.Events, true)
}

// Exec runs a command to completion. With req.Stdout or req.Stderr set,
// the output is streamed into them as it comes; otherwise it is buffered
// in the result, within MaxOutputBytes. A timeout is an *Error with code
// deadline_exceeded. Accepts WithIdempotencyKey: a retry with the same key
// gets the first outcome and does not run the command again.
func (v *VMHandle) Exec(ctx context.Context, req ExecRequest, opts ...CallOption) (*ExecResult, error) {
	if req.Stdout != nil || req.Stderr != nil {
		return v.execInto(ctx, req, opts)
	}
	w, resp, err := call[api.ExecResult](ctx, v.c, http.MethodPost, vmPath(v.id, "exec"), req, collect(opts))
	if err != nil {
		return nil, err
	}
	return execResultOf(w, resp)
}

// execResultOf is the result of a buffered exec as it travelled.
func execResultOf(w *api.ExecResult, resp *http.Response) (*ExecResult, error) {
	res := &ExecResult{ExitStatus: ExitStatus{ExitCode: w.ExitCode, Signal: w.Signal}, Truncated: w.Truncated,
		Duration: time.Duration(w.DurationMs) * time.Millisecond, Replayed: replayed(resp)}
	var err error
	if res.Stdout, err = decodeData(w.Stdout, w.Encoding); err == nil {
		res.Stderr, err = decodeData(w.Stderr, w.Encoding)
	}
	if err != nil {
		return nil, fmt.Errorf("client: exec output: %w", err)
	}
	return res, nil
}

// execInto runs an exec as a stream and copies its output into the
// request's writers.
func (v *VMHandle) execInto(ctx context.Context, req ExecRequest, opts []CallOption) (*ExecResult, error) {
	s, err := v.ExecStream(ctx, req, opts...)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	for {
		ev, err := s.Next(ctx)
		if err != nil {
			return nil, err
		}
		switch ev := ev.(type) {
		case *Output:
			w := req.Stdout
			if ev.Stream == Stderr {
				w = req.Stderr
			}
			if w == nil {
				continue
			}
			if _, err := w.Write(ev.Data); err != nil {
				return nil, fmt.Errorf("client: exec output: %w", err)
			}
		case *Exit:
			return &ExecResult{ExitStatus: ev.ExitStatus, Truncated: ev.Truncated, Duration: ev.Duration, Replayed: s.replayed}, nil
		}
	}
}

// ExecStream runs a command and streams its output: *Output events, then a
// final *Exit (or an *Error from Next). Accepts WithIdempotencyKey.
func (v *VMHandle) ExecStream(ctx context.Context, req ExecRequest, opts ...CallOption) (*Stream, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("client: encode exec request: %w", err)
	}
	return v.c.openStreamBody(ctx, execStream, http.MethodPost, vmPath(v.id, "exec"), b, StreamOptions{}, collect(opts))
}

// Spawn starts a long-running process and returns its handle. Accepts
// WithIdempotencyKey: a retry returns the same process.
func (v *VMHandle) Spawn(ctx context.Context, req SpawnRequest, opts ...CallOption) (*ProcessHandle, error) {
	out, resp, err := call[Process](ctx, v.c, http.MethodPost, vmPath(v.id, "processes"), req, collect(opts))
	if err != nil {
		return nil, err
	}
	return &ProcessHandle{c: v.c, vm: v.id, pid: out.Pid, replayed: replayed(resp)}, nil
}

// Processes lists the VM's processes, exited ones included.
func (v *VMHandle) Processes(ctx context.Context) ([]Process, error) {
	l, err := get[List[Process]](ctx, v.c, vmPath(v.id, "processes"), nil)
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// Process returns the handle of one of the VM's processes. It makes no
// call.
func (v *VMHandle) Process(pid uint32) *ProcessHandle {
	return &ProcessHandle{c: v.c, vm: v.id, pid: pid}
}

// ProcessHandle makes the calls about one process. It is safe for
// concurrent use.
type ProcessHandle struct {
	c        *Client
	vm       string
	pid      uint32
	replayed bool
}

// Pid returns the process's guest pid.
func (p *ProcessHandle) Pid() uint32 { return p.pid }

// Replayed reports whether Spawn was answered from the record of an
// earlier call with the same Idempotency-Key (the process was not started
// again).
func (p *ProcessHandle) Replayed() bool { return p.replayed }

func (p *ProcessHandle) path(rest ...string) string {
	return vmPath(p.vm, append([]string{"processes", strconv.FormatUint(uint64(p.pid), 10)}, rest...)...)
}

// Get describes the process.
func (p *ProcessHandle) Get(ctx context.Context) (*Process, error) {
	return get[Process](ctx, p.c, p.path(), nil)
}

// Output opens the process's output stream: *Output events (the event id
// is the output's sequence number), a *Gap when opts.LastEventID is older
// than the gateway's buffer, and a final *Exit (or an *Error from Next when
// its end is unknowable). See Follow for reconnection.
func (p *ProcessHandle) Output(ctx context.Context, opts StreamOptions) (*Stream, error) {
	return p.c.openStream(ctx, processStream, p.path("output"), opts)
}

// Follow iterates over the process's output (see Output) until its *Exit,
// reconnecting with Last-Event-ID after a dropped connection so that no
// event is lost or repeated (a *Gap says when the gateway's buffer no
// longer held the resume point). An error is yielded last.
func (p *ProcessHandle) Follow(ctx context.Context) iter.Seq2[Event, error] {
	return p.c.follow(ctx, p.Output, false)
}

// WriteStdin writes raw bytes to the process's stdin.
func (p *ProcessHandle) WriteStdin(ctx context.Context, data []byte) error {
	return p.c.sendBytes(ctx, p.path("stdin"), data)
}

// CloseStdin closes the process's stdin.
func (p *ProcessHandle) CloseStdin(ctx context.Context) error {
	_, err := p.c.do(ctx, http.MethodPost, p.path("stdin", "close"), nil, nil, nil, nil)
	return err
}

// Signal sends the process a signal.
func (p *ProcessHandle) Signal(ctx context.Context, sig Signal) error {
	_, err := p.c.do(ctx, http.MethodPost, p.path("signal"), nil, map[string]Signal{"signal": sig}, nil, nil)
	return err
}

// Wait waits for the process to end, at most timeout (rounded up to a
// millisecond). A timeout <= 0 waits as long as ctx (and the gateway's
// server timeouts) allow. When the time runs out the gateway answers an
// *Error with code deadline_exceeded.
func (p *ProcessHandle) Wait(ctx context.Context, timeout time.Duration) (*ExitStatus, error) {
	q := url.Values{"timeoutMs": {strconv.FormatInt(ceilUnit(timeout, time.Millisecond), 10)}}
	return get[ExitStatus](ctx, p.c, p.path("wait"), q)
}

// sendBytes posts raw bytes (a process's stdin, a shell's keystrokes).
func (c *Client) sendBytes(ctx context.Context, path string, data []byte) error {
	resp, err := c.send(ctx, request{method: http.MethodPost, path: path,
		body: bytes.NewReader(data), ctype: "application/octet-stream", accept: "application/json"})
	if err != nil {
		return err
	}
	drainClose(resp.Body)
	return nil
}
