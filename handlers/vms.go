package handlers

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/vms"
)

// createVMRequest is the body of POST /v1/vms.
type createVMRequest struct {
	Labels              map[string]string `json:"labels" validate:"omitempty,max=64,dive,keys,min=1,max=63,nonul,endkeys,max=256,nonul"`
	Env                 map[string]string `json:"env" validate:"omitempty,max=256,dive,keys,min=1,max=256,envkey,endkeys,nonul,max=65536"`
	Permissions         map[string]any    `json:"permissions"`
	Limits              map[string]any    `json:"limits"`
	LoopbackExemptPorts []uint16          `json:"loopbackExemptPorts" validate:"omitempty,max=64,dive,min=1"`
	Software            []string          `json:"software" validate:"omitempty,max=64,dive,min=1,max=256"`
	Agents              []string          `json:"agents" validate:"omitempty,max=8,dive,oneof=pi claude codex opencode"`
	IdleTimeoutSeconds  int               `json:"idleTimeoutSeconds" validate:"gte=0,lte=604800"`
}

func (s *Server) createVM(w http.ResponseWriter, r *http.Request) {
	var req createVMRequest
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		writeError(w, r, err)
		return
	}
	p := principalFrom(r.Context())
	vm, err := s.vms.Create(r.Context(), p.tenant, gateway.VMSpec{
		Labels: req.Labels, Env: req.Env, Permissions: req.Permissions, Limits: req.Limits,
		LoopbackExemptPorts: req.LoopbackExemptPorts, Software: req.Software, Agents: req.Agents,
		IdleTimeoutSeconds: req.IdleTimeoutSeconds,
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/vms/"+vm.ID)
	writeJSON(w, http.StatusCreated, vmResource(vm))
}

// vmJSON is a VM resource.
type vmJSON struct {
	ID                  string            `json:"id"`
	State               gateway.VMState   `json:"state"`
	Reason              string            `json:"reason,omitempty"`
	Labels              map[string]string `json:"labels"`
	SidecarID           string            `json:"sidecarId,omitempty"`
	Env                 map[string]string `json:"env,omitempty"`
	Permissions         map[string]any    `json:"permissions,omitempty"`
	Limits              map[string]any    `json:"limits,omitempty"`
	LoopbackExemptPorts []uint16          `json:"loopbackExemptPorts"`
	Software            []string          `json:"software"`
	Agents              []string          `json:"agents"`
	IdleTimeoutSeconds  int               `json:"idleTimeoutSeconds"`
	CreatedAt           string            `json:"createdAt"`
	UpdatedAt           string            `json:"updatedAt"`
}

func vmResource(vm gateway.VM) vmJSON {
	orEmpty := func(s []string) []string {
		if s == nil {
			return []string{}
		}
		return s
	}
	labels := vm.Spec.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	ports := vm.Spec.LoopbackExemptPorts
	if ports == nil {
		ports = []uint16{}
	}
	return vmJSON{
		ID: vm.ID, State: vm.State, Reason: vm.Reason, Labels: labels, SidecarID: vm.SidecarID,
		Env: vm.Spec.Env, Permissions: vm.Spec.Permissions, Limits: vm.Spec.Limits,
		LoopbackExemptPorts: ports, Software: orEmpty(vm.Spec.Software), Agents: orEmpty(vm.Spec.Agents),
		IdleTimeoutSeconds: vm.Spec.IdleTimeoutSeconds,
		CreatedAt:          rfc3339(vm.CreatedAt), UpdatedAt: rfc3339(vm.UpdatedAt),
	}
}

func (s *Server) listVMs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := queryInt(r, "limit", 50, 1, 500)
	if err != nil {
		writeError(w, r, err)
		return
	}
	f := gateway.VMFilter{TenantID: principalFrom(r.Context()).tenant.ID, State: gateway.VMState(q.Get("state")), Cursor: q.Get("cursor"), Limit: limit}
	if f.State != "" && !f.State.Valid() {
		writeError(w, r, gateway.Errorf(gateway.CodeInvalidArgument, "unknown state %q", f.State).WithDetail("field", "state"))
		return
	}
	// label=key:value, repeatable; every pair must match.
	for _, l := range q["label"] {
		k, v, ok := strings.Cut(l, ":")
		if !ok || k == "" {
			writeError(w, r, gateway.Errorf(gateway.CodeInvalidArgument, "label filter %q must be key:value", l).WithDetail("field", "label"))
			return
		}
		if f.Labels == nil {
			f.Labels = map[string]string{}
		}
		f.Labels[k] = v
	}
	page, err := s.vms.List(r.Context(), f)
	if err != nil {
		writeError(w, r, err)
		return
	}
	items := make([]vmJSON, len(page.Items))
	for i, vm := range page.Items {
		items[i] = vmResource(vm)
	}
	writeJSON(w, http.StatusOK, listJSON[vmJSON]{Items: items, NextCursor: page.NextCursor})
}

