// Package client is a Go client for the agentos-gateway REST API, its
// Server-Sent Event streams included.
//
// A Client calls one gateway with one API key. Calls about one VM go
// through its handle, c.VM(id), and calls about one process, shell or agent
// session through theirs:
//
//	c, err := client.New(cmp.Or(os.Getenv("AGENTOS_URL"), "http://127.0.0.1:8080"), os.Getenv("AGENTOS_API_KEY"))
//	created, err := c.CreateVM(ctx, client.CreateVMRequest{})
//	vm := c.VM(created.ID)
//	res, err := vm.Exec(ctx, client.ExecRequest{Command: "echo hi", Timeout: 10 * time.Second})
//	fmt.Printf("%s", res.Stdout)
//
// Every method takes a context first. Every answer outside 2xx becomes an
// *Error parsed from the gateway's application/problem+json body; branch on
// its Code with errors.As or IsCode. Idempotent calls (reads, puts, deletes,
// and calls made with WithIdempotencyKey) are retried on 429 and 503
// answers, honouring Retry-After, and reads and keyed calls also on
// transport failures (see RetryPolicy). Streams yield typed events (see
// Event), and the Follow methods return iterators that reconnect with
// Last-Event-ID so that no event is lost or repeated.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// DefaultUserAgent is sent unless WithUserAgent says otherwise.
const DefaultUserAgent = "agentos-gateway-go-client/2"

// DefaultMaxEventSize bounds one Server-Sent Event (its data and any single
// line) unless WithMaxEventSize says otherwise.
const DefaultMaxEventSize = 16 << 20

// Client calls one gateway with one API key. It is safe for concurrent use.
type Client struct {
	base         string
	apiKey       string
	hc           *http.Client
	userAgent    string
	maxEventSize int
	idleTimeout  time.Duration
	retry        RetryPolicy
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the HTTP client (default: a client on
// http.DefaultTransport, without an overall timeout since streams are long).
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) {
		if hc != nil {
			c.hc = hc
		}
	}
}

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option {
	return func(c *Client) { c.userAgent = ua }
}

// WithMaxEventSize bounds the size of one Server-Sent Event (default 16 MiB).
// A larger event ends its stream with an error wrapping ErrEventTooLarge.
func WithMaxEventSize(n int) Option {
	return func(c *Client) {
		if n > 0 {
			c.maxEventSize = n
		}
	}
}

// WithStreamIdleTimeout sets the default StreamOptions.IdleTimeout of the
// streams this client opens (default 0: none).
func WithStreamIdleTimeout(d time.Duration) Option {
	return func(c *Client) { c.idleTimeout = d }
}

// WithRetryPolicy sets how idempotent calls are retried and how the Follow
// methods reconnect.
func WithRetryPolicy(p RetryPolicy) Option {
	return func(c *Client) { c.retry = p.withDefaults() }
}

// New returns a client for the gateway at baseURL, an http or https URL
// such as "http://127.0.0.1:8080" (a path prefix is kept), that
// authenticates with apiKey as a bearer token. An empty apiKey sends no
// Authorization header. A baseURL without a scheme or host, or with a query
// or fragment, is an error.
func New(baseURL, apiKey string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("client: base URL %q: %w", baseURL, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("client: base URL %q: the scheme must be http or https", baseURL)
	case u.Host == "":
		return nil, fmt.Errorf("client: base URL %q has no host", baseURL)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.User != nil:
		return nil, fmt.Errorf("client: base URL %q may not carry a query, a fragment or user information", baseURL)
	}
	c := &Client{
		base:         strings.TrimRight(u.String(), "/"),
		apiKey:       apiKey,
		hc:           &http.Client{},
		userAgent:    DefaultUserAgent,
		maxEventSize: DefaultMaxEventSize,
		retry:        RetryPolicy{}.withDefaults(),
	}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// BaseURL returns the gateway address the client calls.
func (c *Client) BaseURL() string { return c.base }

// CallOption tunes one call (the methods that take them say so).
type CallOption func(*callOptions)

type callOptions struct {
	idempotencyKey string
	requestID      string
}

// WithIdempotencyKey sends an Idempotency-Key header: a retry with the same
// key within 24 h gets the first outcome and never runs the call twice, so
// the client also retries such a call after a dropped connection. Accepted
// by Exec, ExecStream and Spawn.
func WithIdempotencyKey(key string) CallOption {
	return func(o *callOptions) { o.idempotencyKey = key }
}

// WithRequestID sends an X-Request-ID header, which the gateway adopts as the
// request id of its logs and problems.
func WithRequestID(id string) CallOption {
	return func(o *callOptions) { o.requestID = id }
}

func (o *callOptions) apply(h http.Header) {
	if o == nil {
		return
	}
	if o.idempotencyKey != "" {
		h.Set("Idempotency-Key", o.idempotencyKey)
	}
	if o.requestID != "" {
		h.Set("X-Request-ID", o.requestID)
	}
}

func collect(opts []CallOption) *callOptions {
	var o callOptions
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	return &o
}

// Ptr returns a pointer to v, for the optional fields of partial updates.
func Ptr[T any](v T) *T { return &v }

// esc escapes one path segment (ids may hold any character).
func esc(s string) string { return url.PathEscape(s) }

func vmPath(vm string, rest ...string) string {
	p := "/v1/vms/" + esc(vm)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// request is one HTTP exchange.
type request struct {
	method  string
	path    string // already escaped
	query   url.Values
	body    io.Reader
	size    int64 // Content-Length when > 0
	ctype   string
	accept  string
	headers http.Header
	opts    *callOptions
	once    bool // never retried (see send)
}

func (c *Client) newRequest(ctx context.Context, r request) (*http.Request, error) {
	u := c.base + r.path
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, r.body)
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: %w", r.method, r.path, err)
	}
	if r.size > 0 {
		req.ContentLength = r.size
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	if r.ctype != "" {
		req.Header.Set("Content-Type", r.ctype)
	}
	if r.accept != "" {
		req.Header.Set("Accept", r.accept)
	}
	for k, vs := range r.headers {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	r.opts.apply(req.Header)
	return req, nil
}

// send performs r and returns the response when its status is 2xx; any other
// status is read, closed and returned as an *Error. An idempotent request
// is retried as the RetryPolicy says (see retryCall).
func (c *Client) send(ctx context.Context, r request) (*http.Response, error) {
	req, err := c.newRequest(ctx, r)
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		resp, err := c.hc.Do(req)
		if err == nil && resp.StatusCode >= 200 && resp.StatusCode <= 299 {
			return resp, nil
		}
		if err == nil {
			err = parseError(resp)
			resp.Body.Close()
		}
		if attempt >= c.retry.MaxAttempts || r.once || !retryCall(req, err) || ctx.Err() != nil {
			return nil, err
		}
		if req.Body != nil && req.Body != http.NoBody {
			body, berr := req.GetBody()
			if berr != nil {
				return nil, err
			}
			req = req.Clone(ctx)
			req.Body = body
		}
		if serr := sleep(ctx, backoff(c.retry, attempt, err)); serr != nil {
			return nil, err
		}
	}
}

// maxDrain is how much of an unread body is drained so that the connection
// can be reused; a longer rest closes it.
const maxDrain = 64 << 10

func drainClose(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, maxDrain))
	_ = body.Close()
}

