package handlers

import (
	"net/http"

	"github.com/agentos-gateway/agentos-gateway/api"
	"github.com/agentos-gateway/agentos-gateway/vms"
	"github.com/agentos-gateway/agentos-gateway/vmspec"
)

func mountResource(m vms.Mount) api.Mount {
	return api.Mount{Path: m.Path, Driver: string(m.Driver), HostPath: m.HostPath, ReadOnly: m.ReadOnly}
}

func (s *Server) listMounts(w http.ResponseWriter, r *http.Request) {
	mounts, err := s.vms.Mounts(r.Context(), principalFrom(r.Context()).tenant.ID, pathParam(r, "vm"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	items := make([]api.Mount, len(mounts))
	for i, m := range mounts {
		items[i] = mountResource(m)
	}
	writeJSON(w, http.StatusOK, api.List[api.Mount]{Items: items})
}

func (s *Server) createMount(w http.ResponseWriter, r *http.Request) {
	tenant, vmID := principalFrom(r.Context()).tenant, pathParam(r, "vm")
	// Another tenant's VM is not found, whatever the body says.
	if err := s.vms.Usable(r.Context(), tenant.ID, vmID); err != nil {
		writeError(w, r, err)
		return
	}
	var req api.CreateMountRequest
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		writeError(w, r, err)
		return
	}
	m, err := s.vms.Mount(r.Context(), tenant.ID, vmID, vms.MountSpec{
		Path: req.Path, Driver: vmspec.MountDriver(req.Driver), HostPath: req.HostPath, ReadOnly: req.ReadOnly,
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, mountResource(m))
}

func (s *Server) deleteMount(w http.ResponseWriter, r *http.Request) {
	err := s.vms.Unmount(r.Context(), principalFrom(r.Context()).tenant.ID, pathParam(r, "vm"), r.URL.Query().Get("path"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
