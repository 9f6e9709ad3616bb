package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
)

// applySessionSettings applies an update of a tenant's session settings:
// absent fields stay as they are; permissionDefault null goes back to the
// gateway's.
func (s *Server) applySessionSettings(u api.SessionSettingsUpdate, dst *gateway.SessionSettings) error {
	if u.RetentionDays != nil {
		dst.RetentionDays = *u.RetentionDays
	}
	switch {
	case len(u.PermissionDefault) == 0:
	case string(u.PermissionDefault) == "null":
		dst.PermissionDefault = nil
	default:
		const field = "sessions.permissionDefault"
		var d gateway.PermissionDefault
		dec := json.NewDecoder(bytes.NewReader(u.PermissionDefault))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&d); err != nil {
			return gateway.Errorf(gateway.CodeInvalidArgument, "%s must be {decision, timeoutSeconds, webhookUrl}", field).WithDetail("field", field)
		}
		if err := validateStruct(&d); err != nil {
			// Name the field by its path in the body, not in the object.
			var ge *gateway.Error
			if errors.As(err, &ge) {
				if f, ok := ge.Details["field"].(string); ok {
					ge.Details["field"] = field + "." + f
				}
			}
			return err
		}
		if err := s.checkPermissionWebhook(&d, field); err != nil {
			return err
		}
		dst.PermissionDefault = &d
	}
	return nil
}

// checkPermissionWebhook checks the webhook a default decision names against
// --webhook-allow; field is the default's path in the body.
func (s *Server) checkPermissionWebhook(d *gateway.PermissionDefault, field string) error {
	if d == nil || d.WebhookURL == "" {
		return nil
	}
	field += ".webhookUrl"
	if s.cfg.Bindings == nil {
		return gateway.Errorf(gateway.CodeInvalidArgument, "%s: this gateway makes no webhook calls", field).WithDetail("field", field)
	}
	if err := s.cfg.Bindings.CheckURL(d.WebhookURL); err != nil {
		return gateway.Errorf(gateway.CodeInvalidArgument, "%s %v", field, err).WithDetail("field", field)
	}
	return nil
}

// applyQuotas applies an update of a tenant's quotas: absent ones stay as
// they are.
func applyQuotas(q api.QuotasUpdate, dst *gateway.Quotas) {
	if q.MaxVMs != nil {
		dst.MaxVMs = *q.MaxVMs
	}
	if q.MaxProcesses != nil {
		dst.MaxProcesses = *q.MaxProcesses
	}
	if q.RequestsPerSecond != nil {
		dst.RequestsPerSecond = *q.RequestsPerSecond
	}
	if q.MaxSchedules != nil {
		dst.MaxSchedules = *q.MaxSchedules
	}
	if q.MaxSnapshotBytes != nil {
		dst.MaxSnapshotBytes = *q.MaxSnapshotBytes
	}
}

func (s *Server) createTenant(w http.ResponseWriter, r *http.Request) {
	var req api.CreateTenantRequest
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		writeError(w, r, err)
		return
	}
	t := gateway.Tenant{Name: req.Name, Isolated: req.Isolated}
	applyQuotas(req.Quotas, &t.Quotas)
	if err := s.applySessionSettings(req.Sessions, &t.Sessions); err != nil {
		writeError(w, r, err)
		return
	}
	t, err := s.store.CreateTenant(r.Context(), t)
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/tenants/"+t.ID)
	writeJSON(w, http.StatusCreated, t)
}

func (s *Server) listTenants(w http.ResponseWriter, r *http.Request) {
	limit, err := queryInt(r, "limit", 50, 1, 500)
	if err != nil {
		writeError(w, r, err)
		return
	}
	page, err := s.store.ListTenants(r.Context(), r.URL.Query().Get("cursor"), limit)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if page.Items == nil {
		page.Items = []gateway.Tenant{}
	}
	writeJSON(w, http.StatusOK, api.List[gateway.Tenant]{Items: page.Items, NextCursor: page.NextCursor})
}

func (s *Server) getTenant(w http.ResponseWriter, r *http.Request) {
	t, err := s.store.GetTenant(r.Context(), pathParam(r, "tenant"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

func (s *Server) updateTenant(w http.ResponseWriter, r *http.Request) {
	var req api.UpdateTenantRequest
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		writeError(w, r, err)
		return
	}
	t, err := s.store.UpdateTenant(r.Context(), pathParam(r, "tenant"), func(t *gateway.Tenant) error {
		if req.Name != nil {
			t.Name = *req.Name
		}
		if req.Isolated != nil {
			t.Isolated = *req.Isolated
		}
		applyQuotas(req.Quotas, &t.Quotas)
		return s.applySessionSettings(req.Sessions, &t.Sessions)
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

func (s *Server) createKey(w http.ResponseWriter, r *http.Request) {
	k, secret, err := s.store.CreateAPIKey(r.Context(), pathParam(r, "tenant"), false)
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, api.APIKey{ID: k.ID, TenantID: k.TenantID, Prefix: k.Prefix, CreatedAt: k.CreatedAt.UTC(), Key: secret})
}

func (s *Server) listKeys(w http.ResponseWriter, r *http.Request) {
	tenantID := pathParam(r, "tenant")
	if _, err := s.store.GetTenant(r.Context(), tenantID); err != nil {
		writeError(w, r, err)
		return
	}
	keys, err := s.store.ListAPIKeys(r.Context(), tenantID)
	if err != nil {
		writeError(w, r, err)
		return
	}
	items := make([]api.APIKey, 0, len(keys))
	for _, k := range keys {
		items = append(items, api.APIKey{ID: k.ID, TenantID: k.TenantID, Prefix: k.Prefix, CreatedAt: k.CreatedAt.UTC()})
	}
	writeJSON(w, http.StatusOK, api.List[api.APIKey]{Items: items})
}

func (s *Server) deleteKey(w http.ResponseWriter, r *http.Request) {
	if err := s.store.DeleteAPIKey(r.Context(), pathParam(r, "tenant"), pathParam(r, "key")); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) listSidecars(w http.ResponseWriter, r *http.Request) {
	scs := s.pool.Sidecars()
	restarts := s.pool.Stats().Restarts
	items := make([]api.Sidecar, 0, len(scs))
	for _, sc := range scs {
		tenants := sc.Tenants
		if tenants == nil {
			tenants = []string{}
		}
		items = append(items, api.Sidecar{ID: sc.ID, Pid: sc.Pid, State: sc.State, VMCount: sc.Holds, Tenants: tenants,
			Isolated: sc.Isolated, RSSBytes: sc.RSS, Restarts: int64(restarts), StartedAt: sc.StartedAt.UTC()})
	}
	writeJSON(w, http.StatusOK, api.List[api.Sidecar]{Items: items})
}
