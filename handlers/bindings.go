package handlers

import (
	"net/http"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
	"github.com/agentos-gateway/agentos-gateway/webhook"
)

func errNoBindings() error {
	return gateway.Errorf(gateway.CodeUnavailable, "host bindings do not run on this gateway")
}

// checkBindings checks the bindings of a VM create body, before any VM is
// made for it.
func (s *Server) checkBindings(b *gateway.Bindings) error {
	if b == nil {
		return nil
	}
	if s.cfg.Bindings == nil {
		return errNoBindings()
	}
	return s.cfg.Bindings.Validate(b, "bindings")
}

func (s *Server) getBindings(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Bindings == nil {
		writeError(w, r, errNoBindings())
		return
	}
	b, err := s.cfg.Bindings.Get(r.Context(), principalFrom(r.Context()).tenant.ID, pathParam(r, "vm"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, b)
}

func (s *Server) putBindings(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Bindings == nil {
		writeError(w, r, errNoBindings())
		return
	}
	var req gateway.Bindings
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		writeError(w, r, err)
		return
	}
	b, err := s.cfg.Bindings.Put(r.Context(), principalFrom(r.Context()).tenant.ID, pathParam(r, "vm"), req)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, b)
}

func (s *Server) webhookSecret(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Bindings == nil {
		writeError(w, r, errNoBindings())
		return
	}
	writeJSON(w, http.StatusOK, api.WebhookSecret{
		Secret:          s.cfg.Bindings.TenantSecret(principalFrom(r.Context()).tenant.ID),
		SignatureHeader: webhook.HeaderSignature, TimestampHeader: webhook.HeaderTimestamp,
	})
}
