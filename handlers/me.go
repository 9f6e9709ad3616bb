package handlers

import (
	"net/http"

	"github.com/agentos-gateway/agentos-gateway/api"
)

// me answers who the caller's key belongs to, so that a client (the web
// console) can show the tenant's name and offer the admin pages only to the
// admin key.
func (s *Server) me(w http.ResponseWriter, r *http.Request) {
	p := principalFrom(r.Context())
	me := api.Me{Tenant: p.tenant, KeyID: p.key.ID, Admin: p.admin}
	if p.token != nil {
		t := tokenResource(*p.token)
		me.Token = &t
	}
	writeJSON(w, http.StatusOK, me)
}
