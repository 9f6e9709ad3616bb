package handlers

import (
	"encoding/json"
	"net/http"
	"strconv"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
	"github.com/agentos-gateway/agentos-gateway/sse"
	"github.com/agentos-gateway/agentos-gateway/streamlog"
	"github.com/agentos-gateway/agentos-gateway/vms"
)

func (s *Server) openShell(w http.ResponseWriter, r *http.Request) {
	var req api.OpenShellRequest
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		writeError(w, r, err)
		return
	}
	if req.Cols == 0 {
		req.Cols = 80
	}
	if req.Rows == 0 {
		req.Rows = 24
	}
	sh, err := s.vms.OpenShell(r.Context(), principalFrom(r.Context()).tenant, pathParam(r, "vm"), vms.ShellRequest{
		Shell: req.Shell, Cols: req.Cols, Rows: req.Rows, Cwd: req.Cwd, Env: req.Env,
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, api.ShellCreated{ShellID: sh.ID()})
}

func (s *Server) listShells(w http.ResponseWriter, r *http.Request) {
	shs, err := s.vms.Shells(r.Context(), principalFrom(r.Context()).tenant.ID, pathParam(r, "vm"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.List[gateway.ShellInfo]{Items: shs})
}

func (s *Server) getShell(w http.ResponseWriter, r *http.Request) {
	sh, release, ok := s.shell(w, r)
	if !ok {
		return
	}
	defer release()
	writeJSON(w, http.StatusOK, sh.Info())
}

func (s *Server) shell(w http.ResponseWriter, r *http.Request) (*vms.Shell, func(), bool) {
	sh, release, err := s.vms.Shell(r.Context(), principalFrom(r.Context()).tenant.ID, pathParam(r, "vm"), pathParam(r, "shell"))
	if err != nil {
		writeError(w, r, err)
		return nil, nil, false
	}
	return sh, release, true
}

func (s *Server) shellInput(w http.ResponseWriter, r *http.Request) {
	sh, release, ok := s.shell(w, r)
	if !ok {
		return
	}
	defer release()
	data, ok := s.readStdin(w, r)
	if !ok {
		return
	}
	if err := sh.Input(r.Context(), data); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) shellResize(w http.ResponseWriter, r *http.Request) {
	var req api.ResizeRequest
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		writeError(w, r, err)
		return
	}
	sh, release, ok := s.shell(w, r)
	if !ok {
		return
	}
	defer release()
	if err := sh.Resize(r.Context(), req.Cols, req.Rows); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// shellOutput streams a shell's output. Event ids are output sequence
// numbers; Last-Event-ID resumes from the shell's bounded buffer, with a gap
// event when the point asked for was already dropped. The stream ends with
// an end event carrying the exit status {exitCode, signal}, or error when
// the shell's end is unknowable (VM disposed, sidecar died).
func (s *Server) shellOutput(w http.ResponseWriter, r *http.Request) {
	after, _, err := sse.LastEventID(r)
	if err != nil {
		writeError(w, r, gateway.Errorf(gateway.CodeInvalidArgument, "Last-Event-ID must be a sequence number"))
		return
	}
	sh, release, ok := s.shell(w, r)
	if !ok {
		return
	}
	if err := streamlog.CheckResume(after, sh.Output().LastSeq(), "Last-Event-ID"); err != nil {
		release()
		writeError(w, r, err)
		return
	}
	s.sse.ServeFeed(w, r, after, sse.LogFeed[vms.Chunk]{Log: sh.Output(), Render: outputEvent, OnEnd: shellEnd(sh.Exit)}, release)
}

// shellEnd renders the end of a shell's output: end with the exit status,
// or error when the end is unknowable.
func shellEnd(exit func() (*gateway.ExitStatus, error)) func(last uint64, endErr error) []sse.Event {
	return func(last uint64, endErr error) []sse.Event {
		st, err := endStatus(exit)(endErr)
		if err != nil {
			return []sse.Event{sse.EndEvent(last, err)}
		}
		return []sse.Event{{ID: strconv.FormatUint(last, 10), Event: "end", Data: exitJSON(st)}}
	}
}

// exitJSON is an exit status as the streams carry it: signal is null when
// the program exited by itself.
func exitJSON(exit *gateway.ExitStatus) []byte {
	b, _ := json.Marshal(api.ProcessExitEvent{ExitCode: exit.ExitCode, Signal: signalOrNull(exit.Signal)})
	return b
}

// signalOrNull is a signal name as the exit events carry it: null when
// there is none.
func signalOrNull(sig gateway.Signal) *gateway.Signal {
	if sig == "" {
		return nil
	}
	return &sig
}

// closeShell kills a running shell or removes the record of an ended one.
func (s *Server) closeShell(w http.ResponseWriter, r *http.Request) {
	if err := s.vms.DeleteShell(r.Context(), principalFrom(r.Context()).tenant.ID, pathParam(r, "vm"), pathParam(r, "shell")); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
