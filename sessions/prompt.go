package sessions

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/idempotency"
	"github.com/agentos-gateway/agentos-gateway/vms"
)

// PromptRequest is a prompt for a session's agent.
type PromptRequest struct {
	// Content is a JSON array of ACP content blocks.
	Content json.RawMessage
	// IdempotencyKey makes retries safe: the same key within 24 h gets the
	// first turn's result and never runs the turn twice.
	IdempotencyKey string
	// Async returns as soon as the turn has started.
	Async bool
}

// PromptOutcome is what Prompt reports: the result of the turn, or for an
// async prompt only that it was accepted.
type PromptOutcome struct {
	Result   gateway.PromptResult
	Accepted bool // async: the turn runs
	Replayed bool // the result was recorded under the idempotency key
}

// turn is a running prompt.
type turn struct {
	// claim is the turn's idempotency key, if any; its hash tells a retry
	// from a reuse of the key for another prompt.
	claim  *idempotency.Claim
	done   chan struct{}
	result gateway.PromptResult
	err    error
}

// Prompt runs a turn of a session. The turn belongs to the service, not to
// the request: it runs to its end and its outcome is recorded even when the
// caller goes away, so that a retry with the same key gets it.
func (s *Service) Prompt(ctx context.Context, tenantID, vmID, id string, req PromptRequest) (PromptOutcome, error) {
	if err := ValidateContent(req.Content); err != nil {
		return PromptOutcome{}, err
	}
	ls, release, err := s.live(ctx, tenantID, vmID, id)
	if err != nil {
		return PromptOutcome{}, err
	}
	if agent, vars := ls.r.noCredentials(id); vars != nil {
		release()
		return PromptOutcome{}, errNoCredentials(agent, vars)
	}
	var claim *idempotency.Claim
	if req.IdempotencyKey != "" {
		if s.cfg.Idempotency == nil {
			release()
			return PromptOutcome{}, gateway.Errorf(gateway.CodeUnavailable, "idempotent prompts are not configured")
		}
		// The key names a prompt of one session; the hash, its content.
		key := "prompt:" + vmID + "/" + id + "/" + req.IdempotencyKey
		hash := idempotency.Hash(req.Content)
		if t := ls.r.runningTurn(id); t != nil && t.claim != nil && t.claim.Key() == key {
			release()
			if t.claim.Hash() != hash {
				return PromptOutcome{}, gateway.Errorf(gateway.CodeUnprocessable, "idempotencyKey %q was used for a different prompt", req.IdempotencyKey).
					WithDetail("field", "idempotencyKey")
			}
			return s.await(ctx, t, req.Async)
		}
		var outcome *idempotency.Outcome
		claim, outcome, err = s.cfg.Idempotency.Begin(ctx, tenantID, key, hash)
		if err != nil {
			release()
			return PromptOutcome{}, err
		}
		if outcome != nil {
			release()
			return replay(outcome)
		}
	}
	t := &turn{claim: claim, done: make(chan struct{})}
	if err := s.startTurn(ls, id, t); err != nil {
		release()
		if claim != nil {
			_ = claim.Release(ctx)
		}
		return PromptOutcome{}, err
	}
	s.log.Debug().Str("vm", vmID).Str("session", id).Bool("async", req.Async).Msg("turn started")
	go s.runTurn(ls, tenantID, vmID, id, t, req, release)
	return s.await(ctx, t, req.Async)
}

// startTurn claims the session's one turn slot and the service's wait group.
func (s *Service) startTurn(ls liveSession, id string, t *turn) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return gateway.Errorf(gateway.CodeUnavailable, "the gateway is shutting down")
	}
	ls.r.mu.Lock()
	defer ls.r.mu.Unlock()
	st := ls.r.sessions[id]
	if st == nil || ls.r.ended {
		return gateway.Errorf(gateway.CodeConflict, "session %s was deleted or its VM has ended", id)
	}
	if st.turn != nil {
		return gateway.Errorf(gateway.CodeConflict, "a turn is already running in session %s; wait for it or cancel it", id).
			WithDetail("reason", "turn_running")
	}
	st.turn = t
	s.wg.Add(1)
	return nil
}

