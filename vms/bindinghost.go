package vms

import (
	"context"
	"encoding/json"

	"github.com/agentos-gateway/agentos-gateway/agentos"
)

// The engine's words for host bindings, which the bindings service speaks
// without importing the engine.
type (
	// HostCall is a guest's call of a host binding, as the engine hands it
	// over.
	HostCall = agentos.HostCall
	// HostCallbackCollection is a collection of host functions as the
	// engine takes it.
	HostCallbackCollection = agentos.HostCallbackCollection
	// HostCallback is one function of a HostCallbackCollection.
	HostCallback = agentos.HostCallback
	// HostCallbackExample is an example input of a HostCallback.
	HostCallbackExample = agentos.HostCallbackExample
)

// BindingHost is the part of a VM's engine that host bindings use: it
// registers collections of host functions and routes the guest's calls of
// them. It is all the bindings service gets of the engine.
type BindingHost struct{ vm *agentos.VM }

// HandleCalls makes h answer every host call of the VM's guests from now on.
func (b BindingHost) HandleCalls(h func(ctx context.Context, call HostCall) (json.RawMessage, error)) {
	b.vm.SetHostCallHandler(h)
}

// Register gives the engine a collection; the engine takes a collection's
// name once and cannot take it back.
func (b BindingHost) Register(ctx context.Context, c HostCallbackCollection) error {
	_, err := b.vm.RegisterHostCallbacks(ctx, c)
	return err
}

// Hold holds a tenant's live VM busy, as any request does, until release
// is called; it fails as a request on the VM would (not found, not live
// here, ended).
func (s *Service) Hold(ctx context.Context, tenantID, id string) (release func(), err error) {
	lv, err := s.lookup(ctx, tenantID, id)
	if err != nil {
		return nil, err
	}
	return lv.hold(s.cfg.Now()), nil
}
