package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
)

// Webhook is an event subscription.
type Webhook = api.Webhook

// Delivery is one event on its way to a subscription, with its attempts.
type Delivery = api.Delivery

// WebhookEvent is the body of every delivery: decode a request
// VerifyWebhook accepted into it, then its Data into the type's data.
type WebhookEvent = gateway.WebhookBody

// The data of each event, for WebhookEvent.Data.
type (
	VMStateData                    = gateway.VMStateData
	ProcessExitData                = gateway.ProcessExitData
	ExecDoneData                   = gateway.ExecDoneData
	SessionTurnEndData             = gateway.SessionTurnEndData
	SessionPermissionRequestedData = gateway.SessionPermissionRequestedData
	ScheduleRunData                = gateway.ScheduleRunData
	SnapshotReadyData              = gateway.SnapshotReadyData
	WebhookDisabledData            = gateway.WebhookDisabledData
)

// The events a subscription names; EventAll names them all.
const (
	EventAll                        = "*"
	EventVMState                    = string(gateway.EventVMState)
	EventProcessExit                = string(gateway.EventProcessExit)
	EventExecDone                   = string(gateway.EventExecDone)
	EventSessionTurnEnd             = string(gateway.EventSessionTurnEnd)
	EventSessionPermissionRequested = string(gateway.EventSessionPermissionRequested)
	EventScheduleRun                = string(gateway.EventScheduleRun)
	EventSnapshotReady              = string(gateway.EventSnapshotReady)
	EventWebhookDisabled            = string(gateway.EventWebhookDisabled)
)

// WebhookRequest subscribes to Events (of VM only, when set) at URL.
type WebhookRequest struct {
	URL         string
	Events      []string
	VM          string
	Description string
}

// MarshalJSON encodes the CreateWebhookRequest schema.
func (r WebhookRequest) MarshalJSON() ([]byte, error) {
	return json.Marshal(api.CreateWebhookRequest{URL: r.URL, Events: r.Events, VM: r.VM, Description: r.Description})
}

// WebhookUpdate changes the fields it sets of a subscription.
type WebhookUpdate struct {
	URL         *string
	Events      []string
	VM          *string
	Description *string
	// Enabled turns the subscription on (its failures forgotten) or off.
	Enabled *bool
}

// MarshalJSON encodes the UpdateWebhookRequest schema.
func (u WebhookUpdate) MarshalJSON() ([]byte, error) {
	return json.Marshal(api.UpdateWebhookRequest{URL: u.URL, Events: u.Events, VM: u.VM, Description: u.Description, Enabled: u.Enabled})
}

// CreateWebhook subscribes the caller's tenant to events.
func (c *Client) CreateWebhook(ctx context.Context, req WebhookRequest) (*Webhook, error) {
	out, _, err := call[Webhook](ctx, c, http.MethodPost, "/v1/webhooks", req, nil)
	return out, err
}

// Webhooks lists a page of the tenant's subscriptions.
func (c *Client) Webhooks(ctx context.Context, o ListOptions) (*List[Webhook], error) {
	q := url.Values{}
	setPage(q, o.Cursor, o.Limit)
	return get[List[Webhook]](ctx, c, "/v1/webhooks", q)
}

// Webhook gets a subscription.
func (c *Client) Webhook(ctx context.Context, id string) (*Webhook, error) {
	return get[Webhook](ctx, c, "/v1/webhooks/"+esc(id), nil)
}

// UpdateWebhook changes a subscription.
func (c *Client) UpdateWebhook(ctx context.Context, id string, u WebhookUpdate) (*Webhook, error) {
	out, _, err := call[Webhook](ctx, c, http.MethodPatch, "/v1/webhooks/"+esc(id), u, nil)
	return out, err
}

// DeleteWebhook deletes a subscription with its deliveries.
func (c *Client) DeleteWebhook(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/webhooks/"+esc(id), nil, nil, nil, nil)
	return err
}

// DeliveryOptions select a subscription's deliveries: in a status
// ("pending", "delivered", "failed"; empty: all), of events at or after a
// time, a page at a time.
type DeliveryOptions struct {
	Status string
	After  time.Time
	ListOptions
}

// Deliveries lists a page of a subscription's deliveries, in sequence.
func (c *Client) Deliveries(ctx context.Context, id string, o DeliveryOptions) (*List[Delivery], error) {
	q := url.Values{}
	if o.Status != "" {
		q.Set("status", o.Status)
	}
	if !o.After.IsZero() {
		q.Set("after", o.After.UTC().Format(time.RFC3339Nano))
	}
	setPage(q, o.Cursor, o.Limit)
	return get[List[Delivery]](ctx, c, "/v1/webhooks/"+esc(id)+"/deliveries", q)
}

// Redeliver sends a delivery again now, under its id.
func (c *Client) Redeliver(ctx context.Context, id, delivery string) (*Delivery, error) {
	out, _, err := call[Delivery](ctx, c, http.MethodPost, "/v1/webhooks/"+esc(id)+"/deliveries/"+esc(delivery)+"/redeliver", nil, nil)
	return out, err
}

// ExecAccepted says an asynchronous exec started; its outcome comes as an
// exec.done event and from ExecOutcome.
type ExecAccepted = api.ExecAccepted

// ExecAsync starts an exec under an idempotency key and returns once it
// started (Prefer: respond-async). A retry of an exec that ended returns
// its result instead, and a nil ExecAccepted.
func (v *VMHandle) ExecAsync(ctx context.Context, key string, req ExecRequest) (*ExecAccepted, *ExecResult, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, nil, fmt.Errorf("client: encode exec: %w", err)
	}
	resp, err := v.c.send(ctx, request{method: http.MethodPost, path: vmPath(v.id, "exec"), body: bytes.NewReader(b),
		ctype: "application/json", accept: "application/json", headers: http.Header{"Prefer": {"respond-async"}},
		opts: &callOptions{idempotencyKey: key}})
	if err != nil {
		return nil, nil, err
	}
	defer drainClose(resp.Body)
	return execOutcome(resp)
}

// ExecOutcome returns the outcome of the exec made with key: its result
// once it ended (or its error), or an ExecAccepted while it runs.
func (v *VMHandle) ExecOutcome(ctx context.Context, key string) (*ExecAccepted, *ExecResult, error) {
	resp, err := v.c.send(ctx, request{method: http.MethodGet, path: vmPath(v.id, "exec", esc(key)), accept: "application/json"})
	if err != nil {
		return nil, nil, err
	}
	defer drainClose(resp.Body)
	return execOutcome(resp)
}

func execOutcome(resp *http.Response) (*ExecAccepted, *ExecResult, error) {
	if resp.StatusCode == http.StatusAccepted {
		var a ExecAccepted
		if err := decodeJSONBody(resp, &a); err != nil {
			return nil, nil, err
		}
		return &a, nil, nil
	}
	var w api.ExecResult
	if err := decodeJSONBody(resp, &w); err != nil {
		return nil, nil, err
	}
	res, err := execResultOf(&w, resp)
	return nil, res, err
}
