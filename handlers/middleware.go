package handlers

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"math"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/rs/zerolog"
	"golang.org/x/time/rate"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/attach"
)

type ctxKey int

const (
	requestIDKey ctxKey = iota
	principalKey
)

func requestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey).(string)
	return id
}

// withRequestID gives every request an id (the caller's X-Request-ID when it
// looks sane) and a logger that carries it on every line.
func (s *Server) withRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-ID")
		if id == "" || len(id) > 128 || strings.ContainsAny(id, "\r\n") {
			var b [8]byte
			_, _ = rand.Read(b[:])
			id = hex.EncodeToString(b[:])
		}
		w.Header().Set("X-Request-ID", id)
		log := s.log.With().Str("requestId", id).Logger()
		ctx := context.WithValue(r.Context(), requestIDKey, id)
		ctx = log.WithContext(ctx)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// statusWriter records the status for logs and metrics. It keeps the
// Flusher the SSE handlers need.
type statusWriter struct {
	http.ResponseWriter
	r      *http.Request
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(code int) {
	if code == http.StatusMethodNotAllowed && w.status == 0 && w.Header().Get("Content-Type") == "" {
		// chi's bare 405; see methodNotAllowed.
		methodNotAllowed(w, w.r)
		return
	}
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// observe logs each request and records its latency by route pattern.
func (s *Server) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		note := &auditNote{}
		r = r.WithContext(context.WithValue(r.Context(), auditNoteKey{}, note))
		sw := &statusWriter{ResponseWriter: w, r: r}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				zerolog.Ctx(r.Context()).Error().Interface("panic", v).Bytes("stack", debug.Stack()).Msg("handler panic")
				if sw.status == 0 {
					writeError(sw, r, gateway.Errorf(gateway.CodeInternal, "internal error"))
				}
			}
			route := chi.RouteContext(r.Context()).RoutePattern()
			status := sw.status
			if status == 0 {
				status = http.StatusOK
			}
			if s.store != nil {
				s.recordAudit(r, note, route, status)
			}
			if route == "" {
				route = "unmatched"
			}
			d := time.Since(start)
			s.metrics.httpDuration.WithLabelValues(r.Method, route, strconv.Itoa(status)).Observe(d.Seconds())
			zerolog.Ctx(r.Context()).Info().Str("method", r.Method).Str("route", route).Str("path", r.URL.Path).
				Int("status", status).Int64("bytes", sw.bytes).Dur("duration", d).Msg("request")
		}()
		next.ServeHTTP(sw, r)
	})
}

// principal is who is calling: a tenant, through one of its keys.
type principal struct {
	tenant gateway.Tenant
	key    gateway.APIKey
	admin  bool
	// token is the token the request came with, nil for an API key.
	token *gateway.Token
}

func principalFrom(ctx context.Context) principal {
	p, _ := ctx.Value(principalKey).(principal)
	return p
}

// authenticate resolves the bearer key to its tenant on every request (no
// cache: a deleted key stops working at once) and applies the tenant's rate
// limit.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The scheme name is case-insensitive (RFC 9110 §11.1).
		scheme, secret, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		secret = strings.TrimSpace(secret)
		ok = ok && strings.EqualFold(scheme, "Bearer") && secret != ""
		// Browsers cannot set Authorization on a WebSocket: an upgrade
		// without one may carry the key as a subprotocol (package attach).
		fromProtocol := false
		if !ok && r.Header.Get("Authorization") == "" && attach.IsUpgrade(r) {
			secret, ok = attach.BearerFromProtocols(r)
			fromProtocol = ok
		}
		if q := r.URL.Query().Get(accessTokenParam); !ok && r.Header.Get("Authorization") == "" && q != "" {
			// EventSource cannot send headers: a token, never a key, may
			// come in the query of a request that streams or upgrades.
			if strings.HasPrefix(q, gateway.TokenPrefix) {
				noteOf(r.Context()).token = true
				s.noteRoute(r)
			}
			if !streamsOrUpgrades(r) || !strings.HasPrefix(q, gateway.TokenPrefix) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="agentos-gateway", error="invalid_request"`)
				writeError(w, r, gateway.Errorf(gateway.CodeUnauthenticated,
					"access_token is accepted only for a token, on a GET that streams (Accept: text/event-stream) or upgrades to a WebSocket; send Authorization: Bearer instead"))
				return
			}
			secret, ok = q, true
			// From here on the token travels as a header, as any: the
			// query is forwarded to other nodes and to guest ports, and a
			// credential must not reach a guest.
			r = r.Clone(r.Context())
			query := r.URL.Query()
			query.Del(accessTokenParam)
			r.URL.RawQuery = query.Encode()
			r.Header.Set("Authorization", "Bearer "+secret)
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="agentos-gateway"`)
			writeError(w, r, gateway.Errorf(gateway.CodeUnauthenticated, "an API key is required: Authorization: Bearer <key>"))
			return
		}
		if t := tokenSecret(secret, fromProtocol); t != "" {
			s.authenticateToken(w, r, t, next)
			return
		}
		key, tenant, err := s.store.LookupAPIKey(r.Context(), secret)
		if fromProtocol && err != nil {
			if decoded, derr := base64.RawURLEncoding.DecodeString(secret); derr == nil {
				key, tenant, err = s.store.LookupAPIKey(r.Context(), string(decoded))
			}
		}
		if err != nil {
			if gateway.ErrorCode(err) == gateway.CodeUnauthenticated || gateway.ErrorCode(err) == gateway.CodeNotFound {
				w.Header().Set("WWW-Authenticate", `Bearer realm="agentos-gateway", error="invalid_token"`)
				writeError(w, r, gateway.Errorf(gateway.CodeUnauthenticated, "unknown or revoked API key"))
				return
			}
			writeError(w, r, err)
			return
		}
		if !s.admit(w, r, tenant) {
			return
		}
		note := noteOf(r.Context())
		note.tenantID, note.keyID, note.forwarded = tenant.ID, key.ID, isForwarded(r.Context())
		log := zerolog.Ctx(r.Context()).With().Str("tenant", tenant.ID).Logger()
		ctx := context.WithValue(r.Context(), principalKey, principal{tenant: tenant, key: key, admin: key.Admin})
		next.ServeHTTP(w, r.WithContext(log.WithContext(ctx)))
	})
}

