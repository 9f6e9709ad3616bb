package handlers

import (
	"net/http"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
	"github.com/agentos-gateway/agentos-gateway/snapshots"
)

// snapshotService returns the snapshots service, or answers 503 when this
// gateway keeps none.
func (s *Server) snapshotService(w http.ResponseWriter, r *http.Request) (*snapshots.Service, bool) {
	if s.cfg.Snapshots == nil {
		writeError(w, r, gateway.Errorf(gateway.CodeUnavailable, "this gateway keeps no snapshots"))
		return nil, false
	}
	return s.cfg.Snapshots, true
}

func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request) {
	svc, ok := s.snapshotService(w, r)
	if !ok {
		return
	}
	snap, err := svc.Create(r.Context(), principalFrom(r.Context()).tenant, pathParam(r, "vm"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/snapshots/"+snap.ID)
	writeJSON(w, http.StatusCreated, snap)
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	svc, ok := s.snapshotService(w, r)
	if !ok {
		return
	}
	limit, err := queryInt(r, "limit", 50, 1, 500)
	if err != nil {
		writeError(w, r, err)
		return
	}
	q := r.URL.Query()
	page, err := svc.List(r.Context(), gateway.SnapshotFilter{TenantID: principalFrom(r.Context()).tenant.ID, VMID: q.Get("vm"), Cursor: q.Get("cursor"), Limit: limit})
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.List[gateway.Snapshot]{Items: page.Items, NextCursor: page.NextCursor})
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) {
	svc, ok := s.snapshotService(w, r)
	if !ok {
		return
	}
	snap, err := svc.Get(r.Context(), principalFrom(r.Context()).tenant.ID, pathParam(r, "snapshot"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, snap)
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	svc, ok := s.snapshotService(w, r)
	if !ok {
		return
	}
	if err := svc.Delete(r.Context(), principalFrom(r.Context()).tenant.ID, pathParam(r, "snapshot")); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// forkVM creates VMs from a fresh snapshot of the VM: the files are
// carried over, the processes are not.
func (s *Server) forkVM(w http.ResponseWriter, r *http.Request) {
	var req api.ForkRequest
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		writeError(w, r, err)
		return
	}
	svc, ok := s.snapshotService(w, r)
	if !ok {
		return
	}
	created, err := svc.Fork(r.Context(), principalFrom(r.Context()).tenant, pathParam(r, "vm"), req.Count)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := api.Forked{VMs: make([]api.VM, len(created))}
	for i, vm := range created {
		out.VMs[i] = vmResource(vm)
	}
	writeJSON(w, http.StatusCreated, out)
}
