package client

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/agentos-gateway/agentos-gateway/api"
)

// Preview is a preview URL of a VM port as the gateway answers it: URL
// (and HostURL, with the gateway's --preview-domain) only in the answer to
// CreatePreview.
type Preview = api.Preview

// PreviewRequest creates a preview of Port for TTL (an hour when zero;
// sent in whole seconds, rounded up).
type PreviewRequest struct {
	Port int
	TTL  time.Duration
}

// MarshalJSON encodes the CreatePreviewRequest schema.
func (r PreviewRequest) MarshalJSON() ([]byte, error) {
	return json.Marshal(api.CreatePreviewRequest{Port: r.Port, TTLSeconds: ceilUnit(r.TTL, time.Second)})
}

// CreatePreview creates a preview URL of a port of the VM, which opens it
// without the API key until it expires, is revoked or the VM ends.
func (v *VMHandle) CreatePreview(ctx context.Context, req PreviewRequest) (*Preview, error) {
	out, _, err := call[Preview](ctx, v.c, http.MethodPost, vmPath(v.id, "previews"), req, nil)
	return out, err
}

// Previews returns the VM's previews that have not expired, oldest first.
func (v *VMHandle) Previews(ctx context.Context) ([]Preview, error) {
	l, err := get[List[Preview]](ctx, v.c, vmPath(v.id, "previews"), nil)
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// Preview returns the handle of one of the VM's previews. It makes no call.
func (v *VMHandle) Preview(id string) *PreviewHandle {
	return &PreviewHandle{c: v.c, vm: v.id, id: id}
}

// PreviewHandle makes the calls about one preview. It is safe for
// concurrent use.
type PreviewHandle struct {
	c      *Client
	vm, id string
}

// ID returns the preview's id.
func (p *PreviewHandle) ID() string { return p.id }

func (p *PreviewHandle) path() string { return vmPath(p.vm, "previews", esc(p.id)) }

// Get returns the preview (without its URLs).
func (p *PreviewHandle) Get(ctx context.Context) (*Preview, error) {
	return get[Preview](ctx, p.c, p.path(), nil)
}

// Delete revokes the preview: its URL stops working at once.
func (p *PreviewHandle) Delete(ctx context.Context) error {
	_, err := p.c.do(ctx, http.MethodDelete, p.path(), nil, nil, nil, nil)
	return err
}