func (s *Service) runTurn(ls liveSession, tenantID, vmID, id string, t *turn, req PromptRequest, release func()) {
	defer s.wg.Done()
	defer release()
	// A session unloaded earlier is loaded again by this prompt.
	if ls.r.setStoredState(id, gateway.SessionIdle) {
		if err := s.store.SetSessionState(s.ctx, vmID, id, gateway.SessionIdle); err != nil {
			s.log.Warn().Err(err).Str("session", id).Msg("record session state")
		}
	}
	res, err := ls.handle().Prompt(s.ctx, req.Content, req.IdempotencyKey)
	t.result = gateway.PromptResult{StopReason: res.StopReason, Message: orNull(res.Message)}
	t.err = vms.EngineError(err, "prompt")
	if t.claim != nil {
		s.recordTurn(id, t)
	}
	end := gateway.SessionTurnEndData{VMID: vmID, SessionID: id, StopReason: res.StopReason}
	if t.err != nil {
		end.Error = gateway.ErrorMessage(t.err)
	}
	s.tell(gateway.NewEvent(gateway.EventSessionTurnEnd, tenantID, vmID, s.cfg.Now().UTC(), end))
	ls.r.mu.Lock()
	if st := ls.r.sessions[id]; st != nil && st.turn == t {
		st.turn = nil
	}
	ls.r.mu.Unlock()
	close(t.done)
}

// recordTurn keeps a turn's outcome under its idempotency key. A turn that
// failed because its VM, sidecar or the gateway went away is not kept: it
// cannot have finished, and the VM it ran in can run nothing more, so the
// key is released as exec releases keys of requests that did not run.
func (s *Service) recordTurn(id string, t *turn) {
	var err error
	switch gateway.ErrorCode(t.err) {
	case gateway.CodeUnavailable, gateway.CodeConflict:
		err = t.claim.Release(s.ctx)
	default:
		var v any
		if t.err == nil {
			v = t.result
		}
		err = t.claim.Complete(s.ctx, v, t.err)
	}
	if err != nil {
		s.log.Error().Err(err).Str("session", id).Msg("record prompt outcome")
	}
}

func (s *Service) await(ctx context.Context, t *turn, async bool) (PromptOutcome, error) {
	if async {
		return PromptOutcome{Accepted: true}, nil
	}
	select {
	case <-t.done:
		return PromptOutcome{Result: t.result}, t.err
	case <-ctx.Done():
		return PromptOutcome{}, vms.EngineError(ctx.Err(), "prompt")
	}
}

func (r *recorder) runningTurn(id string) *turn {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st := r.sessions[id]; st != nil {
		return st.turn
	}
	return nil
}

// replay answers a prompt with the outcome its idempotency key recorded.
func replay(o *idempotency.Outcome) (PromptOutcome, error) {
	if err := o.Err(); err != nil {
		return PromptOutcome{Replayed: true}, err
	}
	var res gateway.PromptResult
	if err := o.Decode(&res); err != nil {
		return PromptOutcome{}, err
	}
	return PromptOutcome{Result: res, Replayed: true}, nil
}

// Cancel cancels a session's running turn: "cancelled", or
// "no_active_prompt" when none runs.
func (s *Service) Cancel(ctx context.Context, tenantID, vmID, id string) (string, error) {
	return onLive(ctx, s, tenantID, vmID, id, "cancel prompt", func(sess *vms.AgentSession) (string, error) {
		return sess.Cancel(ctx)
	})
}

