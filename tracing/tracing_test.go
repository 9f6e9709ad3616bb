package tracing

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/goleak"

	"github.com/agentos-gateway/agentos-gateway/internal/otlpcollector"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Idle keep-alive connections of http.DefaultTransport, which the
		// unreachable-target test dials with, belong to no code under test.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}

// env is a Getenv over a map.
func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// TestExportEndpoint holds the endpoint spans go to, or its absence, to
// the standard variables, and refuses what the gateway cannot honour.
func TestExportEndpoint(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    string
		wantErr string
	}{
		{"unset", nil, "", ""},
		{"base", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, "http://127.0.0.1:4318/v1/traces", ""},
		{"base with a path", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://otel.example/prefix/"}, "https://otel.example/prefix/v1/traces", ""},
		{"traces endpoint as it is", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:4318/custom"}, "http://b:4318/custom", ""},
		{"http/protobuf", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, "http://a:4318/v1/traces", ""},
		{"sdk disabled", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_SDK_DISABLED": "true"}, "", ""},
		{"exporter none", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_TRACES_EXPORTER": "none"}, "", ""},
		{"grpc", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "", "not supported"},
		{"traces grpc", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4317", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, "", "not supported"},
		{"zipkin", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_TRACES_EXPORTER": "zipkin"}, "", "not supported"},
		{"no scheme", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "a:4318"}, "", "not an http"},
		{"credentials not repeated", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "ftp://user:pw@a/?token=t"}, "", "not an http"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := exportEndpoint(env(tc.env))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "pw") || strings.Contains(err.Error(), "token=") {
					t.Fatalf("err %v, want one saying %q without credentials", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("endpoint %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestSetupOff holds a gateway without an endpoint to the no-op provider,
// whose spans record nothing and cost no allocation, and to the W3C
// propagator, which passes the caller's trace context on.
func TestSetupOff(t *testing.T) {
	restore := saveGlobals(t)
	defer restore()
	stop, err := Setup(context.Background(), Config{Getenv: env(nil), Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := stop(context.Background()); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if _, ok := otel.GetTracerProvider().(noop.TracerProvider); !ok {
		t.Fatalf("provider %T, want the no-op one", otel.GetTracerProvider())
	}
	h := http.Header{"Traceparent": {callerParent}}
	ctx := otel.GetTextMapPropagator().Extract(context.Background(), propagation.HeaderCarrier(h))
	tracer := otel.Tracer("test")
	if n := testing.AllocsPerRun(100, func() {
		_, span := tracer.Start(ctx, "engine ExecuteRequest")
		span.End()
	}); n != 0 {
		t.Errorf("a no-op span under a remote parent costs %v allocations", n)
	}
	_, span := tracer.Start(ctx, "x")
	if span.IsRecording() {
		t.Error("a no-op span records")
	}
	out := http.Header{}
	otel.GetTextMapPropagator().Inject(trace.ContextWithSpan(ctx, span), propagation.HeaderCarrier(out))
	if out.Get("traceparent") != callerParent {
		t.Errorf("traceparent passed on %q, want the caller's %q", out.Get("traceparent"), callerParent)
	}
}

// TestSetupExports holds a gateway with an endpoint to spans exported over
// OTLP/HTTP, with the gateway's resource, and flushed by the function
// Setup returns.
func TestSetupExports(t *testing.T) {
	restore := saveGlobals(t)
	defer restore()
	col := otlpcollector.Start()
	defer col.Close()
	stop, err := Setup(context.Background(), Config{NodeID: "node-a", Version: "v1.2.3", Log: zerolog.Nop(),
		Getenv: env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": col.Endpoint(), "OTEL_SERVICE_NAME": "gw-test"})})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := otel.GetTracerProvider().(noop.TracerProvider); ok {
		t.Fatal("the no-op provider with an endpoint set")
	}
	_, span := otel.Tracer("test").Start(context.Background(), "exported")
	span.End()
	// The batch waits seconds before it sends; the flush at stop does not.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	spans := col.Spans()
	if err := col.Err(); err != nil || len(spans) != 1 || spans[0].Name != "exported" {
		t.Fatalf("collected %+v, %v", spans, err)
	}
	res := spans[0].Resource
	if res["service.name"] != "gw-test" || res["service.instance.id"] != "node-a" || res["service.version"] != "v1.2.3" {
		t.Errorf("resource %v", res)
	}
}

// saveGlobals returns a function that puts back the global provider and
// propagator a test replaces. The error handler Setup installs stays: the
// default one cannot be installed again, and the tests' handler logs to
// zerolog.Nop.
func saveGlobals(t *testing.T) func() {
	t.Helper()
	tp, prop := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	return func() {
		otel.SetTracerProvider(tp)
		otel.SetTextMapPropagator(prop)
	}
}
