package client

import (
	"context"
	"iter"
	"net/http"
	"net/url"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
)

// Snapshot is a stored snapshot of a VM's root filesystem.
type Snapshot = gateway.Snapshot

// ListSnapshotsOptions select a page of the caller's snapshots.
type ListSnapshotsOptions struct {
	// VM keeps the snapshots of that VM only.
	VM     string
	Cursor string
	Limit  int
}

func (o ListSnapshotsOptions) withCursor(c string) ListSnapshotsOptions { o.Cursor = c; return o }

// CreateSnapshot captures the VM's root filesystem into the gateway's
// storage and returns the snapshot; CreateVMRequest.FromSnapshot creates
// VMs from it.
func (v *VMHandle) CreateSnapshot(ctx context.Context) (*Snapshot, error) {
	out, _, err := call[Snapshot](ctx, v.c, http.MethodPost, vmPath(v.id, "snapshots"), nil, nil)
	return out, err
}

// Fork creates count VMs from a fresh snapshot of the VM. Their files are
// the VM's; none of its processes run in them.
func (v *VMHandle) Fork(ctx context.Context, count int) ([]VM, error) {
	out, _, err := call[api.Forked](ctx, v.c, http.MethodPost, vmPath(v.id, "fork"), api.ForkRequest{Count: count}, nil)
	if err != nil {
		return nil, err
	}
	return out.VMs, nil
}

// ListSnapshots returns one page of the caller's snapshots, oldest first.
func (c *Client) ListSnapshots(ctx context.Context, opts ListSnapshotsOptions) (*List[Snapshot], error) {
	q := url.Values{}
	if opts.VM != "" {
		q.Set("vm", opts.VM)
	}
	setPage(q, opts.Cursor, opts.Limit)
	return get[List[Snapshot]](ctx, c, "/v1/snapshots", q)
}

// Snapshots iterates over the caller's snapshots, page by page.
func (c *Client) Snapshots(ctx context.Context, opts ListSnapshotsOptions) iter.Seq2[Snapshot, error] {
	return pages(ctx, opts, c.ListSnapshots)
}

// GetSnapshot returns one of the caller's snapshots.
func (c *Client) GetSnapshot(ctx context.Context, id string) (*Snapshot, error) {
	return get[Snapshot](ctx, c, "/v1/snapshots/"+esc(id), nil)
}

// DeleteSnapshot deletes one of the caller's snapshots and its bytes.
func (c *Client) DeleteSnapshot(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/snapshots/"+esc(id), nil, nil, nil, nil)
	return err
}