// RespondPermission answers a pending permission request with one of its
// options, on behalf of the API key keyID.
func (s *Service) RespondPermission(ctx context.Context, tenantID, keyID, vmID, id, requestID, optionID string) (gateway.PermissionAnswer, error) {
	ls, release, err := s.live(ctx, tenantID, vmID, id)
	if err != nil {
		return gateway.PermissionAnswer{}, err
	}
	defer release()
	perms, err := s.store.Permissions(ctx, vmID, id, false)
	if err != nil {
		return gateway.PermissionAnswer{}, err
	}
	var perm *gateway.Permission
	for i := range perms {
		if perms[i].RequestID == requestID {
			perm = &perms[i]
		}
	}
	if perm == nil {
		return gateway.PermissionAnswer{}, gateway.Errorf(gateway.CodeNotFound, "no permission request %s in session %s", requestID, id)
	}
	if perm.Status != gateway.PermissionPending {
		return gateway.PermissionAnswer{Status: "not_pending", Reason: "already_resolved"}, nil
	}
	var options []gateway.PermissionOption
	_ = json.Unmarshal(perm.Options, &options)
	ids := make([]string, len(options))
	found := false
	for i, o := range options {
		ids[i] = o.OptionID
		found = found || o.OptionID == optionID
	}
	if !found {
		return gateway.PermissionAnswer{}, gateway.Errorf(gateway.CodeInvalidArgument, "optionId %q is not an option of request %s; its options are %s", optionID, requestID, strings.Join(ids, ", ")).
			WithDetail("field", "optionId").WithDetail("options", ids)
	}
	clear := ls.r.answer(id, requestID, gateway.PermissionDecision{By: gateway.DecidedByAPI, KeyID: keyID, OptionID: optionID, At: s.cfg.Now().UTC()})
	status, reason, err := ls.handle().RespondPermission(ctx, requestID, optionID)
	if err != nil || status != "accepted" {
		clear()
	}
	if err != nil {
		return gateway.PermissionAnswer{}, vms.EngineError(err, "answer permission request")
	}
	return gateway.PermissionAnswer{Status: status, Reason: reason}, nil
}

// blockField is a field an ACP content block type requires: a string, or
// an object.
type blockField struct {
	name   string
	object bool
}

// contentTypes are the ACP content block types and the fields each requires,
// checked in this order.
var contentTypes = map[string][]blockField{
	"text":          {{name: "text"}},
	"image":         {{name: "data"}, {name: "mimeType"}},
	"audio":         {{name: "data"}, {name: "mimeType"}},
	"resource_link": {{name: "uri"}, {name: "name"}},
	"resource":      {{name: "resource", object: true}},
}

// ValidateContent checks that content is a non-empty JSON array of ACP
// content blocks, each with a known type and the fields that type requires,
// so that a malformed prompt is refused with the element it concerns rather
// than failing later inside the agent.
func ValidateContent(content json.RawMessage) error {
	var blocks []map[string]json.RawMessage
	if err := json.Unmarshal(content, &blocks); err != nil {
		return gateway.Errorf(gateway.CodeInvalidArgument, "content must be an array of ACP content blocks").WithDetail("field", "content")
	}
	if len(blocks) == 0 {
		return gateway.Errorf(gateway.CodeInvalidArgument, "content must have at least one block").WithDetail("field", "content")
	}
	for i, b := range blocks {
		elem := fmt.Sprintf("content[%d]", i)
		var typ string
		if raw, ok := b["type"]; !ok || json.Unmarshal(raw, &typ) != nil || string(raw) == "null" {
			return gateway.Errorf(gateway.CodeInvalidArgument, "%s has no string type", elem).WithDetail("field", elem+".type")
		}
		fields, ok := contentTypes[typ]
		if !ok {
			return gateway.Errorf(gateway.CodeInvalidArgument, "%s has unknown type %q (want text, image, audio, resource_link or resource)", elem, typ).WithDetail("field", elem+".type")
		}
		for _, f := range fields {
			raw, ok := b[f.name]
			var err error
			if f.object {
				var m map[string]json.RawMessage
				err = json.Unmarshal(raw, &m)
				if m == nil {
					err = errors.New("not an object")
				}
			} else {
				var str string
				err = json.Unmarshal(raw, &str)
				if string(raw) == "null" {
					err = errors.New("null")
				}
			}
			if !ok || err != nil {
				kind := "a string"
				if f.object {
					kind = "an object"
				}
				return gateway.Errorf(gateway.CodeInvalidArgument, "%s of type %s needs %s, %s", elem, typ, f.name, kind).WithDetail("field", elem+"."+f.name)
			}
		}
	}
	return nil
}

func newSessionID() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return "ses_" + hex.EncodeToString(b[:])
}
