package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

type quotasJSON struct {
	MaxVMs            *int     `json:"maxVms" validate:"omitempty,gte=0,lte=100000"`
	MaxProcesses      *int     `json:"maxProcesses" validate:"omitempty,gte=0,lte=1000000"`
	RequestsPerSecond *float64 `json:"requestsPerSecond" validate:"omitempty,gte=0,lte=100000"`
}

type createTenantRequest struct {
	Name     string              `json:"name" validate:"required,min=1,max=128"`
	Isolated bool                `json:"isolated"`
	Quotas   quotasJSON          `json:"quotas"`
	Sessions sessionSettingsJSON `json:"sessions"`
}

// sessionSettingsJSON updates a tenant's session settings: absent fields
// stay as they are; permissionDefault null goes back to the gateway's.
type sessionSettingsJSON struct {
	RetentionDays     *int            `json:"retentionDays" validate:"omitempty,gte=0,lte=36500"`
	PermissionDefault json.RawMessage `json:"permissionDefault"`
}

func (u sessionSettingsJSON) apply(dst *gateway.SessionSettings) error {
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
			return gateway.Errorf(gateway.CodeInvalidArgument, "%s must be {decision, timeoutSeconds}", field).WithDetail("field", field)
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
		dst.PermissionDefault = &d
	}
	return nil
}

func (q quotasJSON) apply(dst *gateway.Quotas) {
	if q.MaxVMs != nil {
		dst.MaxVMs = *q.MaxVMs
	}
	if q.MaxProcesses != nil {
		dst.MaxProcesses = *q.MaxProcesses
	}
	if q.RequestsPerSecond != nil {
		dst.RequestsPerSecond = *q.RequestsPerSecond
	}
}

func (s *Server) createTenant(w http.ResponseWriter, r *http.Request) {
	var req createTenantRequest
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		writeError(w, r, err)
		return
	}
	t := gateway.Tenant{Name: req.Name, Isolated: req.Isolated}
	req.Quotas.apply(&t.Quotas)
	if err := req.Sessions.apply(&t.Sessions); err != nil {
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
	writeJSON(w, http.StatusOK, listJSON[gateway.Tenant]{Items: page.Items, NextCursor: page.NextCursor})
}

func (s *Server) getTenant(w http.ResponseWriter, r *http.Request) {
	t, err := s.store.GetTenant(r.Context(), pathParam(r, "tenant"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

type updateTenantRequest struct {
	Name     *string             `json:"name" validate:"omitempty,min=1,max=128"`
	Isolated *bool               `json:"isolated"`
	Quotas   quotasJSON          `json:"quotas"`
	Sessions sessionSettingsJSON `json:"sessions"`
}

func (s *Server) updateTenant(w http.ResponseWriter, r *http.Request) {
	var req updateTenantRequest
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
		req.Quotas.apply(&t.Quotas)
		return req.Sessions.apply(&t.Sessions)
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

// keyJSON is an API key as listed: never the secret.
type keyJSON struct {
	ID        string `json:"id"`
	TenantID  string `json:"tenantId"`
	Prefix    string `json:"prefix"`
	CreatedAt string `json:"createdAt"`
	// Key is the secret, present only in the answer that created it.
	Key string `json:"key,omitempty"`
}

func (s *Server) createKey(w http.ResponseWriter, r *http.Request) {
	k, secret, err := s.store.CreateAPIKey(r.Context(), pathParam(r, "tenant"), false)
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, keyJSON{ID: k.ID, TenantID: k.TenantID, Prefix: k.Prefix, CreatedAt: rfc3339(k.CreatedAt), Key: secret})
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
	items := make([]keyJSON, 0, len(keys))
	for _, k := range keys {
		items = append(items, keyJSON{ID: k.ID, TenantID: k.TenantID, Prefix: k.Prefix, CreatedAt: rfc3339(k.CreatedAt)})
	}
	writeJSON(w, http.StatusOK, listJSON[keyJSON]{Items: items})
}

func (s *Server) deleteKey(w http.ResponseWriter, r *http.Request) {
	if err := s.store.DeleteAPIKey(r.Context(), pathParam(r, "tenant"), pathParam(r, "key")); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// sidecarJSON describes a pooled sidecar.
type sidecarJSON struct {
	ID        string   `json:"id"`
	Pid       int      `json:"pid"`
	State     string   `json:"state"`
	VMCount   int      `json:"vmCount"`
	Tenants   []string `json:"tenants"`
	Isolated  bool     `json:"isolated"`
	RSSBytes  int64    `json:"rssBytes"`
	Restarts  int64    `json:"restarts"`
	StartedAt string   `json:"startedAt"`
}

func (s *Server) listSidecars(w http.ResponseWriter, r *http.Request) {
	scs := s.pool.Sidecars()
	restarts := s.pool.Stats().Restarts
	items := make([]sidecarJSON, 0, len(scs))
	for _, sc := range scs {
		tenants := sc.Tenants
		if tenants == nil {
			tenants = []string{}
		}
		items = append(items, sidecarJSON{ID: sc.ID, Pid: sc.Pid, State: sc.State, VMCount: sc.Holds, Tenants: tenants,
			Isolated: sc.Isolated, RSSBytes: sc.RSS, Restarts: int64(restarts), StartedAt: rfc3339(sc.StartedAt)})
	}
	writeJSON(w, http.StatusOK, listJSON[sidecarJSON]{Items: items})
}
