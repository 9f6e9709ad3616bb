package webhook

import (
	"context"
	"fmt"
	"io"
	"net/http"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// HeaderEvent names the event a delivery carries (vm.state, ...).
const HeaderEvent = "Agentos-Webhook-Event"

// Deliver posts an event's body, signed with the tenant's secret, to url,
// under the delivery's id (the same at every attempt), and returns the
// receiver's status. Any 2xx delivers it, whatever the answer says; every
// other ending is an error (a *CallError, as Post's): a refused target, no
// answer within ctx, or another status.
func (c *Client) Deliver(ctx context.Context, tenantID, url, id, event string, body []byte) (int, error) {
	resp, err := c.send(ctx, tenantID, url, id, body, http.Header{HeaderEvent: {event}})
	if err != nil {
		return 0, err
	}
	// The answer is read (to reuse the connection) and dropped.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxAnswerBytes))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, &CallError{Outcome: gateway.BindingHTTPError, Status: resp.StatusCode, Err: fmt.Errorf("webhook answered %s", resp.Status)}
	}
	return resp.StatusCode, nil
}
