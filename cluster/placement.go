package cluster

import (
	"cmp"
	"slices"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// Rank orders candidate nodes for a new VM, best first: the least-loaded
// node, where load is the share of its capacity in use (VMs / Capacity;
// a node that reports no capacity counts its VMs alone), then the one with
// the smaller RSS, then by id so that the order is stable.
//
// The VM counts come from the store at the moment of the create (a
// COUNT(*) of the VMs that are not final, by owner), not from heartbeats,
// so least-loaded works on exact information: the simulation in
// placement_sim_test.go shows it then beats best-of-2 random choices, which
// only win when loads are seconds stale.
func Rank(nodes []gateway.Node) {
	slices.SortStableFunc(nodes, func(a, b gateway.Node) int {
		// a.VMs/a.Capacity < b.VMs/b.Capacity, without division.
		ca, cb := max(a.Capacity, 1), max(b.Capacity, 1)
		if c := cmp.Compare(a.VMs*cb, b.VMs*ca); c != 0 {
			return c
		}
		if c := cmp.Compare(a.RSS, b.RSS); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
}
