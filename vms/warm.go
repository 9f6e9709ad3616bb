package vms

import (
	"context"
	"reflect"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/agentos"
	"github.com/agentos-gateway/agentos-gateway/warmpool"
)

// WarmVMs hands out VMs created ahead of demand with the default spec.
type WarmVMs interface {
	// Take hands a warm VM of the tenant's isolation class over, or
	// reports false (a miss).
	Take(tenantID string, isolated bool) (*agentos.VM, warmpool.Lease, bool)
	// Miss records a create whose spec no warm VM can serve.
	Miss(tenantID string, isolated bool)
	// Evict disposes one warm VM to make room, reporting whether it did.
	Evict(ctx context.Context, tenantID string, isolated bool) bool
	Stats() warmpool.Stats
}

// WarmStats returns the warm VMs' counters (zero without warm VMs).
func (s *Service) WarmStats() warmpool.Stats {
	if s.cfg.Warm == nil {
		return warmpool.Stats{}
	}
	return s.cfg.Warm.Stats()
}

// place gives a new VM of the tenant a VM and a hold on its sidecar: a warm
// VM when one can serve the spec, else a VM created for it. A warm VM gets
// the spec's env now; its labels and idle timeout are the gateway's.
func (s *Service) place(ctx context.Context, tenant gateway.Tenant, spec gateway.VMSpec, opts agentos.VMOptions) (*agentos.VM, Lease, error) {
	warm := s.cfg.Warm
	if warm != nil {
		// A root filesystem (a snapshot's or a hibernated VM's image) is
		// the engine's to create the VM with: no warm VM has it.
		if !warmServable(spec) || opts.RootSnapshot != nil {
			warm.Miss(tenant.ID, tenant.Isolated)
		} else if vm, lease, ok := warm.Take(tenant.ID, tenant.Isolated); ok {
			vm.SetEnv(spec.Env)
			return vm, lease, nil
		}
	}
	lease, err := s.pool.Acquire(ctx, tenant.ID, tenant.Isolated)
	if gateway.ErrorCode(err) == gateway.CodeResourceExhausted && warm != nil && warm.Evict(ctx, tenant.ID, tenant.Isolated) {
		// Warm VMs are spare capacity: a tenant's VM that needs the room
		// they hold gets it.
		lease, err = s.pool.Acquire(ctx, tenant.ID, tenant.Isolated)
	}
	if err != nil {
		return nil, nil, err
	}
	vm, err := lease.Sidecar().CreateVM(ctx, opts)
	if err != nil {
		lease.Release()
		return nil, nil, createError(err, spec.Limits)
	}
	if why := vm.OwnLayer(); why != "" {
		// Correct, but every file call of this VM costs more: worth
		// knowing when a tenant's VM is slow.
		s.log.Info().Str("tenant", tenant.ID).Str("engineVM", vm.ID()).Str("why", why).
			Msg("vm created with its whole tree in its own layer, not over the engine's base")
	}
	return vm, lease, nil
}

// warmServable reports whether a VM created with the default spec can serve
// spec: every field it sets must be one applied after creation (env, by
// VM.SetEnv) or kept by the gateway alone (labels, the idle timeout). A
// field added to VMSpec later is taken to need the creation until listed
// here, so that a warm VM never serves a spec it does not honour. Empty
// lists and maps are the default, as vmOptions treats them.
func warmServable(spec gateway.VMSpec) bool {
	if spec.Permissions != nil {
		// Even an empty policy is sent to the engine as one, unlike none.
		return false
	}
	spec.Env, spec.Labels, spec.IdleTimeoutSeconds = nil, nil, 0
	v := reflect.ValueOf(spec)
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.Map, reflect.Slice:
			if f.Len() > 0 {
				return false
			}
		default:
			if !f.IsZero() {
				return false
			}
		}
	}
	return true
}
