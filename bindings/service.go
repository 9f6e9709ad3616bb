// Package bindings runs tenants' host bindings: collections of functions a
// VM's guest runs as the engine's agentos-<collection> commands, each call
// answered by a signed POST to the tenant's webhook, and the webhook that
// decides the permission requests of a VM's agent sessions.
package bindings

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/vms"
	"github.com/agentos-gateway/agentos-gateway/webhook"
)

// Store is what the service needs of the database.
type Store interface {
	GetVM(ctx context.Context, tenantID, id string) (gateway.VM, error)
	SetVMBindings(ctx context.Context, tenantID, id string, b *gateway.Bindings) (gateway.VM, error)
}

// BindingHost is what the service needs of a VM's engine, as vms offers it.
type BindingHost interface {
	HandleCalls(h func(ctx context.Context, call vms.HostCall) (json.RawMessage, error))
	Register(ctx context.Context, c vms.HostCallbackCollection) error
}

// VMs is what the service needs of the VM service.
type VMs interface {
	// Hold holds a live VM this node runs busy until release is called.
	Hold(ctx context.Context, tenantID, id string) (release func(), err error)
	// Publish appends an event to a VM's event stream.
	Publish(vmID string, ev gateway.VMEvent)
}

// Config tunes the service.
type Config struct {
	// PermissionTimeout bounds a permission webhook's answer (default 10 s).
	PermissionTimeout time.Duration
	Log               zerolog.Logger
	Now               func() time.Time
}

// Service keeps the bindings of the VMs this node runs and answers their
// calls. The node that runs a VM is the one its engine asks, so calls are
// made from there.
type Service struct {
	cfg   Config
	store Store
	vms   VMs
	hooks *webhook.Client

	mu   sync.Mutex
	live map[string]*vmBindings // by VM id
}

