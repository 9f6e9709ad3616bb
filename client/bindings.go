package client

import (
	"context"
	"net/http"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
	"github.com/agentos-gateway/agentos-gateway/webhook"
)

// Bindings are a VM's host bindings: collections of functions the guest
// runs as agentos-<collection> <binding> --<field> <value> (or --json
// '<input>'), each answered by a webhook, and the webhook that decides the
// permission requests of the VM's agent sessions.
type Bindings = gateway.Bindings

// BindingCollection is a named set of bindings: the guest command
// agentos-<Name>.
type BindingCollection = gateway.BindingCollection

// Binding is one host function, answered by its WebhookURL.
type Binding = gateway.Binding

// BindingExample is an example input of a binding.
type BindingExample = gateway.BindingExample

// WebhookSecret is the secret a tenant's webhooks verify signatures with.
type WebhookSecret = api.WebhookSecret

// Webhook signature headers.
const (
	WebhookSignatureHeader = webhook.HeaderSignature
	WebhookTimestampHeader = webhook.HeaderTimestamp
	WebhookIDHeader        = webhook.HeaderID
)

// Webhook verification failures (errors.Is).
var (
	ErrWebhookSignature = webhook.ErrBadSignature
	ErrWebhookStale     = webhook.ErrStale
)

// WebhookTolerance is how far a webhook's timestamp may be from now for
// VerifyWebhook to accept it.
const WebhookTolerance = 5 * time.Minute

// Bindings returns the VM's host bindings.
func (v *VMHandle) Bindings(ctx context.Context) (*Bindings, error) {
	return get[Bindings](ctx, v.c, vmPath(v.id, "bindings"), nil)
}

// PutBindings replaces the VM's host bindings and returns them as kept.
func (v *VMHandle) PutBindings(ctx context.Context, b Bindings) (*Bindings, error) {
	if b.Collections == nil {
		b.Collections = []BindingCollection{}
	}
	out, _, err := call[Bindings](ctx, v.c, http.MethodPut, vmPath(v.id, "bindings"), b, nil)
	return out, err
}

// WebhookSecret returns the calling tenant's webhook secret.
func (c *Client) WebhookSecret(ctx context.Context) (*WebhookSecret, error) {
	return get[WebhookSecret](ctx, c, "/v1/webhook-secret", nil)
}

// VerifyWebhook checks a webhook request the gateway made: its signature,
// keyed with secret (see WebhookSecret), over its timestamp and body, and
// that the timestamp is within WebhookTolerance of now. body is the
// request's body exactly as received. A nil error means the gateway sent it.
func VerifyWebhook(secret string, h http.Header, body []byte) error {
	return webhook.Verify(secret, h.Get(WebhookTimestampHeader), h.Get(WebhookSignatureHeader), body, time.Now(), WebhookTolerance)
}
