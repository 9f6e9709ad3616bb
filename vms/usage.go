package vms

import (
	"context"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/agentos"
	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
	"github.com/agentos-gateway/agentos-gateway/metering"
)

// A VM's usage is metering's to account for (metering.Meter, s.usage);
// the service hands it the live VMs (liveVM is a metering.VM) and what only
// the service knows of them (meterNode), and answers for VMs that do not
// run here.

// Usage returns a tenant's VM's usage. A running VM's figures are at most
// metering.TTL old; a hibernated or waking VM is answered without waking it or
// waiting for it, with its image's size alone. Reading the usage is not
// use: it does not keep a VM from going idle. A VM being created or ended
// is CodeConflict.
func (s *Service) Usage(ctx context.Context, tenantID, id string) (metering.Usage, error) {
	if lv := s.liveForUsage(tenantID, id); lv != nil {
		return s.usageOf(ctx, lv)
	}
	rec, err := s.store.GetVM(ctx, tenantID, id)
	if err != nil {
		return metering.Usage{}, err
	}
	switch {
	case rec.State == gateway.VMHibernated || rec.State == gateway.VMWaking:
		// A waking VM is answered as the hibernated one it still is, rather
		// than waited for: a page opened on a hibernated VM reads its usage
		// while the same page wakes it.
		out := metering.Usage{VMID: rec.ID, State: rec.State, CollectedAt: s.cfg.Now().UTC()}
		if rec.Image != "" {
			out.ImageBytes = &rec.ImageBytes
		}
		return out, nil
	case rec.State == gateway.VMReady && rec.Node == s.cfg.NodeID:
		// A wake finished between the two reads above, or is about to: its
		// record says ready a moment before the VM takes calls.
		if lv := s.liveForUsage(tenantID, id); lv != nil {
			return s.usageOf(ctx, lv)
		}
		if s.wakingHere(id) {
			return metering.Usage{VMID: rec.ID, State: gateway.VMWaking, CollectedAt: s.cfg.Now().UTC()}, nil
		}
	}
	return metering.Usage{}, stateConflict(rec)
}

// liveForUsage returns a tenant's VM this service runs, without marking it
// used as liveOf does.
func (s *Service) liveForUsage(tenantID, id string) *liveVM {
	s.mu.Lock()
	lv := s.live[id]
	s.mu.Unlock()
	if lv == nil || lv.tenantID != tenantID {
		return nil
	}
	lv.mu.Lock()
	ended := lv.ended
	lv.mu.Unlock()
	if ended {
		return nil
	}
	return lv
}

// usageOf returns lv's figures, at most metering.TTL old.
func (s *Service) usageOf(ctx context.Context, lv *liveVM) (metering.Usage, error) {
	return s.usage.Usage(ctx, meterNode{s}, lv)
}

// beginUsageLocked takes a VM's first CPU sample as it goes live, so that its
// CPU time counts from its start. s.mu must be held.
func (s *Service) beginUsageLocked(lv *liveVM) {
	s.usage.Begin(lv, s.ownSidecarLocked(lv))
}

// ownSidecarLocked reports whether no other tenant VM (a VM this service
// runs) is on lv's sidecar. s.mu must be held.
func (s *Service) ownSidecarLocked(lv *liveVM) bool {
	others := lv.vm.Sidecar().VMs()
	if len(others) <= 1 {
		return true
	}
	live := make(map[*agentos.VM]bool, len(s.live))
	for _, o := range s.live {
		live[o.vm] = true
	}
	for _, v := range others {
		if v != lv.vm && live[v] {
			return false
		}
	}
	return true
}

// TenantUsage returns the per-tenant figures of the last metrics pass, by
// label, and how long that pass took. Every label given out is listed, with
// zeros once its tenant has no VM here, so that its CPU counter stays.
func (s *Service) TenantUsage() ([]metering.TenantUsage, time.Duration) {
	return s.usage.Tenants()
}

// collectAllUsage is the metrics pass over every live VM.
func (s *Service) collectAllUsage() {
	s.usage.Pass(s.life, meterNode{s})
}

// meterNode is the service as the meter sees it.
type meterNode struct{ s *Service }

func (n meterNode) Now() time.Time { return n.s.cfg.Now() }

func (n meterNode) Live() []metering.VM {
	n.s.mu.Lock()
	defer n.s.mu.Unlock()
	out := make([]metering.VM, 0, len(n.s.live))
	for _, lv := range n.s.live {
		out = append(out, lv)
	}
	return out
}

func (n meterNode) Alone(vm metering.VM) bool {
	n.s.mu.Lock()
	defer n.s.mu.Unlock()
	return n.s.ownSidecarLocked(vm.(*liveVM))
}

// The metering.VM of a live VM.

func (lv *liveVM) ID() string                { return lv.id }
func (lv *liveVM) Tenant() string            { return lv.tenantID }
func (lv *liveVM) Sidecar() *agentos.Sidecar { return lv.vm.Sidecar() }

func (lv *liveVM) Resources(ctx context.Context) (protocol.ResourceSnapshotResponse, error) {
	snap, err := lv.vm.Resources(ctx)
	return snap, EngineError(err, "usage")
}

func (lv *liveVM) State() (gateway.VMState, bool) {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	if lv.hibernating {
		return gateway.VMHibernating, lv.ended
	}
	return gateway.VMReady, lv.ended
}
