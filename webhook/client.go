package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/tracing"
)

// MaxAnswerBytes bounds a webhook's answer; a longer one is an error.
const MaxAnswerBytes = 1 << 20

// Client posts signed JSON to tenants' webhooks within the target policy.
type Client struct {
	targets Targets
	secret  []byte
	http    *http.Client
	now     func() time.Time
}

// NewClient returns a client that signs with the tenants' secrets derived
// from gatewaySecret and connects only where targets allow.
func NewClient(targets Targets, gatewaySecret []byte) *Client {
	tr := &http.Transport{
		// A proxy would dial on the gateway's behalf, past the address check.
		Proxy:               nil,
		DialContext:         targets.dialer(),
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     30 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
	}
	return &Client{
		targets: targets, secret: gatewaySecret, now: time.Now,
		http: &http.Client{
			// Each delivery is a client span and carries the trace context
			// of the request or event that caused it.
			Transport: tracing.Transport(tr, "webhook"),
			// A redirect could lead anywhere; it is the webhook's answer.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
}

// Close drops the client's idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// CheckURL checks a declared webhook URL against the target policy, as its
// deliveries will be: a host name is resolved too, and one that resolves
// to an address the policy refuses is refused now, in the words an address
// gets, rather than accepted and then never delivered (http://localhost
// used to be). A name that does not resolve is accepted: its deliveries
// say why they fail.
func (c *Client) CheckURL(raw string) error {
	if err := c.targets.CheckURL(raw); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), declaredLookupTimeout)
	defer cancel()
	return c.targets.checkResolved(ctx, raw, net.DefaultResolver.LookupNetIP)
}

// declaredLookupTimeout bounds CheckURL's name lookup.
const declaredLookupTimeout = 2 * time.Second

// TenantSecret is the secret a tenant verifies its webhooks with.
func (c *Client) TenantSecret(tenantID string) string { return TenantSecret(c.secret, tenantID) }

// CallError is a failed webhook call; Outcome says how it failed (one of
// the gateway.Binding* outcomes).
type CallError struct {
	Outcome string
	Status  int // the webhook's status, when it answered
	Err     error
}

func (e *CallError) Error() string { return e.Err.Error() }
func (e *CallError) Unwrap() error { return e.Err }

// Outcome returns how a Post ended: gateway.BindingOK for a nil error.
func Outcome(err error) string {
	var ce *CallError
	switch {
	case err == nil:
		return gateway.BindingOK
	case errors.As(err, &ce):
		return ce.Outcome
	default:
		return gateway.BindingUnreachable
	}
}

// Post sends body, signed with the tenant's secret, to url and returns the
// webhook's JSON answer. ctx bounds the whole call. Every failure is a
// *CallError, in the gateway's words: its message reaches the guest.
func (c *Client) Post(ctx context.Context, tenantID, url, id string, body []byte) (json.RawMessage, int, error) {
	resp, err := c.send(ctx, tenantID, url, id, body, nil)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswerBytes+1))
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, resp.StatusCode, &CallError{Outcome: gateway.BindingTimeout, Status: resp.StatusCode, Err: errors.New("webhook did not answer in time")}
	case err != nil:
		return nil, resp.StatusCode, &CallError{Outcome: gateway.BindingUnreachable, Status: resp.StatusCode, Err: fmt.Errorf("webhook answer could not be read: %s", unwrapNetError(err))}
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return nil, resp.StatusCode, &CallError{Outcome: gateway.BindingHTTPError, Status: resp.StatusCode, Err: fmt.Errorf("webhook answered %s", resp.Status)}
	case len(answer) > MaxAnswerBytes:
		return nil, resp.StatusCode, &CallError{Outcome: gateway.BindingHTTPError, Status: resp.StatusCode, Err: fmt.Errorf("webhook answer is longer than %d bytes", MaxAnswerBytes)}
	case !json.Valid(answer):
		return nil, resp.StatusCode, &CallError{Outcome: gateway.BindingHTTPError, Status: resp.StatusCode, Err: errors.New("webhook answer is not JSON")}
	}
	return json.RawMessage(answer), resp.StatusCode, nil
}

// send posts body to url, signed with the tenant's secret, under id, with
// extra headers besides the signed ones, and returns the answer for the
// caller to read and close. A refused target, a request that cannot be
// made, no answer within ctx, and a connection that fails are *CallError,
// in the gateway's words.
func (c *Client) send(ctx context.Context, tenantID, url, id string, body []byte, extra http.Header) (*http.Response, error) {
	if err := c.targets.CheckURL(url); err != nil {
		return nil, &CallError{Outcome: gateway.BindingRefused, Err: fmt.Errorf("webhook %s", err)}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, &CallError{Outcome: gateway.BindingRefused, Err: fmt.Errorf("webhook URL: %w", err)}
	}
	for k, v := range extra {
		req.Header[k] = v
	}
	now := c.now()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "agentos-gateway-webhook/1")
	req.Header.Set(HeaderID, id)
	req.Header.Set(HeaderTimestamp, fmt.Sprint(now.Unix()))
	req.Header.Set(HeaderSignature, Sign(c.TenantSecret(tenantID), now, body))
	resp, err := c.http.Do(req)
	if err != nil {
		switch {
		case errors.Is(err, ErrTargetRefused):
			return nil, &CallError{Outcome: gateway.BindingRefused, Err: errors.New("webhook target refused: its address is loopback, private or otherwise non-public; allow it with --webhook-allow")}
		case ctx.Err() != nil:
			return nil, &CallError{Outcome: gateway.BindingTimeout, Err: errors.New("webhook did not answer in time")}
		default:
			return nil, &CallError{Outcome: gateway.BindingUnreachable, Err: fmt.Errorf("webhook unreachable: %s", unwrapNetError(err))}
		}
	}
	return resp, nil
}

// unwrapNetError keeps the innermost cause of a transport error: the outer
// layers repeat the URL, which the guest already knows.
func unwrapNetError(err error) string {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err.Error()
		}
		err = next
	}
}
