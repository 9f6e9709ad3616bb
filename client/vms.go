package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"
)

// CreateVM creates a VM (POST /v1/vms).
func (c *Client) CreateVM(ctx context.Context, req CreateVMRequest) (*VM, error) {
	var vm VM
	if _, err := c.do(ctx, http.MethodPost, "/v1/vms", nil, req, &vm, nil); err != nil {
		return nil, err
	}
	return &vm, nil
}

// GetVM returns a VM.
func (c *Client) GetVM(ctx context.Context, vm string) (*VM, error) {
	var out VM
	if _, err := c.do(ctx, http.MethodGet, vmPath(vm), nil, nil, &out, nil); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListVMs lists the caller's VMs, one page at a time.
func (c *Client) ListVMs(ctx context.Context, opts ListVMsOptions) (*List[VM], error) {
	q := url.Values{}
	switch {
	case opts.AllStates:
		q.Set("state", "all")
	default:
		if opts.State != "" {
			q.Add("state", string(opts.State))
		}
		for _, st := range opts.States {
			q.Add("state", string(st))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(opts.Labels)) {
		q.Add("label", k+"="+opts.Labels[k])
	}
	for _, k := range slices.Sorted(maps.Keys(opts.NotLabels)) {
		q.Add("label", k+"!="+opts.NotLabels[k])
	}
	setPage(q, opts.Cursor, opts.Limit)
	var out List[VM]
	if _, err := c.do(ctx, http.MethodGet, "/v1/vms", q, nil, &out, nil); err != nil {
		return nil, err
	}
	return &out, nil
}

func setPage(q url.Values, cursor string, limit int) {
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
}

// DeleteVM ends a VM, and is idempotent: a live VM is disposed and its final
// record returned; the record of a VM that already ended (disposed or lost)
// is removed, and DeleteVM returns nil, nil; after that the VM is not found.
func (c *Client) DeleteVM(ctx context.Context, vm string) (*VM, error) {
	resp, err := c.send(ctx, request{method: http.MethodDelete, path: vmPath(vm), accept: "application/json"})
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

// VMEvents streams a VM's events (state changes, limit warnings, process
// exits); decode their data with Event.VMEvent. The stream ends with an
// "end" or "error" event when the VM ends.
func (c *Client) VMEvents(ctx context.Context, vm string, opts StreamOptions) (*Stream, error) {
	return c.openStream(ctx, http.MethodGet, vmPath(vm, "events"), nil, opts)
}

// Exec runs a command to completion (POST /v1/vms/{vm}/exec). A timeout
// answers an *Error with code deadline_exceeded. Accepts WithIdempotencyKey.
func (c *Client) Exec(ctx context.Context, vm string, req ExecRequest, opts ...CallOption) (*ExecResult, error) {
	var out ExecResult
	resp, err := c.do(ctx, http.MethodPost, vmPath(vm, "exec"), nil, req, &out, collect(opts))
	if err != nil {
		return nil, err
	}
	out.Replayed = resp.Header.Get("Idempotent-Replayed") == "true"
	return &out, nil
}

// ExecStream runs a command and streams its output: "stdout" and "stderr"
// events (Event.Output), then "exit" (Event.Exit) or "error". The gateway
// refuses an Idempotency-Key on a streamed exec.
func (c *Client) ExecStream(ctx context.Context, vm string, req ExecRequest) (*Stream, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("client: encode exec request: %w", err)
	}
	return c.openStreamBody(ctx, http.MethodPost, vmPath(vm, "exec"), nil, b, StreamOptions{})
}

// SpawnProcess starts a long-running process. Accepts WithIdempotencyKey:
// a retry returns the same pid.
func (c *Client) SpawnProcess(ctx context.Context, vm string, req SpawnRequest, opts ...CallOption) (*Process, error) {
	var out Process
	resp, err := c.do(ctx, http.MethodPost, vmPath(vm, "processes"), nil, req, &out, collect(opts))
	if err != nil {
		return nil, err
	}
	out.Replayed = resp.Header.Get("Idempotent-Replayed") == "true"
	return &out, nil
}

// ListProcesses lists a VM's processes, exited ones included.
func (c *Client) ListProcesses(ctx context.Context, vm string) (*List[Process], error) {
	var out List[Process]
	if _, err := c.do(ctx, http.MethodGet, vmPath(vm, "processes"), nil, nil, &out, nil); err != nil {
		return nil, err
	}
	return &out, nil
}

func pidPath(vm string, pid uint32, rest ...string) string {
	return vmPath(vm, append([]string{"processes", strconv.FormatUint(uint64(pid), 10)}, rest...)...)
}

// GetProcess describes one process.
func (c *Client) GetProcess(ctx context.Context, vm string, pid uint32) (*Process, error) {
	var out Process
	if _, err := c.do(ctx, http.MethodGet, pidPath(vm, pid), nil, nil, &out, nil); err != nil {
		return nil, err
	}
	return &out, nil
}

// ProcessOutput streams a process's output: "stdout"/"stderr" events
// (Event.Output; the event id is the output sequence number), a "gap" event
// (Event.Gap) when opts.LastEventID is older than the gateway's buffer, and
// a final "exit" (Event.Exit) or "error" event. See FollowProcessOutput for
// reconnection.
func (c *Client) ProcessOutput(ctx context.Context, vm string, pid uint32, opts StreamOptions) (*Stream, error) {
	return c.openStream(ctx, http.MethodGet, pidPath(vm, pid, "output"), nil, opts)
}

// WriteStdin writes raw bytes to a process's stdin.
func (c *Client) WriteStdin(ctx context.Context, vm string, pid uint32, data []byte) error {
	resp, err := c.send(ctx, request{method: http.MethodPost, path: pidPath(vm, pid, "stdin"),
		body: bytes.NewReader(data), ctype: "application/octet-stream", accept: "application/json"})
	if err != nil {
		return err
	}
	drainClose(resp.Body)
	return nil
}

// CloseStdin closes a process's stdin.
func (c *Client) CloseStdin(ctx context.Context, vm string, pid uint32) error {
	_, err := c.do(ctx, http.MethodPost, pidPath(vm, pid, "stdin", "close"), nil, nil, nil, nil)
	return err
}

// Signal sends a signal by name, such as "SIGTERM".
func (c *Client) Signal(ctx context.Context, vm string, pid uint32, signal string) error {
	_, err := c.do(ctx, http.MethodPost, pidPath(vm, pid, "signal"), nil, map[string]string{"signal": signal}, nil, nil)
	return err
}

// WaitProcess waits for a process to end, at most timeout (rounded up to a
// millisecond). A timeout <= 0 waits as long as ctx (and the gateway's
// server timeouts) allow. When the time runs out the gateway answers an
// *Error with code deadline_exceeded.
func (c *Client) WaitProcess(ctx context.Context, vm string, pid uint32, timeout time.Duration) (*ExitStatus, error) {
	ms := int64(0)
	if timeout > 0 {
		ms = int64((timeout + time.Millisecond - 1) / time.Millisecond)
	}
	q := url.Values{"timeoutMs": {strconv.FormatInt(ms, 10)}}
	var out ExitStatus
	if _, err := c.do(ctx, http.MethodGet, pidPath(vm, pid, "wait"), q, nil, &out, nil); err != nil {
		return nil, err
	}
	return &out, nil
}

// OpenShell opens an interactive shell and returns its id.
func (c *Client) OpenShell(ctx context.Context, vm string, req ShellRequest) (string, error) {
	var out struct {
		ShellID string `json:"shellId"`
	}
	if _, err := c.do(ctx, http.MethodPost, vmPath(vm, "shells"), nil, req, &out, nil); err != nil {
		return "", err
	}
	return out.ShellID, nil
}

func shellPath(vm, shell string, rest ...string) string {
	return vmPath(vm, append([]string{"shells", esc(shell)}, rest...)...)
}

// ShellInput sends raw bytes (keystrokes) to a shell.
func (c *Client) ShellInput(ctx context.Context, vm, shell string, data []byte) error {
	resp, err := c.send(ctx, request{method: http.MethodPost, path: shellPath(vm, shell, "input"),
		body: bytes.NewReader(data), ctype: "application/octet-stream", accept: "application/json"})
	if err != nil {
		return err
	}
	drainClose(resp.Body)
	return nil
}

// ResizeShell changes a shell's terminal size.
func (c *Client) ResizeShell(ctx context.Context, vm, shell string, cols, rows uint16) error {
	_, err := c.do(ctx, http.MethodPost, shellPath(vm, shell, "resize"), nil, map[string]uint16{"cols": cols, "rows": rows}, nil, nil)
	return err
}

// ShellOutput streams a shell's output ("stdout" events, then "end" with the
// exit status, see Event.ShellEnd, or "error").
func (c *Client) ShellOutput(ctx context.Context, vm, shell string, opts StreamOptions) (*Stream, error) {
	return c.openStream(ctx, http.MethodGet, shellPath(vm, shell, "output"), nil, opts)
}

// ListShells lists a VM's shells, ended ones included, oldest first.
func (c *Client) ListShells(ctx context.Context, vm string) (*List[Shell], error) {
	var out List[Shell]
	if _, err := c.do(ctx, http.MethodGet, vmPath(vm, "shells"), nil, nil, &out, nil); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetShell describes a shell: its state, size and, once it ended, its exit
// status or why that is unknowable.
func (c *Client) GetShell(ctx context.Context, vm, shell string) (*Shell, error) {
	var out Shell
	if _, err := c.do(ctx, http.MethodGet, shellPath(vm, shell), nil, nil, &out, nil); err != nil {
		return nil, err
	}
	return &out, nil
}

// CloseShell ends a running shell and removes its record, or removes the
// record of one that ended.
func (c *Client) CloseShell(ctx context.Context, vm, shell string) error {
	_, err := c.do(ctx, http.MethodDelete, shellPath(vm, shell), nil, nil, nil, nil)
	return err
}
