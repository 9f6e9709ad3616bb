package api

import "time"

// CreateTokenRequest is the body of POST /v1/tokens.
type CreateTokenRequest struct {
	// Scopes are what the token may do: vm:read, vm:write, exec, shells,
	// files:read, files:write, sessions, previews.
	Scopes []string `json:"scopes" validate:"required,min=1,max=8,dive,min=1,max=32"`
	// VM and Session bind the token to one VM, and to one agent session of
	// it (empty: any of the tenant's).
	VM      string `json:"vm,omitempty" validate:"omitempty,max=64,nonul"`
	Session string `json:"session,omitempty" validate:"omitempty,max=256,nonul"`
	// TTLSeconds is the token's life (default 900; at most the gateway's
	// --token-max-ttl).
	TTLSeconds *int `json:"ttlSeconds,omitempty" validate:"omitnil,gte=1"`
	// Origins are the browser origins the token may be used from (none:
	// any).
	Origins []string `json:"origins,omitempty" validate:"omitempty,max=16,dive,min=1,max=256,nonul"`
	Label   string   `json:"label,omitempty" validate:"omitempty,max=128,nonul"`
}

// Token is a token as listed: everything but its secret.
type Token struct {
	ID        string    `json:"id"`
	Scopes    []string  `json:"scopes"`
	VM        string    `json:"vm,omitempty"`
	Session   string    `json:"session,omitempty"`
	Origins   []string  `json:"origins"`
	Label     string    `json:"label,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// CreatedToken is a token just created, with its secret, shown this once.
type CreatedToken struct {
	Token
	Secret string `json:"token"`
}

// AuditRecord is one entry of the audit trail (GET /v1/audit).
type AuditRecord struct {
	ID        int64     `json:"id"`
	At        time.Time `json:"at"`
	Node      string    `json:"node,omitempty"`
	Tenant    string    `json:"tenant,omitempty"`
	Key       string    `json:"key,omitempty"`
	Token     string    `json:"token,omitempty"`
	Method    string    `json:"method"`
	Route     string    `json:"route"`
	VM        string    `json:"vm,omitempty"`
	Status    int       `json:"status"`
	RequestID string    `json:"requestId,omitempty"`
}
