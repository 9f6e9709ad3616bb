package handlers

import (
	"net/http"

	"github.com/rs/cors"
)

// corsAllowedHeaders are the request headers a browser may send cross-origin:
// the key, resuming streams, idempotent retries, async prompts and the
// caller's request id.
var corsAllowedHeaders = []string{"Authorization", "Content-Type", "Last-Event-ID", "Idempotency-Key", "Prefer", "X-Request-ID", "Range", "If-None-Match", "If-Modified-Since", "If-Range"}

// corsExposedHeaders are the response headers a cross-origin script may read.
var corsExposedHeaders = []string{"Location", "Retry-After", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset",
	"X-Request-ID", "Idempotent-Replayed", "ETag", "Last-Modified", "Content-Range", "Content-Length", "Allow", "X-AgentOS-Node"}

// cors answers preflight requests and adds the CORS headers for the origins
// of --cors-origins; with none configured it adds nothing, so browsers
// allow same-origin calls only. Preflights are answered before routing and
// authentication: a browser sends them without credentials.
func (s *Server) cors() func(http.Handler) http.Handler {
	if len(s.cfg.AllowedOrigins) == 0 {
		return func(next http.Handler) http.Handler { return next }
	}
	c := cors.New(cors.Options{
		AllowedOrigins: s.cfg.AllowedOrigins,
		AllowedMethods: append([]string{}, routeMethods...),
		AllowedHeaders: corsAllowedHeaders,
		ExposedHeaders: corsExposedHeaders,
		// The key travels in a header, never in a cookie.
		AllowCredentials: false,
		MaxAge:           600,
	})
	return c.Handler
}
