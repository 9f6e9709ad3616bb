package tracing

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// TestTransport holds a request sent through Transport to a client span
// named after it, with the target's host and the answer's status, and to
// the traceparent it carries: the client span's, under the span of the
// request's context. The caller's request is left as it was.
func TestTransport(t *testing.T) {
	tp, sr := recorder(t)
	var got http.Header
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		if r.URL.Path == "/fail" {
			w.WriteHeader(http.StatusBadGateway)
		}
	}))
	defer hook.Close()
	c := &http.Client{Transport: &transport{base: hook.Client().Transport, name: "webhook", tp: tp}}
	u, _ := url.Parse(hook.URL)
	port, _ := strconv.Atoi(u.Port())

	for _, tc := range []struct {
		path   string
		status int
	}{{"/hook/secret-token", 200}, {"/fail", 502}} {
		sr.Reset()
		ctx, parent := tp.Tracer("test").Start(context.Background(), "parent")
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, hook.URL+tc.path, strings.NewReader("{}"))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		parent.End()
		if req.Header.Get("traceparent") != "" {
			t.Errorf("the caller's request was changed: %v", req.Header)
		}
		spans := sr.Ended()
		if len(spans) != 2 {
			t.Fatalf("%d spans, want the client span and its parent", len(spans))
		}
		s := spans[0]
		if s.Name() != "webhook POST" || s.SpanKind() != trace.SpanKindClient || s.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("span %q of kind %v under %v, want webhook POST, client, under %v", s.Name(), s.SpanKind(), s.Parent().SpanID(), parent.SpanContext().SpanID())
		}
		want := "00-" + s.SpanContext().TraceID().String() + "-" + s.SpanContext().SpanID().String() + "-01"
		if got.Get("traceparent") != want {
			t.Errorf("the webhook got traceparent %q, want %q", got.Get("traceparent"), want)
		}
		a := attrs(s)
		if a["server.address"].AsString() != "127.0.0.1" || a["server.port"].AsInt64() != int64(port) || a["http.response.status_code"].AsInt64() != int64(tc.status) {
			t.Errorf("attributes %v", a)
		}
		for k, v := range a {
			if strings.Contains(v.Emit(), "secret-token") {
				t.Errorf("attribute %s holds the URL's path: %s", k, v.Emit())
			}
		}
		if isError := s.Status().Code == codes.Error; isError != (tc.status >= 400) {
			t.Errorf("status %v for %d", s.Status(), tc.status)
		}
	}
}

// TestTransportUnreachable holds a request that gets no answer to an error
// span whose description does not repeat the URL.
func TestTransportUnreachable(t *testing.T) {
	tp, sr := recorder(t)
	hook := httptest.NewServer(http.NotFoundHandler())
	addr := hook.URL
	hook.Close()
	c := &http.Client{Transport: &transport{base: http.DefaultTransport, name: "webhook", tp: tp}}
	ctx, parent := tp.Tracer("test").Start(context.Background(), "parent")
	defer parent.End()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, addr+"/hook/secret-token", nil)
	if resp, err := c.Do(req); err == nil {
		_ = resp.Body.Close()
		t.Fatal("a closed server answered")
	}
	spans := sr.Ended()
	if len(spans) != 1 || spans[0].Status().Code != codes.Error || strings.Contains(spans[0].Status().Description, "secret-token") {
		t.Fatalf("spans %v", spans)
	}
}

// TestTransportWithoutTrace holds a request whose context carries no span
// context to being sent as it is, without trace headers.
func TestTransportWithoutTrace(t *testing.T) {
	var got http.Header
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = r.Header.Clone() }))
	defer hook.Close()
	tr := Transport(hook.Client().Transport, "webhook").(*transport)
	tr.tp = noop.NewTracerProvider()
	c := &http.Client{Transport: tr}
	resp, err := c.Post(hook.URL, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if got.Get("traceparent") != "" {
		t.Fatalf("traceparent %q sent without a trace", got.Get("traceparent"))
	}
}

// TestTransportClosesIdleConnections holds http.Client.CloseIdleConnections
// to reaching the wrapped transport, which webhook.Client.Close relies on.
func TestTransportClosesIdleConnections(t *testing.T) {
	base := &closeCounter{RoundTripper: http.DefaultTransport}
	(&http.Client{Transport: Transport(base, "webhook")}).CloseIdleConnections()
	if base.closed != 1 {
		t.Fatalf("the base transport's idle connections were closed %d times", base.closed)
	}
}

type closeCounter struct {
	http.RoundTripper
	closed int
}

func (c *closeCounter) CloseIdleConnections() { c.closed++ }
