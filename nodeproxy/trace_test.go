package nodeproxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/agentos-gateway/agentos-gateway/tracing"
)

// testCluster signs nothing and declares no node dead.
type testCluster struct{}

func (testCluster) Sign(*http.Request)                                   {}
func (testCluster) AwaitVerdict(context.Context, string, time.Time) bool { return false }

// testConns counts nothing.
type testConns struct{}

func (testConns) Begin() bool { return true }
func (testConns) End()        {}

// TestForwardPassesTraceContext holds a forwarded request to the trace
// context the owner node gets: under the forwarding node's server span when
// tracing is on, the caller's own traceparent when it is off, and none for
// a traceparent the forwarding node could not read.
func TestForwardPassesTraceContext(t *testing.T) {
	const (
		callerTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
		callerParent = "00-" + callerTrace + "-00f067aa0ba902b7-01"
	)
	recording := sdktrace.NewTracerProvider()
	defer func() { _ = recording.Shutdown(context.Background()) }()

	got := make(chan string, 1)
	owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("traceparent")
		w.WriteHeader(http.StatusNoContent)
	}))
	defer owner.Close()
	draining := make(chan struct{})
	defer close(draining)
	p := New(Config{Cluster: testCluster{}, Conns: testConns{}, IsUpgrade: func(*http.Request) bool { return false },
		Draining: draining, RequestID: func(context.Context) string { return "req-1" },
		Refuse: func(w http.ResponseWriter, r *http.Request, err error) {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}})
	defer p.Close()

	for _, tc := range []struct {
		name        string
		tp          trace.TracerProvider
		traceparent string
		// want is the traceparent the owner should get, given the span
		// context of the forwarding node's request.
		want func(front trace.SpanContext) string
	}{
		{"on", recording, callerParent, func(front trace.SpanContext) string {
			if !front.IsValid() || front.SpanID().String() == "00f067aa0ba902b7" {
				t.Errorf("the forwarding node's span %v is not a span of its own", front)
			}
			return "00-" + callerTrace + "-" + front.SpanID().String() + "-01"
		}},
		{"off", noop.NewTracerProvider(), callerParent, func(trace.SpanContext) string { return callerParent }},
		{"off, unreadable", noop.NewTracerProvider(), "00-garbage", func(trace.SpanContext) string { return "" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var front trace.SpanContext
			frontSrv := httptest.NewServer(tracing.Middleware(tracing.ServerOptions{TracerProvider: tc.tp})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				front = trace.SpanContextFromContext(r.Context())
				p.Forward(w, r, Node{ID: "owner", Addr: owner.URL}, func(w http.ResponseWriter, r *http.Request, _ time.Time) {
					http.Error(w, "owner gone", http.StatusBadGateway)
				})
			})))
			defer frontSrv.Close()
			req, _ := http.NewRequest(http.MethodPost, frontSrv.URL+"/v1/vms/vm_1/exec", nil)
			req.Header.Set("traceparent", tc.traceparent)
			resp, err := frontSrv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusNoContent {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if g, want := <-got, tc.want(front); g != want {
				t.Fatalf("the owner got traceparent %q, want %q", g, want)
			}
		})
	}
}
