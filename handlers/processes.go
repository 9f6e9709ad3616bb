package handlers

import (
	"context"
	"io"
	"net/http"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
	"github.com/agentos-gateway/agentos-gateway/sse"
	"github.com/agentos-gateway/agentos-gateway/streamlog"
	"github.com/agentos-gateway/agentos-gateway/vms"
)

func (s *Server) spawn(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r, s.cfg.MaxBodyBytes)
	if err != nil {
		writeError(w, r, err)
		return
	}
	var req api.SpawnRequest
	if err := decodeJSONBytes(body, s.cfg.MaxBodyBytes, &req); err != nil {
		writeError(w, r, err)
		return
	}
	command, argv, err := resolveInvocation(req.Invocation)
	if err != nil {
		writeError(w, r, err)
		return
	}
	p := principalFrom(r.Context())
	vmID := pathParam(r, "vm")
	s.idempotent(w, r, body, http.StatusCreated, func(ctx context.Context) (any, error) {
		info, err := s.vms.Spawn(ctx, p.tenant, vmID, vms.SpawnRequest{Command: command, Argv: argv, Cwd: req.Cwd, Env: req.Env})
		if err != nil {
			return nil, err
		}
		return info, nil
	})
}

func (s *Server) listProcesses(w http.ResponseWriter, r *http.Request) {
	ps, err := s.vms.Processes(r.Context(), principalFrom(r.Context()).tenant.ID, pathParam(r, "vm"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.List[gateway.ProcessInfo]{Items: ps})
}

// process resolves {vm} and {pid} and holds the VM for the request.
func (s *Server) process(w http.ResponseWriter, r *http.Request) (*vms.Process, func(), bool) {
	pid, err := parseUintParam(r, "pid")
	if err != nil {
		writeError(w, r, err)
		return nil, nil, false
	}
	p, release, err := s.vms.Process(r.Context(), principalFrom(r.Context()).tenant.ID, pathParam(r, "vm"), uint32(pid))
	if err != nil {
		writeError(w, r, err)
		return nil, nil, false
	}
	return p, release, true
}

func (s *Server) getProcess(w http.ResponseWriter, r *http.Request) {
	p, release, ok := s.process(w, r)
	if !ok {
		return
	}
	defer release()
	writeJSON(w, http.StatusOK, p.Info())
}

// processOutput streams a process's output. Event ids are output sequence
// numbers; Last-Event-ID resumes from the process's bounded buffer, with a
// gap event when the point asked for was already dropped, and is refused
// past the last sequence produced. The stream ends with an exit event
// {exitCode, signal}, or error when the process's end is unknowable (VM
// disposed, sidecar died).
func (s *Server) processOutput(w http.ResponseWriter, r *http.Request) {
	after, _, err := sse.LastEventID(r)
	if err != nil {
		writeError(w, r, gateway.Errorf(gateway.CodeInvalidArgument, "Last-Event-ID must be a sequence number"))
		return
	}
	p, release, ok := s.process(w, r)
	if !ok {
		return
	}
	if exit, err := p.Exit(); exit != nil && err == nil && after == p.Output().LastSeq()+1 {
		// A resume after the exit event: nothing is left. 204 tells an
		// EventSource to stop reconnecting.
		release()
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if err := streamlog.CheckResume(after, p.Output().LastSeq(), "Last-Event-ID"); err != nil {
		release()
		writeError(w, r, err)
		return
	}
	s.sse.ServeFeed(w, r, after, sse.LogFeed[vms.Chunk]{Log: p.Output(), Render: outputEvent, OnEnd: func(last uint64, endErr error) []sse.Event {
		exit, err := p.Exit()
		if err == nil && exit == nil {
			err = endErr
		}
		if err != nil {
			return []sse.Event{sse.EndEvent(last, err)}
		}
		return []sse.Event{{ID: exitEventID(last), Event: "exit", Data: exitJSON(exit)}}
	}}, release)
}

func (s *Server) processStdin(w http.ResponseWriter, r *http.Request) {
	p, release, ok := s.process(w, r)
	if !ok {
		return
	}
	defer release()
	data, ok := s.readStdin(w, r)
	if !ok {
		return
	}
	if err := p.WriteStdin(r.Context(), data); err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.StdinWritten{Written: len(data)})
}

func (s *Server) processCloseStdin(w http.ResponseWriter, r *http.Request) {
	p, release, ok := s.process(w, r)
	if !ok {
		return
	}
	defer release()
	if err := p.CloseStdin(r.Context()); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) processSignal(w http.ResponseWriter, r *http.Request) {
	var req api.SignalRequest
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		writeError(w, r, err)
		return
	}
	p, release, ok := s.process(w, r)
	if !ok {
		return
	}
	defer release()
	if err := p.Signal(r.Context(), req.Signal); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) processWait(w http.ResponseWriter, r *http.Request) {
	ms, err := queryInt(r, "timeoutMs", 30000, 0, 3600000)
	if err != nil {
		writeError(w, r, err)
		return
	}
	p, release, ok := s.process(w, r)
	if !ok {
		return
	}
	defer release()
	exit, err := p.Wait(r.Context(), time.Duration(ms)*time.Millisecond)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, exit)
}

// readStdin reads a raw stdin or shell input body, bounded by what agentOS
// delivers reliably in one write (vms.MaxStdinWrite), or answers the
// problem and reports false.
func (s *Server) readStdin(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	limit := min(s.cfg.MaxBodyBytes, vms.MaxStdinWrite)
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		writeError(w, r, jsonError(err, limit))
		return nil, false
	}
	return data, true
}
