// Package tracing gives the gateway its OpenTelemetry traces: Setup installs
// the tracer provider from the standard OTEL_* environment variables (spans
// exported over OTLP/HTTP when an endpoint is set, a no-op provider
// otherwise) and the W3C trace context propagator; Middleware makes the
// server span of each HTTP request; Transport and Inject carry the trace
// context, and a client span, on the requests the gateway sends (webhooks,
// calls to other nodes).
//
// The engine's and the store's spans are made in packages agentos and store
// with the OpenTelemetry API alone, under the span of the request that
// caused them: work the gateway does on its own (heartbeats, sweeps, the
// warm pool) starts no trace, so that an exporting gateway sends the traces
// of what it was asked to do rather than a stream of background noise.
package tracing

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of the spans this package makes.
const ScopeName = "github.com/agentos-gateway/agentos-gateway/tracing"

// DefaultServiceName is the service.name of the gateway's spans when
// OTEL_SERVICE_NAME does not set one.
const DefaultServiceName = "agentos-gateway"

// propagator reads and writes the W3C traceparent, tracestate and baggage
// headers. The package uses it rather than the global one so that the trace
// context passes through the gateway whatever was installed, and Setup
// installs it as the global one too, for any library that asks.
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Config is what Setup needs besides the OTEL_* environment variables.
type Config struct {
	// NodeID names this gateway among the nodes sharing a store; it is the
	// spans' service.instance.id.
	NodeID string
	// Version is the gateway's service.version; empty takes the version
	// the binary was built at, when the build recorded one.
	Version string
	// Getenv reads the environment; nil is os.Getenv. The exporter itself
	// reads its other settings (OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT,
	// _COMPRESSION, certificates) and the batch processor its OTEL_BSP_*
	// from the process's environment.
	Getenv func(string) string
	// Log receives the exporter's errors, at most one line a minute.
	Log zerolog.Logger
}

// Setup installs the global tracer provider and propagator from the
// standard environment variables, and returns the function that flushes the
// spans still buffered and stops the exporter, for the gateway's shutdown.
//
// Spans are exported over OTLP/HTTP (http/protobuf, the only protocol
// supported) when OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (used as it is) or
// OTEL_EXPORTER_OTLP_ENDPOINT (to which /v1/traces is appended) is set,
// unless OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none. Otherwise the
// no-op provider is installed: its spans cost a call that returns at once.
// The W3C propagator is installed in both cases, so that a request's
// traceparent reaches webhooks and other nodes even when nothing is
// exported.
func Setup(ctx context.Context, cfg Config) (func(context.Context) error, error) {
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	otel.SetTextMapPropagator(propagator)
	endpoint, err := exportEndpoint(getenv)
	if err != nil {
		return nil, err
	}
	if endpoint == "" {
		otel.SetTracerProvider(noop.NewTracerProvider())
		return func(context.Context) error { return nil }, nil
	}
	exporter, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res, err := newResource(ctx, cfg, getenv)
	if err != nil {
		// A partial resource (a malformed OTEL_RESOURCE_ATTRIBUTES) still
		// names the service; the spans are worth more than the attribute.
		cfg.Log.Warn().Err(err).Msg("tracing: some resource attributes are left out")
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	otel.SetErrorHandler(newErrorLog(cfg.Log, time.Minute))
	otel.SetTracerProvider(tp)
	cfg.Log.Info().Str("endpoint", redactURL(endpoint)).Msg("tracing: spans are exported over OTLP/HTTP")
	return func(ctx context.Context) error {
		if err := tp.Shutdown(ctx); err != nil {
			return fmt.Errorf("tracing: flush spans: %w", err)
		}
		return nil
	}, nil
}

// exportEndpoint is the URL spans are posted to, or "" when they are not
// exported; a setting the gateway cannot honour is an error, so that a
// misconfigured gateway says so at start rather than dropping its spans.
func exportEndpoint(getenv func(string) string) (string, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return "", nil
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "", "otlp":
	case "none":
		return "", nil
	default:
		return "", fmt.Errorf("tracing: OTEL_TRACES_EXPORTER=%s is not supported: otlp or none", exp)
	}
	endpoint, name := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")), "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	signalPath := false
	if endpoint == "" {
		endpoint, name, signalPath = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT")), "OTEL_EXPORTER_OTLP_ENDPOINT", true
	}
	if endpoint == "" {
		return "", nil
	}
	protocol := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
	if protocol == "" {
		protocol = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
	}
	if protocol != "" && protocol != "http/protobuf" {
		return "", fmt.Errorf("tracing: OTLP protocol %q is not supported: http/protobuf", protocol)
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("tracing: %s=%s is not an http:// or https:// URL", name, redactURL(endpoint))
	}
	if signalPath {
		// The specification's rule for the base endpoint: the signal's
		// path goes after the base URL's own path.
		u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
	}
	return u.String(), nil
}

