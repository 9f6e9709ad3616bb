package handlers

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
	"github.com/agentos-gateway/agentos-gateway/sse"
	"github.com/agentos-gateway/agentos-gateway/streamlog"
	"github.com/agentos-gateway/agentos-gateway/vms"
)

func (s *Server) createVM(w http.ResponseWriter, r *http.Request) {
	var req api.CreateVMRequest
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		writeError(w, r, err)
		return
	}
	p := principalFrom(r.Context())
	if err := s.checkBindings(req.Bindings); err != nil {
		writeError(w, r, err)
		return
	}
	checkpoint := s.vms.DefaultCheckpointSeconds()
	if req.CheckpointSeconds != nil {
		checkpoint = *req.CheckpointSeconds
	}
	vm, err := s.vms.Create(r.Context(), p.tenant, gateway.VMSpec{
		Labels: req.Labels, Env: req.Env, Permissions: req.Permissions, Limits: req.Limits,
		LoopbackExemptPorts: req.LoopbackExemptPorts, Software: req.Software, Agents: req.Agents,
		IdleTimeoutSeconds: req.IdleTimeoutSeconds, OnIdle: req.OnIdle, Bindings: req.Bindings, FromSnapshot: req.FromSnapshot,
		CheckpointSeconds: checkpoint,
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/vms/"+vm.ID)
	writeJSON(w, http.StatusCreated, vmResource(vm))
}

// vmResource is a VM as the API shows it: its spec flattened, empty lists
// and labels rather than absent ones, times in UTC.
func vmResource(vm gateway.VM) api.VM {
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
	utc := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		t = t.UTC()
		return &t
	}
	return api.VM{
		ID: vm.ID, State: vm.State, Reason: vm.Reason, Labels: labels, SidecarID: vm.SidecarID, Node: vm.Node,
		Env: vm.Spec.Env, Permissions: vm.Spec.Permissions, Limits: vm.Spec.Limits,
		LoopbackExemptPorts: ports, Software: orEmpty(vm.Spec.Software), Agents: orEmpty(vm.Spec.Agents),
		IdleTimeoutSeconds: vm.Spec.IdleTimeoutSeconds, OnIdle: vm.Spec.OnIdle, HibernatedAt: utc(vm.HibernatedAt), FromSnapshot: vm.Spec.FromSnapshot,
		CheckpointSeconds: vm.Spec.CheckpointSeconds, CheckpointAt: utc(vm.CheckpointAt), Restorable: vm.Restorable(),
		CreatedAt: vm.CreatedAt.UTC(), UpdatedAt: vm.UpdatedAt.UTC(),
	}
}

func (s *Server) listVMs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := queryInt(r, "limit", 50, 1, 500)
	if err != nil {
		writeError(w, r, err)
		return
	}
	p := principalFrom(r.Context())
	f := gateway.VMFilter{TenantID: p.tenant.ID, Cursor: q.Get("cursor"), Limit: limit}
	if p.token != nil {
		// A token bound to a VM sees that VM alone.
		f.ID = p.token.VMID
	}
	if f.States, err = parseStates(q["state"]); err != nil {
		writeError(w, r, err)
		return
	}
	if f.Labels, f.NotLabels, err = parseLabelSelectors(q["label"]); err != nil {
		writeError(w, r, err)
		return
	}
	page, err := s.vms.List(r.Context(), f)
	if err != nil {
		writeError(w, r, err)
		return
	}
	items := make([]api.VM, len(page.Items))
	for i, vm := range page.Items {
		items[i] = vmResource(vm)
	}
	writeJSON(w, http.StatusOK, api.List[api.VM]{Items: items, NextCursor: page.NextCursor})
}

// parseStates reads the state filter: states, repeated or comma-separated,
// or "all". None means the states that are not final.
func parseStates(values []string) ([]gateway.VMState, error) {
	var out []gateway.VMState
	for _, v := range values {
		for name := range strings.SplitSeq(v, ",") {
			st := gateway.VMState(strings.TrimSpace(name))
			switch {
			case st == "all":
				return gateway.AllStates, nil
			case !st.Valid():
				return nil, gateway.Errorf(gateway.CodeInvalidArgument, "unknown state %q: use creating, ready, disposing, disposed, lost, hibernating, hibernated, waking or all", st).WithDetail("field", "state")
			case !slices.Contains(out, st):
				out = append(out, st)
			}
		}
	}
	return out, nil
}

// parseLabelSelectors reads label selectors: each value is one or more
// requirements separated by commas, as Kubernetes spells them (k=v,k2!=v2),
// and the label parameter may repeat; every requirement must hold. A
// requirement is key=value, key!=value, or key:value (the gateway's first
// spelling of key=value). A comma or backslash inside a value is written
// with a backslash before it. Each key may be named once per operator.
func parseLabelSelectors(values []string) (eq, ne map[string]string, err error) {
	var reqs []string
	for _, v := range values {
		parts, err := splitSelector(v)
		if err != nil {
			return nil, nil, err
		}
		reqs = append(reqs, parts...)
		if len(reqs) > gateway.MaxLabelSelectors {
			return nil, nil, gateway.Errorf(gateway.CodeInvalidArgument, "more than %d label selectors", gateway.MaxLabelSelectors).WithDetail("field", "label")
		}
	}
	for _, sel := range reqs {
		var k, v string
		var neg, ok bool
		if i := strings.IndexAny(sel, "=:"); i > 0 {
			k, v, ok = sel[:i], sel[i+1:], true
			if sel[i] == '=' && strings.HasSuffix(k, "!") {
				k, neg = strings.TrimSuffix(k, "!"), true
			}
		}
		if !ok || k == "" {
			return nil, nil, gateway.Errorf(gateway.CodeInvalidArgument, "label selector %q must be key=value, key!=value or key:value", sel).WithDetail("field", "label")
		}
		dst := &eq
		if neg {
			dst = &ne
		}
		if *dst == nil {
			*dst = map[string]string{}
		}
		if prev, dup := (*dst)[k]; dup && prev != v {
			return nil, nil, gateway.Errorf(gateway.CodeInvalidArgument, "label selector names %q twice with different values", k).WithDetail("field", "label")
		}
		(*dst)[k] = v
	}
	return eq, ne, nil
}

