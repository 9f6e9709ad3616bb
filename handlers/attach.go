package handlers

import (
	"context"
	"net/http"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
	"github.com/agentos-gateway/agentos-gateway/attach"
	"github.com/agentos-gateway/agentos-gateway/vms"
)

// The attach routes: a WebSocket attached to a shell or a process, served
// by package attach (which documents the protocol) over the vms service.

// attachShell attaches a WebSocket to a shell.
func (s *Server) attachShell(w http.ResponseWriter, r *http.Request) {
	// The queries parameter (client or gateway: who answered the shell's
	// terminal queries) is deprecated and ignored: the lines of a shell run
	// without a terminal, so none is ever asked.
	sh, release, ok := s.shell(w, r)
	if !ok {
		return
	}
	defer release()
	attach.Serve(s.attach, w, r, attach.Target[vms.Chunk]{
		What:     "shell",
		Log:      sh.Output(),
		Controls: []string{"resize"},
		Frame:    func(c vms.Chunk) []byte { return c.Data },
		Input:    sh.Input,
		Control: func(ctx context.Context, f api.AttachControlFrame) error {
			return sh.Resize(ctx, f.Cols, f.Rows)
		},
		Exit: endStatus(sh.Exit),
	})
}

// attachProcess attaches a WebSocket to a process.
func (s *Server) attachProcess(w http.ResponseWriter, r *http.Request) {
	p, release, ok := s.process(w, r)
	if !ok {
		return
	}
	defer release()
	attach.Serve(s.attach, w, r, attach.Target[vms.Chunk]{
		What:     "process",
		Log:      p.Output(),
		Controls: []string{"close_stdin", "signal"},
		Frame: func(c vms.Chunk) []byte {
			prefix := attach.StreamStdout
			if c.Stream == "stderr" {
				prefix = attach.StreamStderr
			}
			return append([]byte{prefix}, c.Data...)
		},
		Input: p.WriteStdin,
		Control: func(ctx context.Context, f api.AttachControlFrame) error {
			if f.Type == "signal" {
				return p.Signal(ctx, f.Signal)
			}
			return p.CloseStdin(ctx)
		},
		Exit: endStatus(p.Exit),
	})
}

// endStatus adapts an Exit method: the status, or why it is unknowable
// (the error the log closed with when the target has none).
func endStatus(exit func() (*gateway.ExitStatus, error)) func(error) (*gateway.ExitStatus, error) {
	return func(endErr error) (*gateway.ExitStatus, error) {
		st, err := exit()
		if err == nil && st == nil {
			err = endErr
		}
		if err == nil && st == nil {
			err = gateway.Errorf(gateway.CodeInternal, "the end of the output came without an exit status")
		}
		return st, err
	}
}
