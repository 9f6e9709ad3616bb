package client

import (
	"context"
	"encoding/json"
	"iter"
	"net/http"
	"net/url"
	"strconv"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
)

// The tenant, key and sidecar calls need the admin key; a tenant key gets
// an *Error with code permission_denied.

// ListOptions pages a list.
type ListOptions struct {
	// Limit bounds a page (0: the gateway's default, 50).
	Limit int
	// Cursor starts a List call at a page a previous one named (the
	// iterators ignore it and start at the first).
	Cursor string
}

func (o ListOptions) withCursor(c string) ListOptions { o.Cursor = c; return o }

func (o ListOptions) query() url.Values {
	q := url.Values{}
	setPage(q, o.Cursor, o.Limit)
	return q
}

func setPage(q url.Values, cursor string, limit int) {
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
}

// Tenant is a customer of the gateway.
type Tenant = gateway.Tenant

// TenantCreate is a tenant to create. Nil Quotas take the gateway's
// defaults (unlimited).
type TenantCreate struct {
	Name     string
	Isolated bool
	Quotas   *Quotas
	Sessions *SessionSettingsUpdate
}

// MarshalJSON encodes the CreateTenantRequest schema.
func (r TenantCreate) MarshalJSON() ([]byte, error) {
	w := api.CreateTenantRequest{Name: r.Name, Isolated: r.Isolated}
	if q := r.Quotas; q != nil {
		w.Quotas = api.QuotasUpdate{MaxVMs: &q.MaxVMs, MaxProcesses: &q.MaxProcesses, RequestsPerSecond: &q.RequestsPerSecond, MaxSchedules: &q.MaxSchedules, MaxSnapshotBytes: &q.MaxSnapshotBytes}
	}
	var err error
	if w.Sessions, err = r.Sessions.wire(); err != nil {
		return nil, err
	}
	return json.Marshal(w)
}

// TenantUpdate changes the fields of a tenant that are set (see Ptr).
type TenantUpdate struct {
	Name     *string
	Isolated *bool
	Quotas   *QuotasUpdate
	Sessions *SessionSettingsUpdate
}

// MarshalJSON encodes the UpdateTenantRequest schema.
func (r TenantUpdate) MarshalJSON() ([]byte, error) {
	w := api.UpdateTenantRequest{Name: r.Name, Isolated: r.Isolated}
	if r.Quotas != nil {
		w.Quotas = *r.Quotas
	}
	var err error
	if w.Sessions, err = r.Sessions.wire(); err != nil {
		return nil, err
	}
	return json.Marshal(w)
}

// Me says who the caller is: the tenant of its key, the key, and whether it
// is the admin key.
type Me = api.Me

// Me returns who the client's key belongs to (any key).
func (c *Client) Me(ctx context.Context) (*Me, error) {
	return get[Me](ctx, c, "/v1/me", nil)
}

// CreateTenant creates a tenant.
func (c *Client) CreateTenant(ctx context.Context, req TenantCreate) (*Tenant, error) {
	out, _, err := call[Tenant](ctx, c, http.MethodPost, "/v1/tenants", req, nil)
	return out, err
}

// ListTenants returns one page of the tenants.
func (c *Client) ListTenants(ctx context.Context, opts ListOptions) (*List[Tenant], error) {
	return get[List[Tenant]](ctx, c, "/v1/tenants", opts.query())
}

// Tenants iterates over all tenants, page by page.
func (c *Client) Tenants(ctx context.Context) iter.Seq2[Tenant, error] {
	return pages(ctx, ListOptions{}, c.ListTenants)
}

func tenantPath(id string, rest ...string) string {
	p := "/v1/tenants/" + esc(id)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// GetTenant returns a tenant.
func (c *Client) GetTenant(ctx context.Context, id string) (*Tenant, error) {
	return get[Tenant](ctx, c, tenantPath(id), nil)
}

// UpdateTenant changes the fields of a tenant that upd sets (PATCH).
func (c *Client) UpdateTenant(ctx context.Context, id string, upd TenantUpdate) (*Tenant, error) {
	out, _, err := call[Tenant](ctx, c, http.MethodPatch, tenantPath(id), upd, nil)
	return out, err
}

// CreateKey creates an API key for a tenant; the answer's Key is the secret,
// shown only here.
func (c *Client) CreateKey(ctx context.Context, tenantID string) (*APIKey, error) {
	out, _, err := call[APIKey](ctx, c, http.MethodPost, tenantPath(tenantID, "keys"), nil, nil)
	return out, err
}

// Keys lists a tenant's keys (never their secrets).
func (c *Client) Keys(ctx context.Context, tenantID string) ([]APIKey, error) {
	l, err := get[List[APIKey]](ctx, c, tenantPath(tenantID, "keys"), nil)
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// DeleteKey revokes a key; it stops working at once.
func (c *Client) DeleteKey(ctx context.Context, tenantID, keyID string) error {
	_, err := c.do(ctx, http.MethodDelete, tenantPath(tenantID, "keys", esc(keyID)), nil, nil, nil, nil)
	return err
}

// Sidecars lists the pool's sidecars.
func (c *Client) Sidecars(ctx context.Context) ([]Sidecar, error) {
	l, err := get[List[Sidecar]](ctx, c, "/v1/sidecars", nil)
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}