// splitSelector splits one label parameter into its comma-separated
// requirements, taking a backslash as escaping the character after it. An
// empty requirement (a doubled or trailing comma) is refused rather than
// ignored: it is most likely a typing slip.
func splitSelector(v string) ([]string, error) {
	var out []string
	var cur strings.Builder
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\' && i+1 < len(v):
			i++
			cur.WriteByte(v[i])
		case c == '\\':
			return nil, gateway.Errorf(gateway.CodeInvalidArgument, "label selector %q ends with a lone backslash", v).WithDetail("field", "label")
		case c == ',':
			out = append(out, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(c)
		}
	}
	out = append(out, cur.String())
	for _, r := range out {
		if r == "" {
			return nil, gateway.Errorf(gateway.CodeInvalidArgument, "label selector %q has an empty requirement between commas", v).WithDetail("field", "label")
		}
	}
	return out, nil
}

func (s *Server) getVM(w http.ResponseWriter, r *http.Request) {
	vm, err := s.vms.Get(r.Context(), principalFrom(r.Context()).tenant.ID, pathParam(r, "vm"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, vmResource(vm))
}

// deleteVM is idempotent: a live VM is disposed (200 with its record), an
// ended one's record is removed (204), and then the VM is not found.
func (s *Server) deleteVM(w http.ResponseWriter, r *http.Request) {
	vm, removed, err := s.vms.Delete(r.Context(), principalFrom(r.Context()).tenant.ID, pathParam(r, "vm"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	if removed {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	writeJSON(w, http.StatusOK, vmResource(vm))
}

// updateVM changes a VM's labels and idle settings (a JSON merge patch):
// 200 with the record.
func (s *Server) updateVM(w http.ResponseWriter, r *http.Request) {
	var req api.UpdateVMRequest
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		writeError(w, r, err)
		return
	}
	p := principalFrom(r.Context())
	if req.Permissions != nil && p.token != nil {
		// A token is what a backend hands an end user: it may use the VM
		// within the sandbox its owner drew, never widen it.
		writeError(w, r, gateway.Errorf(gateway.CodePermissionDenied, "changing a VM's permissions needs the tenant's key, not a token").WithDetail("field", "permissions"))
		return
	}
	vm, err := s.vms.Update(r.Context(), p.tenant.ID, pathParam(r, "vm"),
		vms.Patch{Labels: req.Labels, IdleTimeoutSeconds: req.IdleTimeoutSeconds, OnIdle: req.OnIdle, CheckpointSeconds: req.CheckpointSeconds, Permissions: req.Permissions})
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, vmResource(vm))
}

// hibernateVM captures a running VM's files into the store and stops it:
// 200 with its hibernated record, once done. A hibernated VM is answered as
// it is.
func (s *Server) hibernateVM(w http.ResponseWriter, r *http.Request) {
	vm, err := s.vms.Hibernate(r.Context(), principalFrom(r.Context()).tenant.ID, pathParam(r, "vm"), vms.ReasonRequest)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, vmResource(vm))
}

// checkpointVM stores what changed in a running VM's files since its last
// checkpoint: 200 with its record, checkpointAt now. A hibernated VM is
// answered as it is.
func (s *Server) checkpointVM(w http.ResponseWriter, r *http.Request) {
	vm, err := s.vms.Checkpoint(r.Context(), principalFrom(r.Context()).tenant.ID, pathParam(r, "vm"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, vmResource(vm))
}

// wakeVM runs a hibernated VM again under its id, or restores a lost one
// from its checkpoint: 200 with its ready record. A running VM is answered
// as it is.
func (s *Server) wakeVM(w http.ResponseWriter, r *http.Request) {
	vm, err := s.vms.Wake(r.Context(), principalFrom(r.Context()).tenant.ID, pathParam(r, "vm"), vms.ReasonRequest)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, vmResource(vm))
}

// vmEvents streams a VM's events: state changes, limit warnings, process
// exits. Event ids are the VM's event sequence; Last-Event-ID resumes.
func (s *Server) vmEvents(w http.ResponseWriter, r *http.Request) {
	after, _, err := sse.LastEventID(r)
	if err != nil {
		writeError(w, r, gateway.Errorf(gateway.CodeInvalidArgument, "Last-Event-ID must be a sequence number"))
		return
	}
	log, release, err := s.vms.Events(r.Context(), principalFrom(r.Context()).tenant.ID, pathParam(r, "vm"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	s.sse.ServeFeed(w, r, after, sse.LogFeed[gateway.VMEvent]{Log: log, Render: vmEvent}, release)
}

func vmEvent(e streamlog.Entry[gateway.VMEvent]) sse.Event {
	data, _ := json.Marshal(e.V)
	return sse.Event{ID: strconv.FormatUint(e.Seq, 10), Event: string(e.V.Type), Data: data}
}
