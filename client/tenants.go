package client

import (
	"context"
	"net/http"
	"net/url"
)

// The tenant and sidecar routes need the admin key; a tenant key gets an
// *Error with code permission_denied.

// ListOptions pages a list.
type ListOptions struct {
	Cursor string
	Limit  int // 0: the gateway's default (50)
}

// CreateTenant creates a tenant.
func (c *Client) CreateTenant(ctx context.Context, req TenantCreate) (*Tenant, error) {
	var out Tenant
	if _, err := c.do(ctx, http.MethodPost, "/v1/tenants", nil, req, &out, nil); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListTenants lists tenants, one page at a time.
func (c *Client) ListTenants(ctx context.Context, opts ListOptions) (*List[Tenant], error) {
	q := url.Values{}
	setPage(q, opts.Cursor, opts.Limit)
	var out List[Tenant]
	if _, err := c.do(ctx, http.MethodGet, "/v1/tenants", q, nil, &out, nil); err != nil {
		return nil, err
	}
	return &out, nil
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
	var out Tenant
	if _, err := c.do(ctx, http.MethodGet, tenantPath(id), nil, nil, &out, nil); err != nil {
		return nil, err
	}
	return &out, nil
}

// UpdateTenant changes the fields of a tenant that upd sets (PATCH).
func (c *Client) UpdateTenant(ctx context.Context, id string, upd TenantUpdate) (*Tenant, error) {
	var out Tenant
	if _, err := c.do(ctx, http.MethodPatch, tenantPath(id), nil, upd, &out, nil); err != nil {
		return nil, err
	}
	return &out, nil
}

// CreateKey creates an API key for a tenant; the answer's Key is the secret,
// shown only here.
func (c *Client) CreateKey(ctx context.Context, tenantID string) (*APIKey, error) {
	var out APIKey
	if _, err := c.do(ctx, http.MethodPost, tenantPath(tenantID, "keys"), nil, nil, &out, nil); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListKeys lists a tenant's keys (never their secrets).
func (c *Client) ListKeys(ctx context.Context, tenantID string) (*List[APIKey], error) {
	var out List[APIKey]
	if _, err := c.do(ctx, http.MethodGet, tenantPath(tenantID, "keys"), nil, nil, &out, nil); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteKey revokes a key; it stops working at once.
func (c *Client) DeleteKey(ctx context.Context, tenantID, keyID string) error {
	_, err := c.do(ctx, http.MethodDelete, tenantPath(tenantID, "keys", esc(keyID)), nil, nil, nil, nil)
	return err
}

// Sidecars lists the pool's sidecars.
func (c *Client) Sidecars(ctx context.Context) (*List[Sidecar], error) {
	var out List[Sidecar]
	if _, err := c.do(ctx, http.MethodGet, "/v1/sidecars", nil, nil, &out, nil); err != nil {
		return nil, err
	}
	return &out, nil
}