// admit applies the tenant's rate limit to r, and answers 429 when it is
// over. A request another node forwarded was limited there: the rate limit
// is per node (README, "Running several nodes").
func (s *Server) admit(w http.ResponseWriter, r *http.Request, tenant gateway.Tenant) bool {
	rl, ok := rateState{}, true
	if !isForwarded(r.Context()) {
		rl, ok = s.limiter.allow(tenant, time.Now())
	}
	if rl.limited {
		// The IETF RateLimit header fields, so that clients can pace
		// themselves before they are refused.
		w.Header().Set("RateLimit-Limit", strconv.Itoa(rl.limit))
		w.Header().Set("RateLimit-Remaining", strconv.Itoa(rl.remaining))
		w.Header().Set("RateLimit-Reset", strconv.Itoa(rl.resetSeconds))
	}
	if !ok {
		w.Header().Set("Retry-After", strconv.Itoa(max(1, rl.retrySeconds)))
		writeError(w, r, gateway.Errorf(gateway.CodeResourceExhausted, "tenant %s exceeds %g requests per second", tenant.ID, tenant.Quotas.RequestsPerSecond).WithDetail("quota", "requestsPerSecond"))
	}
	return ok
}

// adminOnly refuses tenant keys.
func adminOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !principalFrom(r.Context()).admin {
			writeError(w, r, gateway.Errorf(gateway.CodePermissionDenied, "this route needs the admin key"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// limiter keeps one token bucket per tenant, rebuilt when its quota changes.
type limiter struct {
	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	rps float64
	l   *rate.Limiter
}

// rateState is what a tenant's bucket says of a request.
type rateState struct {
	limited      bool // the tenant has a rate limit at all
	limit        int  // requests per window of one second (the burst)
	remaining    int  // requests left now
	resetSeconds int  // until the bucket is full again
	retrySeconds int  // until the next request would be allowed
}

// allow takes a token from the tenant's bucket and reports whether the
// request may go on, and the bucket's state for the RateLimit headers.
func (l *limiter) allow(t gateway.Tenant, now time.Time) (rateState, bool) {
	rps := t.Quotas.RequestsPerSecond
	if rps <= 0 {
		return rateState{}, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buckets == nil {
		l.buckets = map[string]*bucket{}
	}
	b := l.buckets[t.ID]
	if b == nil || b.rps != rps {
		burst := max(1, int(rps))
		b = &bucket{rps: rps, l: rate.NewLimiter(rate.Limit(rps), burst)}
		l.buckets[t.ID] = b
	}
	ok := b.l.AllowN(now, 1)
	tokens := b.l.TokensAt(now)
	burst := b.l.Burst()
	st := rateState{limited: true, limit: burst, remaining: max(0, int(tokens))}
	st.resetSeconds = int(math.Ceil((float64(burst) - tokens) / rps))
	if tokens < 1 {
		st.retrySeconds = int(math.Ceil((1 - tokens) / rps))
	}
	return st, ok
}

// pathParam returns a path parameter unescaped: chi matches on the raw path
// when the client escaped something, and hands the segment over as sent.
func pathParam(r *http.Request, name string) string {
	v := chi.URLParam(r, name)
	if u, err := url.PathUnescape(v); err == nil {
		return u
	}
	return v
}

func parseUintParam(r *http.Request, name string) (uint64, error) {
	v := chi.URLParam(r, name)
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil {
		return 0, gateway.Errorf(gateway.CodeInvalidArgument, "%s must be a number, not %q", name, v).WithDetail("field", name)
	}
	return n, nil
}

func queryBool(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, gateway.Errorf(gateway.CodeInvalidArgument, "query parameter %s must be true or false", name).WithDetail("field", name)
	}
	return b, nil
}

func queryInt(r *http.Request, name string, def, lo, hi int) (int, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, gateway.Errorf(gateway.CodeInvalidArgument, "query parameter %s must be an integer from %d to %d", name, lo, hi).WithDetail("field", name)
	}
	return n, nil
}

// queryTime reads an RFC 3339 time from the query parameter name; absent,
// the zero time.
func queryTime(r *http.Request, name string) (time.Time, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, gateway.Errorf(gateway.CodeInvalidArgument, "%s must be an RFC 3339 time, such as 2026-01-02T15:04:05Z", name).WithDetail("field", name)
	}
	return t, nil
}
