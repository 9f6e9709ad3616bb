package sessions

// The recorder's part in permission requests: the pending ones, their
// resources, and the default decision of those nobody answers in time.

import (
	"context"
	"slices"
	"time"

	"github.com/rs/zerolog"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/vms"
)

// pendingPermission is a permission request waiting for its answer.
type pendingPermission struct {
	options  []gateway.PermissionOption
	decision string    // the default decision
	deadline time.Time // when it is taken; zero: never
	// answer is an answer given and not yet confirmed by the engine's
	// permission_response event, which is recorded with it.
	answer *gateway.PermissionDecision
}

// storePermission writes a permission event's resource before anyone sees
// the event, so that a client reacting to it finds the request listed (or
// settled).
func (r *recorder) storePermission(ev vms.SessionEvent, rec recorded) {
	var err error
	switch {
	case rec.perm != nil:
		err = r.store(func(ctx context.Context) error { return r.s.store.AddPermission(ctx, r.vmID, ev.SessionID, *rec.perm) })
	case rec.decision != nil:
		status := gateway.PermissionDropped
		if ev.Status == "accepted" {
			status = gateway.PermissionAnswered
		}
		err = r.store(func(ctx context.Context) error {
			return r.s.store.ResolvePermission(ctx, r.vmID, ev.SessionID, ev.RequestID, status, *rec.decision)
		})
	}
	if err != nil {
		r.s.log.Error().Err(err).Str("vm", r.vmID).Str("session", ev.SessionID).Str("request", ev.RequestID).Msg("store permission")
	}
}

// permissionDefault is the default decision for a session's permission
// requests: the session's own, else its tenant's, else the gateway's.
func (r *recorder) permissionDefault(id string) gateway.PermissionDefault {
	r.mu.Lock()
	var own *gateway.PermissionDefault
	if st := r.sessions[id]; st != nil {
		own = st.rec.PermissionDefault
	}
	r.mu.Unlock()
	if own != nil {
		return *own
	}
	ctx, cancel := context.WithTimeout(r.s.ctx, 5*time.Second)
	defer cancel()
	t, err := r.s.store.GetTenant(ctx, r.tenantID)
	if err == nil && t.Sessions.PermissionDefault != nil {
		return *t.Sessions.PermissionDefault
	}
	return r.s.cfg.PermissionDefault
}

func (r *recorder) nextDeadlineLocked() (time.Time, bool) {
	var next time.Time
	for _, st := range r.sessions {
		for _, p := range st.pending {
			if p.answer == nil && !p.deadline.IsZero() && (next.IsZero() || p.deadline.Before(next)) {
				next = p.deadline
			}
		}
	}
	return next, !next.IsZero()
}

// expire takes the default decision of every request past its deadline.
func (r *recorder) expire() {
	now := r.s.cfg.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for sid, st := range r.sessions {
		for rid, p := range st.pending {
			if p.answer != nil || p.deadline.IsZero() || p.deadline.After(now) {
				continue
			}
			optionID := chooseOption(p.options, p.decision)
			if optionID == "" {
				r.s.log.Warn().Str("vm", r.vmID).Str("session", sid).Str("request", rid).Str("decision", p.decision).
					Msg("no option matches the default decision; the request stays pending")
				p.deadline = time.Time{}
				continue
			}
			answer := &gateway.PermissionDecision{By: gateway.DecidedByTimeout, OptionID: optionID, At: now.UTC()}
			p.answer = answer
			r.defaultDecisions.Add(1)
			go r.decide(sid, rid, p, answer)
		}
	}
}