// New returns a service posting through hooks.
func New(cfg Config, st Store, vms VMs, hooks *webhook.Client) *Service {
	if cfg.PermissionTimeout <= 0 {
		cfg.PermissionTimeout = 10 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{cfg: cfg, store: st, vms: vms, hooks: hooks, live: map[string]*vmBindings{}}
}

// vmBindings are the bindings of one live VM.
type vmBindings struct {
	tenantID, vmID string
	engine         BindingHost

	// regMu serialises changes, which register collections one by one.
	regMu sync.Mutex
	// registered is what the engine was given of each collection, encoded,
	// so that a change registers only the collections that changed.
	registered map[string][]byte

	mu  sync.Mutex
	cur *gateway.Bindings
}

func (v *vmBindings) current() *gateway.Bindings {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.cur
}

// CheckURL checks a declared webhook URL against --webhook-allow, in the
// gateway's words.
func (s *Service) CheckURL(raw string) error { return s.hooks.CheckURL(raw) }

// TenantSecret returns the secret a tenant's webhooks verify signatures
// with.
func (s *Service) TenantSecret(tenantID string) string { return s.hooks.TenantSecret(tenantID) }

// SetUpVM registers a new VM's declared bindings with its engine and
// answers its host calls from now on.
func (s *Service) SetUpVM(ctx context.Context, vm gateway.VM, engine vms.BindingHost) error {
	v := &vmBindings{tenantID: vm.TenantID, vmID: vm.ID, engine: engine, registered: map[string][]byte{}, cur: vm.Spec.Bindings}
	engine.HandleCalls(func(ctx context.Context, call vms.HostCall) (json.RawMessage, error) {
		return s.call(ctx, v, call)
	})
	s.mu.Lock()
	s.live[vm.ID] = v
	s.mu.Unlock()
	if vm.Spec.Bindings == nil {
		return nil
	}
	return s.register(ctx, v, vm.Spec.Bindings)
}

// VMEnded forgets a VM's bindings.
func (s *Service) VMEnded(vmID string) {
	s.mu.Lock()
	delete(s.live, vmID)
	s.mu.Unlock()
}

// register gives the engine the collections of b it does not have. The
// engine takes a collection once and cannot take it back or change it: a
// collection dropped from b keeps its command, whose calls are refused, and
// one declared again must be as registered but for its webhook URLs
// (checked for all before any is registered).
func (s *Service) register(ctx context.Context, v *vmBindings, b *gateway.Bindings) error {
	v.regMu.Lock()
	defer v.regMu.Unlock()
	encoded := make([][]byte, len(b.Collections))
	for i, c := range b.Collections {
		encoded[i] = fingerprint(engineCollection(c))
		if had, ok := v.registered[c.Name]; ok && !bytes.Equal(had, encoded[i]) {
			return gateway.Errorf(gateway.CodeConflict, "collection %s is registered with the engine as first declared, and while the VM lives only its webhook URLs can change; declare the changed collection under a new name", c.Name).
				WithDetail("field", fmt.Sprintf("collections[%d]", i))
		}
	}
	for i, c := range b.Collections {
		if _, ok := v.registered[c.Name]; ok {
			continue
		}
		if err := v.engine.Register(ctx, engineCollection(c)); err != nil {
			return gateway.Wrap(gateway.CodeUnavailable, err, "the engine did not take binding collection %s", c.Name).WithDetail("collection", c.Name)
		}
		v.registered[c.Name] = encoded[i]
	}
	return nil
}

// fingerprint encodes what the engine is given of a collection as
// canonical JSON: a schema read back from PostgreSQL's jsonb, respaced and
// reordered, is the same schema.
func fingerprint(c vms.HostCallbackCollection) []byte {
	b, _ := json.Marshal(c)
	var v any
	if json.Unmarshal(b, &v) != nil {
		return b
	}
	canonical, _ := json.Marshal(v)
	return canonical
}

// engineCollection is a collection as the engine takes it; webhook URLs
// stay with the gateway.
func engineCollection(c gateway.BindingCollection) vms.HostCallbackCollection {
	out := vms.HostCallbackCollection{Name: c.Name, Description: c.Description}
	for _, b := range c.Bindings {
		cb := vms.HostCallback{Name: b.Name, Description: b.Description, InputSchema: b.InputSchema, Timeout: timeout(b)}
		for _, ex := range b.Examples {
			cb.Examples = append(cb.Examples, vms.HostCallbackExample{Description: ex.Description, Input: ex.Input})
		}
		out.Callbacks = append(out.Callbacks, cb)
	}
	return out
}

func timeout(b gateway.Binding) time.Duration {
	ms := b.TimeoutMs
	if ms == 0 {
		ms = DefaultTimeoutMs
	}
	return time.Duration(ms) * time.Millisecond
}

// Get returns a tenant's VM's bindings (an empty document when it has none).
func (s *Service) Get(ctx context.Context, tenantID, vmID string) (gateway.Bindings, error) {
	vm, err := s.store.GetVM(ctx, tenantID, vmID)
	if err != nil {
		return gateway.Bindings{}, err
	}
	if vm.Spec.Bindings == nil {
		return gateway.Bindings{Collections: []gateway.BindingCollection{}}, nil
	}
	return *vm.Spec.Bindings, nil
}

// Put replaces a tenant's live VM's bindings: new and changed collections
// are registered with its engine, and the record keeps the document.
func (s *Service) Put(ctx context.Context, tenantID, vmID string, b gateway.Bindings) (gateway.Bindings, error) {
	if b.Collections == nil {
		b.Collections = []gateway.BindingCollection{}
	}
	if err := s.Validate(&b, ""); err != nil {
		return gateway.Bindings{}, err
	}
	release, err := s.vms.Hold(ctx, tenantID, vmID)
	if err != nil {
		return gateway.Bindings{}, err
	}
	defer release()
	s.mu.Lock()
	v := s.live[vmID]
	s.mu.Unlock()
	if v == nil || v.tenantID != tenantID {
		return gateway.Bindings{}, gateway.Errorf(gateway.CodeConflict, "vm %s is not running on this node", vmID)
	}
	if err := s.register(ctx, v, &b); err != nil {
		return gateway.Bindings{}, err
	}
	if _, err := s.store.SetVMBindings(ctx, tenantID, vmID, &b); err != nil {
		return gateway.Bindings{}, err
	}
	v.mu.Lock()
	v.cur = &b
	v.mu.Unlock()
	return b, nil
}

// CallRequest is the body of a binding call's webhook request.
type CallRequest struct {
	Type         string          `json:"type"` // "binding.call"
	InvocationID string          `json:"invocationId"`
	TenantID     string          `json:"tenantId"`
	VMID         string          `json:"vmId"`
	Collection   string          `json:"collection"`
	Binding      string          `json:"binding"`
	Input        json.RawMessage `json:"input"`
	TimeoutMs    int64           `json:"timeoutMs"`
}

// call answers one host call of a VM's guest with its binding's webhook,
// recording it as a VM event.
func (s *Service) call(ctx context.Context, v *vmBindings, hc vms.HostCall) (json.RawMessage, error) {
	start := s.cfg.Now()
	id := newInvocationID()
	collection, name, _ := strings.Cut(hc.Key, ":")
	answer, status, err := s.post(ctx, v, hc, id, collection, name)
	detail := map[string]string{
		"invocation": id, "outcome": webhook.Outcome(err),
		"durationMs": strconv.FormatInt(s.cfg.Now().Sub(start).Milliseconds(), 10),
	}
	if status != 0 {
		detail["status"] = strconv.Itoa(status)
	}
	s.vms.Publish(v.vmID, gateway.VMEvent{Type: gateway.VMEventBindingCall, Time: start.UTC(), Name: collection + "." + name, Detail: detail})
	if err != nil {
		return nil, fmt.Errorf("binding %s.%s: %w", collection, name, err)
	}
	return answer, nil
}

func (s *Service) post(ctx context.Context, v *vmBindings, hc vms.HostCall, id, collection, name string) (json.RawMessage, int, error) {
	b, ok := lookup(v.current(), collection, name)
	if !ok {
		return nil, 0, &webhook.CallError{Outcome: gateway.BindingUnknown, Err: errors.New("is no longer declared for this VM")}
	}
	body, err := json.Marshal(CallRequest{
		Type: "binding.call", InvocationID: id, TenantID: v.tenantID, VMID: v.vmID,
		Collection: collection, Binding: name, Input: hc.Input, TimeoutMs: hc.Timeout.Milliseconds(),
	})
	if err != nil {
		return nil, 0, &webhook.CallError{Outcome: gateway.BindingHTTPError, Err: fmt.Errorf("input cannot be sent: %w", err)}
	}
	// The webhook gets less than the guest waits, so that the guest reads
	// the gateway's account of a timeout rather than the engine's: a tenth
	// of the wait, but at least 250 ms (the answer still has to travel to
	// the engine, and a tenth of 1 s lost that race on a loaded machine),
	// and at most half of it.
	margin := min(max(hc.Timeout/10, 250*time.Millisecond), hc.Timeout/2)
	budget := hc.Timeout - margin
	if budget <= 0 {
		budget = timeout(b)
	}
	pctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	answer, status, err := s.hooks.Post(pctx, v.tenantID, b.WebhookURL, id, body)
	if err != nil && webhook.Outcome(err) == gateway.BindingTimeout {
		err = &webhook.CallError{Outcome: gateway.BindingTimeout, Status: status, Err: fmt.Errorf("webhook did not answer within %s", budget.Round(time.Millisecond))}
	}
	return answer, status, err
}

func lookup(b *gateway.Bindings, collection, name string) (gateway.Binding, bool) {
	if b == nil {
		return gateway.Binding{}, false
	}
	for _, c := range b.Collections {
		if c.Name != collection {
			continue
		}
		for _, bd := range c.Bindings {
			if bd.Name == name {
				return bd, true
			}
		}
	}
	return gateway.Binding{}, false
}

func newInvocationID() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return "bcall_" + hex.EncodeToString(b[:])
}