// newResource describes the gateway: its service name, version and node.
// Later sources win: OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME over
// the defaults.
func newResource(ctx context.Context, cfg Config, getenv func(string) string) (*resource.Resource, error) {
	attrs := resource.WithAttributes(semconv.ServiceName(DefaultServiceName))
	opts := []resource.Option{resource.WithTelemetrySDK(), attrs}
	if v := version(cfg.Version); v != "" {
		opts = append(opts, resource.WithAttributes(semconv.ServiceVersion(v)))
	}
	if cfg.NodeID != "" {
		opts = append(opts, resource.WithAttributes(semconv.ServiceInstanceID(cfg.NodeID)))
	}
	opts = append(opts, resource.WithFromEnv())
	if name := strings.TrimSpace(getenv("OTEL_SERVICE_NAME")); name != "" {
		opts = append(opts, resource.WithAttributes(semconv.ServiceName(name)))
	}
	return resource.New(ctx, opts...)
}

// version is the configured version, else the main module's version as the
// build recorded it ("(devel)" is none).
func version(configured string) string {
	if configured != "" {
		return configured
	}
	info, ok := debug.ReadBuildInfo()
	if !ok || info.Main.Version == "" || info.Main.Version == "(devel)" {
		return ""
	}
	return info.Main.Version
}

// redactURL drops what a URL may carry of credentials (user information,
// query), for logs and errors.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

// errorLog logs the SDK's errors (an unreachable collector fails every
// batch) at most once per period, with the count of those left out.
type errorLog struct {
	log    zerolog.Logger
	period time.Duration

	mu      sync.Mutex
	last    time.Time
	dropped int
}

func newErrorLog(log zerolog.Logger, period time.Duration) *errorLog {
	return &errorLog{log: log, period: period}
}

// Handle implements otel.ErrorHandler.
func (e *errorLog) Handle(err error) {
	e.mu.Lock()
	now := time.Now()
	if !e.last.IsZero() && now.Sub(e.last) < e.period {
		e.dropped++
		e.mu.Unlock()
		return
	}
	dropped := e.dropped
	e.last, e.dropped = now, 0
	e.mu.Unlock()
	e.log.Warn().Err(err).Int("suppressed", dropped).Msg("tracing: span export")
}

// Inject writes ctx's trace context (traceparent, tracestate) and baggage
// into h, replacing what h carried of them; with no span context in ctx it
// only removes them. Call it on any request the gateway sends on behalf of
// a request it serves (Transport does it for its client's requests).
func Inject(ctx context.Context, h http.Header) {
	for _, k := range propagator.Fields() {
		h.Del(k)
	}
	propagator.Inject(ctx, propagation.HeaderCarrier(h))
}

// Extract returns ctx with the remote trace context and baggage h carries,
// if any.
func Extract(ctx context.Context, h http.Header) context.Context {
	return propagator.Extract(ctx, propagation.HeaderCarrier(h))
}
