package handlers

import (
	"net/http"

	"github.com/agentos-gateway/agentos-gateway/api"
)

func (s *Server) listSoftware(w http.ResponseWriter, r *http.Request) {
	pkgs, err := s.vms.Software(r.Context(), principalFrom(r.Context()).tenant.ID, pathParam(r, "vm"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	items := make([]api.Software, len(pkgs))
	for i, p := range pkgs {
		items[i] = api.Software{Name: p.Name, Commands: p.Commands}
	}
	writeJSON(w, http.StatusOK, api.List[api.Software]{Items: items})
}

func (s *Server) linkSoftware(w http.ResponseWriter, r *http.Request) {
	tenant, vmID := principalFrom(r.Context()).tenant, pathParam(r, "vm")
	// Another tenant's VM is not found, whatever the body says.
	if err := s.vms.Usable(r.Context(), tenant.ID, vmID); err != nil {
		writeError(w, r, err)
		return
	}
	var req api.LinkSoftwareRequest
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		writeError(w, r, err)
		return
	}
	l, err := s.vms.LinkSoftware(r.Context(), tenant.ID, vmID, req.Package)
	if err != nil {
		writeError(w, r, err)
		return
	}
	status := http.StatusOK
	if l.Created {
		status = http.StatusCreated
	}
	writeJSON(w, status, api.LinkedSoftware{Package: l.Package, Name: l.Name, Commands: l.Commands, Agents: l.Agents})
}
