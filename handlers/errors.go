package handlers

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/rs/zerolog"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
)

// statusOf is the one place where error codes become HTTP statuses.
var statusOf = map[gateway.Code]int{
	gateway.CodeInvalidArgument:   http.StatusBadRequest,
	gateway.CodeUnauthenticated:   http.StatusUnauthorized,
	gateway.CodePermissionDenied:  http.StatusForbidden,
	gateway.CodeNotFound:          http.StatusNotFound,
	gateway.CodeConflict:          http.StatusConflict,
	gateway.CodePayloadTooLarge:   http.StatusRequestEntityTooLarge,
	gateway.CodeUnprocessable:     http.StatusUnprocessableEntity,
	gateway.CodeResourceExhausted: http.StatusTooManyRequests,
	gateway.CodeInternal:          http.StatusInternalServerError,
	gateway.CodeUnavailable:       http.StatusServiceUnavailable,
	gateway.CodeDeadlineExceeded:  http.StatusGatewayTimeout,
	gateway.CodeMethodNotAllowed:  http.StatusMethodNotAllowed,
	gateway.CodeRequestTimeout:    http.StatusRequestTimeout,
	gateway.CodeHeadersTooLarge:   http.StatusRequestHeaderFieldsTooLarge,
	gateway.CodeNotImplemented:    http.StatusNotImplemented,

	// Conditional and range requests of file downloads.
	gateway.CodePreconditionFailed:  http.StatusPreconditionFailed,
	gateway.CodeRangeNotSatisfiable: http.StatusRequestedRangeNotSatisfiable,
}

// writeError renders err as problem+json. Internal causes are logged, never
// shown.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	code := gateway.ErrorCode(err)
	status := statusOf[code]
	if status == 0 {
		status = http.StatusInternalServerError
	}
	p := api.Problem{
		Type: api.ProblemType + string(code), Title: http.StatusText(status), Status: status,
		Detail: gateway.ErrorMessage(err), Instance: r.URL.Path, Code: code, RequestID: requestID(r.Context()),
	}
	var ge *gateway.Error
	if errors.As(err, &ge) && len(ge.Details) > 0 {
		p.Details = ge.Details
	}
	log := zerolog.Ctx(r.Context())
	if status >= 500 {
		log.Error().Err(err).Int("status", status).Str("code", string(code)).Msg("request failed")
	} else {
		log.Debug().Err(err).Int("status", status).Str("code", string(code)).Msg("request refused")
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	// Not HTML-escaped: a problem is shown to people, and "Bearer <key>"
	// must not read "Bearer \u003ckey\u003e".
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(p)
}

// writeJSON writes v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
