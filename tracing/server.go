package tracing

import (
	"context"
	"net/http"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// RequestIDKey is the attribute of a server span that holds the id the
// gateway gave the request (its X-Request-ID), so that a span leads to the
// request's log lines and back.
const RequestIDKey = attribute.Key("agentos_gateway.request_id")

// ServerOptions configure Middleware.
type ServerOptions struct {
	// RequestID returns the id of the request in ctx; nil records none.
	RequestID func(ctx context.Context) string
	// TracerProvider makes the spans; nil is the global one, looked up on
	// each request so that the provider Setup installs is the one used.
	TracerProvider trace.TracerProvider
}

// serverKind is the option of every server span, made once: a variadic
// argument built at each call would be allocated at each call.
var serverKind = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}

// Middleware makes one server span per HTTP request, the child of the
// caller's span when the request carries a traceparent. The span is named
// "METHOD /route/{template}" (chi's route pattern, known once routed; the
// method alone for a request no route matched) and carries the method,
// route, status and request id; a 5xx status is an error.
//
// The span ends when the handler returns: a stream the handler serves
// itself keeps it open while it lasts, one handed to another goroutine (the
// SSE hub's hijacked connections) ends it at the hand-over, and nothing is
// kept of a span once ended. When the provider does not record (tracing
// off), the request goes on untouched but for the remote trace context,
// which stays in its context for Inject.
func Middleware(o ServerOptions) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			parent := Extract(r.Context(), r.Header)
			ctx, span := tracerOf(o.TracerProvider).Start(parent, r.Method, serverKind...)
			if !span.IsRecording() {
				if parent != r.Context() {
					r = r.WithContext(ctx)
				}
				next.ServeHTTP(w, r)
				return
			}
			span.SetAttributes(
				semconv.HTTPRequestMethodKey.String(r.Method),
				semconv.URLPathKey.String(r.URL.Path),
				semconv.UserAgentOriginalKey.String(r.UserAgent()),
			)
			rec := &statusRecorder{ResponseWriter: w}
			r = r.WithContext(ctx)
			defer func() {
				endServerSpan(span, r, rec.status, o.RequestID)
			}()
			next.ServeHTTP(rec, r)
		})
	}
}

// endServerSpan names the span after the route the request took and ends
// it with the response's status.
func endServerSpan(span trace.Span, r *http.Request, status int, requestID func(context.Context) string) {
	name := r.Method
	if rc := chi.RouteContext(r.Context()); rc != nil {
		if route := rc.RoutePattern(); route != "" {
			name += " " + route
			span.SetAttributes(semconv.HTTPRouteKey.String(route))
		}
	}
	span.SetName(name)
	if status != 0 {
		span.SetAttributes(semconv.HTTPResponseStatusCodeKey.Int(status))
	}
	if status >= http.StatusInternalServerError {
		span.SetStatus(codes.Error, http.StatusText(status))
	}
	if requestID != nil {
		if id := requestID(r.Context()); id != "" {
			span.SetAttributes(RequestIDKey.String(id))
		}
	}
	span.End()
}

// tracerOf is the package's tracer from tp, or from the global provider.
func tracerOf(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(ScopeName)
}

// statusRecorder records the status of a response for its span. It keeps
// what the handlers reach through it: Flush directly, Hijack and read
// deadlines through Unwrap (http.ResponseController, the WebSocket library).
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (w *statusRecorder) WriteHeader(code int) {
	// Informational answers come before the real one, except the switch to
	// a WebSocket, which is the last the request gets.
	if w.status == 0 && (code >= http.StatusOK || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusRecorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusRecorder) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
		return
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *statusRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }
