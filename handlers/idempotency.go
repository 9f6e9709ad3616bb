package handlers

import (
	"context"
	"net/http"

	"github.com/rs/zerolog"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/idempotency"
)

// idempotencyHeader is the header that carries a client's idempotency key.
const idempotencyHeader = "Idempotency-Key"

// idempotent runs op once per Idempotency-Key: a retry within the TTL gets
// the first outcome, answered with status (or as the recorded problem),
// without running op again. Without the header op simply runs.
func (s *Server) idempotent(w http.ResponseWriter, r *http.Request, body []byte, status int, op func(ctx context.Context) (any, error)) {
	s.idempotentTold(w, r, body, status, op, nil)
}

// idempotentTold is idempotent whose recorded outcome comes with the
// events told builds of it (exec.done), in the same transaction.
func (s *Server) idempotentTold(w http.ResponseWriter, r *http.Request, body []byte, status int, op func(ctx context.Context) (any, error),
	told func(key string, v any, err error) []gateway.Event) {
	claim, outcome, ok := s.claimIdempotencyKey(w, r, body, principalFrom(r.Context()).tenant)
	switch {
	case !ok:
		return
	case outcome != nil:
		s.replayOutcome(w, r, status, outcome)
		return
	case claim == nil:
		v, err := op(r.Context())
		if err != nil {
			writeError(w, r, err)
			return
		}
		writeJSON(w, status, v)
		return
	}
	// The operation runs to its end and its outcome is recorded even if the
	// client goes away meanwhile: the retry it will make must get that
	// outcome, not run the command a second time.
	v, opErr := op(context.WithoutCancel(r.Context()))
	var evs []gateway.Event
	if told != nil {
		evs = told(claim.Key(), v, opErr)
	}
	if err := s.recordOutcome(r, claim, v, opErr, evs...); err != nil {
		writeError(w, r, err)
		return
	}
	if opErr != nil {
		writeError(w, r, opErr)
		return
	}
	writeJSON(w, status, v)
}

// replayOutcome answers a recorded outcome: its value with status, or its
// problem.
func (s *Server) replayOutcome(w http.ResponseWriter, r *http.Request, status int, outcome *idempotency.Outcome) {
	w.Header().Set("Idempotent-Replayed", "true")
	var v any
	if err := outcome.Err(); err != nil {
		writeError(w, r, err)
	} else if err := outcome.Decode(&v); err != nil {
		writeError(w, r, err)
	} else {
		writeJSON(w, status, v)
	}
}

// claimIdempotencyKey claims the request's Idempotency-Key: a claim for the
// caller to run the operation under, the outcome recorded by an earlier
// identical request, or neither when the request has no key. It answers the
// problem and reports false when the key cannot be used.
func (s *Server) claimIdempotencyKey(w http.ResponseWriter, r *http.Request, body []byte, tenant gateway.Tenant) (*idempotency.Claim, *idempotency.Outcome, bool) {
	key := r.Header.Get(idempotencyHeader)
	if key == "" {
		return nil, nil, true
	}
	if err := idempotency.CheckKey(key, idempotencyHeader); err != nil {
		writeError(w, r, err)
		return nil, nil, false
	}
	// The key names a request to a route: the same key on another route is
	// another request.
	claim, outcome, err := s.keeper.Begin(r.Context(), tenant.ID, key, idempotency.RequestHash(r.Method+" "+r.URL.Path, body))
	if err != nil {
		writeError(w, r, err)
		return nil, nil, false
	}
	return claim, outcome, true
}

// recordOutcome records the outcome of a claimed key. A refusal before
// anything ran releases the key instead, so the client may retry once it
// fixed the cause.
func (s *Server) recordOutcome(r *http.Request, claim *idempotency.Claim, v any, opErr error, evs ...gateway.Event) error {
	if opErr != nil {
		switch gateway.ErrorCode(opErr) {
		case gateway.CodeInvalidArgument, gateway.CodeNotFound, gateway.CodeConflict, gateway.CodeResourceExhausted:
			// The refusal is what the client must see; a key that could not
			// be released only expires later.
			if err := claim.Release(r.Context()); err != nil {
				zerolog.Ctx(r.Context()).Warn().Err(err).Msg("release an idempotency key")
			}
			return nil
		}
	}
	if err := claim.Complete(r.Context(), v, opErr, evs...); err != nil {
		return err
	}
	if len(evs) > 0 && s.cfg.Webhooks != nil {
		s.cfg.Webhooks.Wake()
	}
	return nil
}