// listJSON is the shape of every list: {items, nextCursor}.
type listJSON[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"nextCursor"`
}

func (s *Server) getVM(w http.ResponseWriter, r *http.Request) {
	vm, err := s.vms.Get(r.Context(), principalFrom(r.Context()).tenant.ID, pathParam(r, "vm"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, vmResource(vm))
}

func (s *Server) deleteVM(w http.ResponseWriter, r *http.Request) {
	vm, err := s.vms.Delete(r.Context(), principalFrom(r.Context()).tenant.ID, pathParam(r, "vm"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, vmResource(vm))
}

// vmEvents streams a VM's events: state changes, limit warnings, process
// exits. Event ids are the VM's event sequence; Last-Event-ID resumes.
func (s *Server) vmEvents(w http.ResponseWriter, r *http.Request) {
	after, _, err := lastEventID(r)
	if err != nil {
		writeError(w, r, gateway.Errorf(gateway.CodeInvalidArgument, "Last-Event-ID must be a sequence number"))
		return
	}
	log, release, err := s.vms.Events(r.Context(), principalFrom(r.Context()).tenant.ID, pathParam(r, "vm"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	defer release()
	s.sse.serve(w, r, after, func(ctx context.Context, emit func(sseEvent) error) error {
		return followLog(ctx, log, after, emit, func(e vms.Entry[vms.VMEvent]) sseEvent {
			data, _ := json.Marshal(e.V)
			return sseEvent{ID: strconv.FormatUint(e.Seq, 10), Event: e.V.Type, Data: data}
		}, nil)
	})
}

// followLog emits a log's entries after a cursor until it ends: a gap event
// where entries were dropped, each entry, then a final event. onEnd renders
// the final event (nil: a generic "end" or "error").
func followLog[T any](ctx context.Context, l *vms.Log[T], after uint64, emit func(sseEvent) error, render func(vms.Entry[T]) sseEvent, onEnd func(last uint64, err error) []sseEvent) error {
	cursor := after
	for {
		b, err := l.Read(ctx, cursor)
		if err != nil {
			return err
		}
		if b.GapTo > 0 {
			data, _ := json.Marshal(map[string]uint64{"from": b.GapFrom, "to": b.GapTo})
			if err := emit(sseEvent{ID: strconv.FormatUint(b.GapTo, 10), Event: "gap", Data: data}); err != nil {
				return err
			}
			cursor = b.GapTo
		}
		for _, e := range b.Entries {
			if err := emit(render(e)); err != nil {
				return err
			}
			cursor = e.Seq
		}
		if b.Done {
			var final []sseEvent
			if onEnd != nil {
				final = onEnd(cursor, b.Err)
			} else {
				final = []sseEvent{endEvent(cursor, b.Err)}
			}
			for _, ev := range final {
				if err := emit(ev); err != nil {
					return err
				}
			}
			return nil
		}
	}
}

// endEvent is the final event of a stream that ends: "end", or "error" with
// the problem when it ended because something failed.
func endEvent(cursor uint64, err error) sseEvent {
	id := strconv.FormatUint(cursor, 10)
	if err == nil {
		return sseEvent{ID: id, Event: "end", Data: []byte("{}")}
	}
	data, _ := json.Marshal(map[string]any{"code": gateway.ErrorCode(err), "detail": gateway.ErrorMessage(err)})
	return sseEvent{ID: id, Event: "error", Data: data}
}