// decide sends a default decision; one the engine does not take is retried
// later unless the request was settled meanwhile.
func (r *recorder) decide(sid, rid string, p *pendingPermission, answer *gateway.PermissionDecision) {
	defer r.defaultDecisions.Done()
	ctx, cancel := context.WithTimeout(r.s.ctx, 30*time.Second)
	defer cancel()
	status, _, err := r.vm.Session(sid).RespondPermission(ctx, rid, answer.OptionID)
	if err == nil && status == "accepted" {
		r.s.defaultDecisions.Add(1)
		return
	}
	if status == "not_pending" {
		// Settled by someone else: its own response event clears it.
		return
	}
	r.s.log.Warn().Err(err).Str("vm", r.vmID).Str("session", sid).Str("request", rid).Msg("default permission decision failed; retrying")
	r.mu.Lock()
	if p.answer == answer {
		p.answer = nil
		p.deadline = r.s.cfg.Now().Add(10 * time.Second)
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// answer marks a client's answer as given, for the response event to
// record who decided; clear takes it back if the engine did not take it.
func (r *recorder) answer(sid, rid string, d gateway.PermissionDecision) (clear func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.sessions[sid]
	if st == nil {
		return func() {}
	}
	p := st.pending[rid]
	if p == nil {
		return func() {}
	}
	a := &d
	p.answer = a
	return func() {
		r.mu.Lock()
		if p.answer == a {
			p.answer = nil
		}
		r.mu.Unlock()
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// chooseOption picks the option of a default decision: the one-time
// variant first.
func chooseOption(options []gateway.PermissionOption, decision string) string {
	kinds := []string{"reject_once", "reject_always"}
	if decision == gateway.DecisionAllow {
		kinds = []string{"allow_once", "allow_always"}
	}
	for _, k := range kinds {
		for _, o := range options {
			if o.Kind == k {
				return o.OptionID
			}
		}
	}
	return ""
}

// askWebhook lets a permission webhook decide a new request: webhookURL
// (from the session's default decision, or its tenant's) or else the VM's.
// No
// answer, an unusable one, or one the engine does not take falls back to
// the default decision, taken at once; an answer given meanwhile (through
// the API) wins.
func (r *recorder) askWebhook(sid, webhookURL string, perm gateway.Permission, p *pendingPermission) {
	defer r.defaultDecisions.Done()
	ctx, cancel := context.WithTimeout(r.s.ctx, 30*time.Second)
	defer cancel()
	verdict, asked, err := r.s.cfg.PermissionWebhook.DecidePermission(ctx, r.tenantID, r.vmID, sid, webhookURL, perm)
	if !asked {
		return
	}
	optionID := verdict.OptionID
	switch {
	case err != nil:
	case optionID == "":
		optionID = chooseOption(p.options, verdict.Decision)
	case !slices.ContainsFunc(p.options, func(o gateway.PermissionOption) bool { return o.OptionID == optionID }):
		optionID = ""
	}
	warn := func() *zerolog.Event {
		return r.s.log.Warn().Str("vm", r.vmID).Str("session", sid).Str("request", perm.RequestID)
	}
	r.mu.Lock()
	if p.answer != nil {
		r.mu.Unlock()
		return
	}
	if optionID == "" {
		p.deadline = r.s.cfg.Now()
		r.mu.Unlock()
		warn().AnErr("cause", err).Msg("permission webhook gave no usable answer; taking the default decision")
		r.poke()
		return
	}
	answer := &gateway.PermissionDecision{By: gateway.DecidedByWebhook, OptionID: optionID, At: r.s.cfg.Now().UTC()}
	p.answer = answer
	r.mu.Unlock()
	status, _, err := r.vm.Session(sid).RespondPermission(ctx, perm.RequestID, optionID)
	if (err == nil && status == "accepted") || status == "not_pending" {
		return
	}
	warn().Err(err).Msg("the engine did not take the permission webhook's answer; taking the default decision")
	r.mu.Lock()
	if p.answer == answer {
		p.answer = nil
		p.deadline = r.s.cfg.Now()
	}
	r.mu.Unlock()
	r.poke()
}

// poke wakes the recorder to look at the deadlines again.
func (r *recorder) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}
