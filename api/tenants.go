package api

import (
	"encoding/json"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// QuotasUpdate sets a tenant's quotas: nil fields are left as they are, 0
// means unlimited.
type QuotasUpdate struct {
	MaxVMs            *int     `json:"maxVms,omitempty" validate:"omitempty,gte=0,lte=100000"`
	MaxProcesses      *int     `json:"maxProcesses,omitempty" validate:"omitempty,gte=0,lte=1000000"`
	RequestsPerSecond *float64 `json:"requestsPerSecond,omitempty" validate:"omitempty,gte=0,lte=100000"`
	MaxSchedules      *int     `json:"maxSchedules,omitempty" validate:"omitempty,gte=0,lte=1000000"`
	MaxSnapshotBytes  *int64   `json:"maxSnapshotBytes,omitempty" validate:"omitempty,gte=0"`
}

// SessionSettingsUpdate updates a tenant's session settings: absent fields
// stay as they are; a permissionDefault of null goes back to the gateway's
// default, which is why it is kept raw.
type SessionSettingsUpdate struct {
	RetentionDays     *int            `json:"retentionDays,omitempty" validate:"omitempty,gte=0,lte=36500"`
	PermissionDefault json.RawMessage `json:"permissionDefault,omitempty"`
}

// CreateTenantRequest is the body of POST /v1/tenants.
type CreateTenantRequest struct {
	Name     string                `json:"name" validate:"required,min=1,max=128"`
	Isolated bool                  `json:"isolated,omitempty"`
	Quotas   QuotasUpdate          `json:"quotas,omitzero"`
	Sessions SessionSettingsUpdate `json:"sessions,omitzero"`
}

// UpdateTenantRequest is the body of PATCH /v1/tenants/{tenant}: nil
// fields are left as they are.
type UpdateTenantRequest struct {
	Name     *string               `json:"name,omitempty" validate:"omitempty,min=1,max=128"`
	Isolated *bool                 `json:"isolated,omitempty"`
	Quotas   QuotasUpdate          `json:"quotas,omitzero"`
	Sessions SessionSettingsUpdate `json:"sessions,omitzero"`
}

// APIKey is an API key as listed, never with its secret; the answer that
// creates a key (CreatedAPIKey in the spec) also carries Key. CreatedAt is
// in UTC.
type APIKey struct {
	ID        string    `json:"id"`
	TenantID  string    `json:"tenantId"`
	Prefix    string    `json:"prefix"`
	CreatedAt time.Time `json:"createdAt"`
	// Key is the secret, present only in the answer that created it.
	Key string `json:"key,omitempty"`
}

// Sidecar describes a pooled sidecar. StartedAt is in UTC.
type Sidecar struct {
	ID        string    `json:"id"`
	Pid       int       `json:"pid"`
	State     string    `json:"state"`
	VMCount   int       `json:"vmCount"`
	Tenants   []string  `json:"tenants"`
	Isolated  bool      `json:"isolated"`
	RSSBytes  int64     `json:"rssBytes"`
	Restarts  int64     `json:"restarts"`
	StartedAt time.Time `json:"startedAt"`
}

// Health answers GET /healthz: Status is always "ok".
type Health struct {
	Status string `json:"status"`
}

// Ready answers GET /readyz once the gateway is ready: Status is "ready".
type Ready struct {
	Status string `json:"status"`
}

// Me says who the caller is (GET /v1/me): the tenant of its key, the key,
// and whether it is the admin key.
type Me struct {
	Tenant gateway.Tenant `json:"tenant"`
	KeyID  string         `json:"keyId"`
	Admin  bool           `json:"admin"`
	// Token is the caller's token, when it is one (KeyID is then empty).
	Token *Token `json:"token,omitempty"`
}
