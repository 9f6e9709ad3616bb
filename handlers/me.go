package handlers

import (
	"net/http"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// meJSON is who the caller is: the tenant of its key, the key, and whether
// it is the admin key.
type meJSON struct {
	Tenant gateway.Tenant `json:"tenant"`
	KeyID  string         `json:"keyId"`
	Admin  bool           `json:"admin"`
}

// me answers who the caller's key belongs to, so that a client (the web
// console) can show the tenant's name and offer the admin pages only to the
// admin key.
func (s *Server) me(w http.ResponseWriter, r *http.Request) {
	p := principalFrom(r.Context())
	writeJSON(w, http.StatusOK, meJSON{Tenant: p.tenant, KeyID: p.key.ID, Admin: p.admin})
}
