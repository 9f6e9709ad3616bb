package sidecarpool

import (
	"fmt"
)

// Placement is the rule that picks, among the sidecars with room, the one a
// new hold goes to.
type Placement string

// Placement rules.
const (
	// PlacementPack fills a sidecar up to VMsPerSidecar before another is
	// used: a sidecar costs far more memory than a VM on it (measured on
	// 0.2.21, see README), so fewer, fuller sidecars hold the same VMs in
	// less memory.
	PlacementPack Placement = "pack"
	// PlacementSpread puts each hold on the least-loaded sidecar, spreading
	// VMs over every sidecar the pool runs.
	PlacementSpread Placement = "spread"
)

// ParsePlacement returns the placement rule named s.
func ParsePlacement(s string) (Placement, error) {
	switch p := Placement(s); p {
	case PlacementPack, PlacementSpread:
		return p, nil
	}
	return "", fmt.Errorf("placement %q is neither pack nor spread", s)
}

// better reports whether candidate e beats the best so far under rule p.
// Both have room. Holds on a ready sidecar are served at once, while a
// starting one keeps its caller waiting for the spawn, so under pack a ready
// sidecar wins whatever its load; under spread the load decides first, as
// it always did. Remaining ties keep the older sidecar (the one seen first).
func (p Placement) better(e, best *sidecar) bool {
	eReady, bestReady := e.state == StateReady, best.state == StateReady
	if p == PlacementSpread {
		return e.holds < best.holds || (e.holds == best.holds && eReady && !bestReady)
	}
	if eReady != bestReady {
		return eReady
	}
	return e.holds > best.holds
}

// Assign moves the lease's hold to tenantID: a hold taken for no tenant
// (a warm VM's) is listed under the tenant it was handed to. It does
// nothing on a released lease.
func (l *Lease) Assign(tenantID string) {
	p := l.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if l.released.Load() || l.tenant == tenantID {
		return
	}
	if l.e.tenants[l.tenant]--; l.e.tenants[l.tenant] <= 0 {
		delete(l.e.tenants, l.tenant)
	}
	l.e.tenants[tenantID]++
	l.tenant = tenantID
}

// Draining reports whether the leased sidecar takes no new holds any more
// (it is over the memory high-water mark, stopping, or gone): what still
// holds it keeps it alive, so a hold nobody uses yet should be given back.
func (l *Lease) Draining() bool {
	p := l.p
	p.mu.Lock()
	defer p.mu.Unlock()
	return l.e.removed || l.e.state != StateReady
}
