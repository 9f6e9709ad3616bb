package agentos

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

// HostCallbackCollection is a named set of host functions a VM's guest runs
// as the engine's command agentos-<Name> (SPEC §8, the SDK's hostFunctions):
// `agentos-<Name> <function> --<field> <value>…` or `--json '<input>'`.
type HostCallbackCollection struct {
	Name        string
	Description string
	Callbacks   []HostCallback
}

// HostCallback is one host function of a collection.
type HostCallback struct {
	Name        string
	Description string
	// InputSchema is the JSON Schema the engine checks inputs against before
	// the host is called.
	InputSchema json.RawMessage
	// Timeout is how long the guest waits for the host's answer (0: the
	// engine's default).
	Timeout  time.Duration
	Examples []HostCallbackExample
}

// HostCallbackExample is an example input the engine shows in the
// command's help and the agents' tool reference.
type HostCallbackExample struct {
	Description string
	Input       json.RawMessage
}

// HostCall is one invocation of a host function by the guest.
type HostCall struct {
	InvocationID string
	// Key names the function as the engine does: "<collection>:<function>".
	Key   string
	Input json.RawMessage
	// Timeout is how long the guest waits for the answer.
	Timeout time.Duration
}

// HostCallHandler answers the host calls of one VM. Its result is the JSON
// the guest command prints as {"ok":true,"result":…}; an error's message is
// what the command prints on stderr, exiting 1. ctx ends when the guest
// stops waiting (the engine gives up at the function's timeout itself).
type HostCallHandler func(ctx context.Context, call HostCall) (json.RawMessage, error)

// SetHostCallHandler makes h answer the VM's host calls; nil refuses them.
func (vm *VM) SetHostCallHandler(h HostCallHandler) {
	vm.mu.Lock()
	vm.hostCalls = h
	vm.mu.Unlock()
}

// RegisterHostCallbacks registers a collection with the engine, so that the
// guest gets its agentos-<name> command and the agents its tool reference.
// It returns how many commands the engine projected.
func (vm *VM) RegisterHostCallbacks(ctx context.Context, c HostCallbackCollection) (int, error) {
	req := protocol.RegisterHostCallbacksRequest{
		Name: c.Name, Description: c.Description,
		// The alias is what projects the command: without it the engine
		// registers the collection but the guest has no agentos-<name>.
		CommandAliases: []string{"agentos-" + c.Name}, RegistryCommandAliases: []string{},
	}
	for _, cb := range c.Callbacks {
		def := protocol.RegisteredHostCallbackDefinition{
			Description: cb.Description, InputSchema: string(cb.InputSchema),
			Examples: make([]protocol.RegisteredHostCallbackExample, len(cb.Examples)),
		}
		if cb.Timeout > 0 {
			ms := uint64(cb.Timeout.Milliseconds())
			def.TimeoutMs = &ms
		}
		for i, ex := range cb.Examples {
			def.Examples[i] = protocol.RegisteredHostCallbackExample{Description: ex.Description, Input: string(ex.Input)}
		}
		req.Callbacks.Set(cb.Name, def)
	}
	resp, err := vm.call(ctx, req)
	if err != nil {
		return 0, fmt.Errorf("agentos: register host callbacks %q: %w", c.Name, err)
	}
	r, ok := resp.(protocol.HostCallbacksRegisteredResponse)
	if !ok {
		return 0, unexpected("RegisterHostCallbacksRequest", resp)
	}
	return int(r.CommandCount), nil
}

// serveHostCall answers a HostCallbackRequest with the handler of its VM,
// within the timeout the guest waits for.
func (s *Sidecar) serveHostCall(ctx context.Context, own protocol.OwnershipScope, r protocol.HostCallbackRequest) protocol.HostCallbackResultResponse {
	reply := protocol.HostCallbackResultResponse{InvocationID: r.InvocationID}
	var h HostCallHandler
	if vo, ok := own.(protocol.VMOwnership); ok {
		s.mu.Lock()
		vm := s.vms[vo.VMID]
		s.mu.Unlock()
		if vm != nil {
			vm.mu.Lock()
			h = vm.hostCalls
			vm.mu.Unlock()
		}
	}
	if h == nil {
		msg := "no sidecar request handler registered for host_callback"
		reply.Error = &msg
		return reply
	}
	timeout := time.Duration(r.TimeoutMs) * time.Millisecond
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	out, err := h(ctx, HostCall{InvocationID: r.InvocationID, Key: r.CallbackKey, Input: json.RawMessage(r.Input), Timeout: timeout})
	if err != nil {
		msg := err.Error()
		reply.Error = &msg
		return reply
	}
	result := string(out)
	reply.Result = &result
	return reply
}