// do sends a JSON call: in (when not nil) as the body, the 2xx answer decoded
// into out (when not nil).
func (c *Client) do(ctx context.Context, method, path string, query url.Values, in, out any, opts *callOptions) (*http.Response, error) {
	r := request{method: method, path: path, query: query, accept: "application/json", opts: opts}
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("client: encode %s %s: %w", method, path, err)
		}
		r.body, r.ctype = bytes.NewReader(b), "application/json"
	}
	resp, err := c.send(ctx, r)
	if err != nil {
		return nil, err
	}
	defer drainClose(resp.Body)
	if out != nil {
		if err := decodeJSONBody(resp, out); err != nil {
			return resp, err
		}
	}
	return resp, nil
}

// get decodes the JSON answer of GET path into a new T.
func get[T any](ctx context.Context, c *Client, path string, query url.Values) (*T, error) {
	var out T
	if _, err := c.do(ctx, http.MethodGet, path, query, nil, &out, nil); err != nil {
		return nil, err
	}
	return &out, nil
}

// call sends in (nil for no body) with method and decodes the answer into a
// new T.
func call[T any](ctx context.Context, c *Client, method, path string, in any, opts *callOptions) (*T, *http.Response, error) {
	var out T
	resp, err := c.do(ctx, method, path, nil, in, &out, opts)
	if err != nil {
		return nil, resp, err
	}
	return &out, resp, nil
}

func decodeJSONBody(resp *http.Response, out any) error {
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("client: decode the answer of %s %s: %w", resp.Request.Method, resp.Request.URL.Path, err)
	}
	return nil
}

// replayed reports whether the gateway answered from the record of an
// earlier call with the same Idempotency-Key.
func replayed(resp *http.Response) bool {
	return resp != nil && resp.Header.Get("Idempotent-Replayed") == "true"
}

// Health calls GET /healthz: nil when the process serves.
func (c *Client) Health(ctx context.Context) error {
	_, err := c.do(ctx, http.MethodGet, "/healthz", nil, nil, nil, nil)
	return err
}

// Ready calls GET /readyz: nil once the store answers and a sidecar has; an
// *Error with code unavailable before.
func (c *Client) Ready(ctx context.Context) error {
	_, err := c.do(ctx, http.MethodGet, "/readyz", nil, nil, nil, nil)
	return err
}

// maxDocument bounds the documents OpenAPI and Metrics read.
const maxDocument = 16 << 20

func (c *Client) document(ctx context.Context, path, accept string) ([]byte, error) {
	resp, err := c.send(ctx, request{method: http.MethodGet, path: path, accept: accept})
	if err != nil {
		return nil, err
	}
	defer drainClose(resp.Body)
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxDocument+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxDocument {
		return nil, fmt.Errorf("client: %s is larger than %d bytes", path, maxDocument)
	}
	return b, nil
}

// OpenAPI returns the gateway's OpenAPI document (GET /v1/openapi.yaml).
func (c *Client) OpenAPI(ctx context.Context) ([]byte, error) {
	return c.document(ctx, "/v1/openapi.yaml", "application/yaml")
}

// Metrics returns the gateway's Prometheus metrics in the text exposition
// format (GET /metrics).
func (c *Client) Metrics(ctx context.Context) ([]byte, error) {
	return c.document(ctx, "/metrics", "text/plain")
}
