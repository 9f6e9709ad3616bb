package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
)

// HeaderEvent names the event a delivery carries (vm.state, ...).
const HeaderEvent = "Agentos-Webhook-Event"

// Deliver posts an event's body, signed with the tenant's secret, to url,
// under the delivery's id (the same at every attempt), and returns the
// receiver's status. Any 2xx delivers it, whatever the answer says; every
// other ending is an error: a refused target, no answer within ctx, or
// another status.
func (c *Client) Deliver(ctx context.Context, tenantID, url, id, event string, body []byte) (int, error) {
	if err := c.targets.CheckURL(url); err != nil {
		return 0, fmt.Errorf("webhook %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("webhook URL: %w", err)
	}
	now := c.now()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "agentos-gateway-webhook/1")
	req.Header.Set(HeaderID, id)
	req.Header.Set(HeaderEvent, event)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(HeaderSignature, Sign(c.TenantSecret(tenantID), now, body))
	resp, err := c.http.Do(req)
	if err != nil {
		switch {
		case errors.Is(err, ErrTargetRefused):
			return 0, errors.New("webhook target refused: its address is loopback, private or otherwise non-public; allow it with --webhook-allow")
		case ctx.Err() != nil:
			return 0, errors.New("webhook did not answer in time")
		}
		return 0, fmt.Errorf("webhook unreachable: %s", unwrapNetError(err))
	}
	// The answer is read (to reuse the connection) and dropped.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxAnswerBytes))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, fmt.Errorf("webhook answered %s", resp.Status)
	}
	return resp.StatusCode, nil
}