// PermissionRequest is the body of a permission webhook's request.
type PermissionRequest struct {
	Type      string          `json:"type"` // "permission.request"
	TenantID  string          `json:"tenantId"`
	VMID      string          `json:"vmId"`
	SessionID string          `json:"sessionId"`
	RequestID string          `json:"requestId"`
	ToolCall  json.RawMessage `json:"toolCall"`
	Options   json.RawMessage `json:"options"`
}

// DecidePermission asks a permission webhook to decide a request:
// webhookURL when it is set (a session's or tenant's default decision names
// it), else the VM's permissionWebhookUrl. ok is false when there is none;
// an error means it was asked and gave no usable answer.
func (s *Service) DecidePermission(ctx context.Context, tenantID, vmID, sessionID, webhookURL string, p gateway.Permission) (gateway.PermissionVerdict, bool, error) {
	if webhookURL == "" {
		s.mu.Lock()
		v := s.live[vmID]
		s.mu.Unlock()
		if v == nil || v.tenantID != tenantID {
			return gateway.PermissionVerdict{}, false, nil
		}
		if b := v.current(); b != nil {
			webhookURL = b.PermissionWebhookURL
		}
		if webhookURL == "" {
			return gateway.PermissionVerdict{}, false, nil
		}
	}
	body, err := json.Marshal(PermissionRequest{
		Type: "permission.request", TenantID: tenantID, VMID: vmID, SessionID: sessionID,
		RequestID: p.RequestID, ToolCall: orNull(p.ToolCall), Options: orNull(p.Options),
	})
	if err != nil {
		return gateway.PermissionVerdict{}, true, fmt.Errorf("permission webhook: encode request: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.PermissionTimeout)
	defer cancel()
	answer, _, err := s.hooks.Post(ctx, tenantID, webhookURL, p.RequestID, body)
	if err != nil {
		return gateway.PermissionVerdict{}, true, fmt.Errorf("permission webhook: %w", err)
	}
	var verdict gateway.PermissionVerdict
	if err := json.Unmarshal(answer, &verdict); err != nil {
		return gateway.PermissionVerdict{}, true, fmt.Errorf("permission webhook answer: %w", err)
	}
	switch {
	case verdict.OptionID != "":
	case verdict.Decision == gateway.DecisionAllow || verdict.Decision == gateway.DecisionReject:
	default:
		return gateway.PermissionVerdict{}, true, errors.New("permission webhook answered neither an optionId nor a decision of allow or reject")
	}
	return verdict, true, nil
}

func orNull(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	return raw
}
