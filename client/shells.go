package client

import (
	"context"
	"iter"
	"net/http"

	"github.com/agentos-gateway/agentos-gateway/api"
)

// OpenShell opens an interactive shell in the VM and returns its handle.
func (v *VMHandle) OpenShell(ctx context.Context, req ShellRequest) (*ShellHandle, error) {
	out, _, err := call[api.ShellCreated](ctx, v.c, http.MethodPost, vmPath(v.id, "shells"), req, nil)
	if err != nil {
		return nil, err
	}
	return v.Shell(out.ShellID), nil
}

// Shells lists the VM's shells, ended ones included, oldest first.
func (v *VMHandle) Shells(ctx context.Context) ([]Shell, error) {
	l, err := get[List[Shell]](ctx, v.c, vmPath(v.id, "shells"), nil)
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// Shell returns the handle of one of the VM's shells. It makes no call.
func (v *VMHandle) Shell(id string) *ShellHandle {
	return &ShellHandle{c: v.c, vm: v.id, id: id}
}

// ShellHandle makes the calls about one shell. It is safe for concurrent
// use.
type ShellHandle struct {
	c      *Client
	vm, id string
}

// ID returns the shell's id.
func (s *ShellHandle) ID() string { return s.id }

func (s *ShellHandle) path(rest ...string) string {
	return vmPath(s.vm, append([]string{"shells", esc(s.id)}, rest...)...)
}

// Get describes the shell: its state, size and, once it ended, its exit
// status or why that is unknowable.
func (s *ShellHandle) Get(ctx context.Context) (*Shell, error) {
	return get[Shell](ctx, s.c, s.path(), nil)
}

// Input sends raw bytes (keystrokes) to the shell.
func (s *ShellHandle) Input(ctx context.Context, data []byte) error {
	return s.c.sendBytes(ctx, s.path("input"), data)
}

// Resize changes the shell's terminal size.
func (s *ShellHandle) Resize(ctx context.Context, cols, rows uint16) error {
	_, err := s.c.do(ctx, http.MethodPost, s.path("resize"), nil, map[string]uint16{"cols": cols, "rows": rows}, nil, nil)
	return err
}

// Output opens the shell's output stream: *Output events, a *Gap when
// opts.LastEventID is older than the gateway's buffer, then a final
// *ShellEnd (or an *Error from Next when the shell's VM ended).
func (s *ShellHandle) Output(ctx context.Context, opts StreamOptions) (*Stream, error) {
	return s.c.openStream(ctx, shellStream, s.path("output"), opts)
}

// Follow iterates over the shell's output (see Output) until its
// *ShellEnd, reconnecting after a dropped connection without losing or
// repeating output. An error is yielded last.
func (s *ShellHandle) Follow(ctx context.Context) iter.Seq2[Event, error] {
	return s.c.follow(ctx, s.Output, false)
}

// Close ends the shell if it runs and removes its record.
func (s *ShellHandle) Close(ctx context.Context) error {
	_, err := s.c.do(ctx, http.MethodDelete, s.path(), nil, nil, nil, nil)
	return err
}
