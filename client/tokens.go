package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"time"

	"github.com/agentos-gateway/agentos-gateway/api"
)

// Token is a token as listed, without its secret.
type Token = api.Token

// CreatedToken is a token just minted, with its secret in Secret (the
// "token" of the JSON), shown this once.
type CreatedToken = api.CreatedToken

// The scopes a token may carry.
const (
	ScopeVMRead     = "vm:read"
	ScopeVMWrite    = "vm:write"
	ScopeExec       = "exec"
	ScopeShells     = "shells"
	ScopeFilesRead  = "files:read"
	ScopeFilesWrite = "files:write"
	ScopeSessions   = "sessions"
	ScopePreviews   = "previews"
)

// TokenRequest says what a new token may do, where, and for how long.
type TokenRequest struct {
	Scopes []string
	// VM and Session bind the token to one VM, and to one agent session of
	// it (empty: any).
	VM, Session string
	// TTL, rounded up to a second, is the token's life (0: the gateway's
	// default, 15 minutes).
	TTL time.Duration
	// Origins are the browser origins the token may be used from (none:
	// any).
	Origins []string
	Label   string
}

// MarshalJSON encodes the CreateTokenRequest schema.
func (r TokenRequest) MarshalJSON() ([]byte, error) {
	out := api.CreateTokenRequest{Scopes: r.Scopes, VM: r.VM, Session: r.Session, Origins: r.Origins, Label: r.Label}
	if r.TTL > 0 {
		out.TTLSeconds = seconds(&r.TTL)
	}
	return json.Marshal(out)
}

// CreateToken mints a token with the caller's tenant key. A client made
// with the token's secret (New with it as the key) acts as the token.
func (c *Client) CreateToken(ctx context.Context, req TokenRequest) (*CreatedToken, error) {
	out, _, err := call[CreatedToken](ctx, c, http.MethodPost, "/v1/tokens", req, nil)
	return out, err
}

// Tokens lists the tenant's live tokens (never their secrets).
func (c *Client) Tokens(ctx context.Context) ([]Token, error) {
	l, err := get[List[Token]](ctx, c, "/v1/tokens", nil)
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// RevokeToken revokes a token at once, on every node.
func (c *Client) RevokeToken(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/tokens/"+esc(id), nil, nil, nil, nil)
	return err
}

// AuditRecord is one entry of the audit trail.
type AuditRecord = api.AuditRecord

// AuditOptions select audit records: of one VM, at or after a time, of one
// tenant (the admin key only), a page at a time.
type AuditOptions struct {
	VM     string
	After  time.Time
	Tenant string
	ListOptions
}

// Audit reads a page of the audit trail, oldest first: the caller's
// tenant's records, or with the admin key every tenant's.
func (c *Client) Audit(ctx context.Context, o AuditOptions) (*List[AuditRecord], error) {
	q := url.Values{}
	if o.VM != "" {
		q.Set("vm", o.VM)
	}
	if !o.After.IsZero() {
		q.Set("after", o.After.UTC().Format(time.RFC3339Nano))
	}
	if o.Tenant != "" {
		q.Set("tenant", o.Tenant)
	}
	setPage(q, o.Cursor, o.Limit)
	return get[List[AuditRecord]](ctx, c, "/v1/audit", q)
}
