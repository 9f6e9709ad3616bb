package handlers

import (
	"net/http"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentos-gateway/agentos-gateway/tracing"
)

// traceRequests makes the server span of each request (package tracing).
var traceRequests = tracing.Middleware(tracing.ServerOptions{RequestID: requestID})

// traces gives each request its span. It runs after withRequestID, whose
// id the span carries, and before observe, so that the span's status is
// the one the client got, a recovered panic's 500 included; the request's
// log lines carry the trace id, which leads from a line to its trace. The
// probes of load balancers and scrapers (every few seconds, each a trace of
// its own) are not traced.
func (s *Server) traces(next http.Handler) http.Handler {
	traced := traceRequests(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sc := trace.SpanContextFromContext(r.Context()); sc.IsValid() {
			log := zerolog.Ctx(r.Context()).With().Str("traceId", sc.TraceID().String()).Logger()
			r = r.WithContext(log.WithContext(r.Context()))
		}
		next.ServeHTTP(w, r)
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz", "/readyz", "/metrics":
			next.ServeHTTP(w, r)
		default:
			traced.ServeHTTP(w, r)
		}
	})
}
