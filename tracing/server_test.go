package tracing

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// The caller's trace context in the tests' requests.
const (
	callerTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpanID  = "00f067aa0ba902b7"
	callerParent  = "00-" + callerTraceID + "-" + callerSpanID + "-01"
)

// recorder is a provider whose ended spans the test reads.
func recorder(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	t.Helper()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, sr
}

// router is a chi router behind Middleware, with routes that answer as the
// gateway's do.
func router(tp trace.TracerProvider) http.Handler {
	r := chi.NewRouter()
	r.Use(Middleware(ServerOptions{TracerProvider: tp, RequestID: func(context.Context) string { return "req-1" }}))
	r.Route("/v1", func(r chi.Router) {
		r.Route("/vms/{vm}", func(r chi.Router) {
			r.Post("/exec", func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusOK)
				_, _ = w.Write([]byte(`{"exitCode":0}`))
			})
			r.Get("/files", func(w http.ResponseWriter, r *http.Request) {
				_, _ = w.Write([]byte("body"))
			})
			r.Delete("/", func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, "sidecar gone", http.StatusServiceUnavailable)
			})
		})
	})
	return r
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// TestMiddlewareSpans holds the server span of each request to its name
// (the route's template, set once routed), kind, status, request id and
// parent: the caller's span when the request carries a traceparent, none
// otherwise.
func TestMiddlewareSpans(t *testing.T) {
	for _, tc := range []struct {
		method, path, traceparent string
		wantName, wantRoute       string
		wantStatus                int64
		wantError                 bool
	}{
		{http.MethodPost, "/v1/vms/vm_1/exec", callerParent, "POST /v1/vms/{vm}/exec", "/v1/vms/{vm}/exec", 200, false},
		{http.MethodGet, "/v1/vms/vm_2/files?path=/a", "", "GET /v1/vms/{vm}/files", "/v1/vms/{vm}/files", 200, false},
		{http.MethodDelete, "/v1/vms/vm_3/", callerParent, "DELETE /v1/vms/{vm}", "/v1/vms/{vm}", 503, true},
		{http.MethodGet, "/nowhere", "", "GET", "", 404, false},
	} {
		t.Run(tc.wantName, func(t *testing.T) {
			tp, sr := recorder(t)
			req := httptest.NewRequest(tc.method, tc.path, nil)
			if tc.traceparent != "" {
				req.Header.Set("traceparent", tc.traceparent)
			}
			w := httptest.NewRecorder()
			router(tp).ServeHTTP(w, req)
			spans := sr.Ended()
			if len(spans) != 1 {
				t.Fatalf("%d spans ended, want 1", len(spans))
			}
			s := spans[0]
			if s.Name() != tc.wantName || s.SpanKind() != trace.SpanKindServer {
				t.Errorf("span %q of kind %v, want %q, server", s.Name(), s.SpanKind(), tc.wantName)
			}
			a := attrs(s)
			if got := a["http.response.status_code"].AsInt64(); got != tc.wantStatus || int64(w.Code) != tc.wantStatus {
				t.Errorf("status %d on the span, %d answered, want %d", got, w.Code, tc.wantStatus)
			}
			if got := a["http.route"].AsString(); got != tc.wantRoute {
				t.Errorf("http.route %q, want %q", got, tc.wantRoute)
			}
			if a["http.request.method"].AsString() != tc.method || a[RequestIDKey].AsString() != "req-1" {
				t.Errorf("attributes %v", a)
			}
			if isError := s.Status().Code == codes.Error; isError != tc.wantError {
				t.Errorf("status %v, want error %v", s.Status(), tc.wantError)
			}
			parent := s.Parent()
			if tc.traceparent == "" {
				if parent.IsValid() {
					t.Errorf("parent %v of a request without traceparent", parent)
				}
				return
			}
			if !parent.IsRemote() || parent.TraceID().String() != callerTraceID || parent.SpanID().String() != callerSpanID {
				t.Errorf("parent %v, want the caller's remote span %s/%s", parent, callerTraceID, callerSpanID)
			}
			if s.SpanContext().TraceID().String() != callerTraceID {
				t.Errorf("trace %s, want the caller's %s", s.SpanContext().TraceID(), callerTraceID)
			}
		})
	}
}

// TestMiddlewareInjects holds what a handler passes on (Inject) to the span
// of its request: the server span when tracing is on, the caller's own
// context when it is off, nothing without a caller's context and tracing.
func TestMiddlewareInjects(t *testing.T) {
	tp, sr := recorder(t)
	for _, tc := range []struct {
		name        string
		tp          trace.TracerProvider
		traceparent string
		want        func() string
	}{
		{"on", tp, callerParent, func() string {
			return "00-" + callerTraceID + "-" + sr.Ended()[0].SpanContext().SpanID().String() + "-01"
		}},
		{"off", noop.NewTracerProvider(), callerParent, func() string { return callerParent }},
		{"off, no caller context", noop.NewTracerProvider(), "", func() string { return "" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var passed http.Header
			h := Middleware(ServerOptions{TracerProvider: tc.tp})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				passed = http.Header{"Traceparent": {"stale"}}
				Inject(r.Context(), passed)
			}))
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			if tc.traceparent != "" {
				req.Header.Set("traceparent", tc.traceparent)
			}
			h.ServeHTTP(httptest.NewRecorder(), req)
			if got, want := passed.Get("traceparent"), tc.want(); got != want {
				t.Fatalf("traceparent passed on %q, want %q", got, want)
			}
		})
	}
}

// TestStatusRecorderKeepsWriterFeatures holds the writer a handler gets to
// what the gateway's handlers use of it: Flush, and Hijack and read
// deadlines through http.ResponseController.
func TestStatusRecorderKeepsWriterFeatures(t *testing.T) {
	tp, sr := recorder(t)
	served := make(chan struct{})
	srv := httptest.NewServer(after(served, Middleware(ServerOptions{TracerProvider: tp})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if err := rc.EnableFullDuplex(); err != nil {
			t.Errorf("EnableFullDuplex: %v", err)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		conn, buf, err := rc.Hijack()
		if err != nil {
			t.Errorf("Hijack: %v", err)
			return
		}
		_, _ = buf.WriteString("0\r\n\r\n")
		_ = buf.Flush()
		_ = conn.Close()
	}))))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	// The span ends as the handler returns, which may be after the client
	// read the end of the hijacked connection.
	<-served
	if spans := sr.Ended(); len(spans) != 1 || attrs(spans[0])["http.response.status_code"].AsInt64() != 200 {
		t.Fatalf("spans %v", spans)
	}
}

// after closes done once h has served a request.
func after(done chan struct{}, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(done)
		h.ServeHTTP(w, r)
	})
}
