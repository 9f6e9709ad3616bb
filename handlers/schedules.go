package handlers

import (
	"errors"
	"net/http"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
)

// scheduleDomain is the schedule a create body asks for; the exec's command
// forms are checked as POST /exec checks them.
func scheduleDomain(vmID string, req api.CreateScheduleRequest) (gateway.Schedule, error) {
	out := gateway.Schedule{VMID: vmID, Cron: req.Cron, Timezone: req.Timezone, Overlap: req.Overlap}
	if e := req.Action.Exec; e != nil {
		if _, _, err := resolveInvocation(e.Invocation); err != nil {
			// The same mistakes as in an exec body, named where they are in
			// this one.
			var ge *gateway.Error
			if errors.As(err, &ge) {
				if f, ok := ge.Details["field"].(string); ok {
					ge.WithDetail("field", "action.exec."+f)
				}
			}
			return out, err
		}
		out.Exec = &gateway.ScheduleExec{Command: e.Command, Args: e.Args, Argv: e.Argv, Cwd: e.Cwd, Env: e.Env,
			Timeout: time.Duration(e.TimeoutMs) * time.Millisecond}
	}
	if p := req.Action.Prompt; p != nil {
		out.Prompt = &gateway.SchedulePrompt{Session: p.Session, Content: p.Content}
	}
	return out, nil
}

// scheduleResource is a schedule as the API shows it.
func scheduleResource(s gateway.Schedule) api.Schedule {
	out := api.Schedule{ID: s.ID, VMID: s.VMID, Cron: s.Cron, Timezone: s.Timezone, Overlap: s.Overlap, CreatedAt: s.CreatedAt.UTC()}
	if e := s.Exec; e != nil {
		out.Action.Exec = &api.ScheduleExec{Invocation: api.Invocation{Command: e.Command, Args: e.Args, Argv: e.Argv, Cwd: e.Cwd, Env: e.Env},
			TimeoutMs: e.Timeout.Milliseconds()}
	}
	if p := s.Prompt; p != nil {
		out.Action.Prompt = &api.SchedulePrompt{Session: p.Session, Content: p.Content}
	}
	return out
}

func runResource(r gateway.ScheduleRun) api.ScheduleRun {
	return api.ScheduleRun{ID: r.ID, ScheduleID: r.ScheduleID, StartedAt: r.StartedAt.UTC(), EndedAt: r.EndedAt.UTC(),
		Outcome: r.Outcome, ExitCode: r.ExitCode, Signal: r.Signal, Stdout: r.Stdout, Stderr: r.Stderr, Truncated: r.Truncated, Error: r.Error}
}

func (s *Server) createSchedule(w http.ResponseWriter, r *http.Request) {
	var req api.CreateScheduleRequest
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		writeError(w, r, err)
		return
	}
	vmID := pathParam(r, "vm")
	tenant := principalFrom(r.Context()).tenant
	// Another tenant's VM is not found, whatever the body says.
	if err := s.vms.Usable(r.Context(), tenant.ID, vmID); err != nil {
		writeError(w, r, err)
		return
	}
	sc, err := scheduleDomain(vmID, req)
	if err != nil {
		writeError(w, r, err)
		return
	}
	sc, err = s.schedules.Create(r.Context(), tenant, sc)
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/vms/"+vmID+"/schedules/"+sc.ID)
	writeJSON(w, http.StatusCreated, scheduleResource(sc))
}

func (s *Server) listSchedules(w http.ResponseWriter, r *http.Request) {
	limit, err := queryInt(r, "limit", 50, 1, 500)
	if err != nil {
		writeError(w, r, err)
		return
	}
	page, err := s.schedules.List(r.Context(), principalFrom(r.Context()).tenant.ID, pathParam(r, "vm"), r.URL.Query().Get("cursor"), limit)
	if err != nil {
		writeError(w, r, err)
		return
	}
	items := make([]api.Schedule, len(page.Items))
	for i, sc := range page.Items {
		items[i] = scheduleResource(sc)
	}
	writeJSON(w, http.StatusOK, api.List[api.Schedule]{Items: items, NextCursor: page.NextCursor})
}

// schedulePath is the tenant and the {vm} and {schedule} of a request.
func schedulePath(r *http.Request) (tenantID, vmID, id string) {
	return principalFrom(r.Context()).tenant.ID, pathParam(r, "vm"), pathParam(r, "schedule")
}

func (s *Server) getSchedule(w http.ResponseWriter, r *http.Request) {
	tenantID, vmID, id := schedulePath(r)
	sc, err := s.schedules.Get(r.Context(), tenantID, vmID, id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, scheduleResource(sc))
}

func (s *Server) deleteSchedule(w http.ResponseWriter, r *http.Request) {
	tenantID, vmID, id := schedulePath(r)
	if err := s.schedules.Delete(r.Context(), tenantID, vmID, id); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) listScheduleRuns(w http.ResponseWriter, r *http.Request) {
	limit, err := queryInt(r, "limit", 50, 1, 500)
	if err != nil {
		writeError(w, r, err)
		return
	}
	tenantID, vmID, id := schedulePath(r)
	page, err := s.schedules.Runs(r.Context(), tenantID, vmID, id, r.URL.Query().Get("cursor"), limit)
	if err != nil {
		writeError(w, r, err)
		return
	}
	items := make([]api.ScheduleRun, len(page.Items))
	for i, run := range page.Items {
		items[i] = runResource(run)
	}
	writeJSON(w, http.StatusOK, api.List[api.ScheduleRun]{Items: items, NextCursor: page.NextCursor})
}
