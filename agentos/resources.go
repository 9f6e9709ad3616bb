package agentos

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

// Resources returns the VM kernel's resource counters.
//
// The pinned engine (0.2.21) answers the snapshot of one VM with the
// "resource" entries (vm_filesystem_bytes, vm_processes, ...) of every VM of
// its sidecar, one VM's after another in the order the VMs were created,
// and no VM id: measured with VMs that wrote 1, 2 and 3 MiB, whichever VM
// asked. The VM's own entries are picked by its rank among the sidecar's
// VMs. When that rank is uncertain (a VM was being created, or the VMs
// changed during the call, or the entries do not match the VMs this client
// knows), the resource entries are left out: no other VM's figures pass
// for this one's.
func (vm *VM) Resources(ctx context.Context) (protocol.ResourceSnapshotResponse, error) {
	before, ok := vm.s.vmOrder()
	resp, err := vm.call(ctx, protocol.GetResourceSnapshotRequest{})
	if err != nil {
		return protocol.ResourceSnapshotResponse{}, fmt.Errorf("agentos: resources: %w", err)
	}
	r, isSnap := resp.(protocol.ResourceSnapshotResponse)
	if !isSnap {
		return r, unexpected("GetResourceSnapshotRequest", resp)
	}
	after, stable := vm.s.vmOrder()
	rank := -1
	if ok && stable && slices.Equal(before, after) {
		rank = slices.Index(before, vm.id)
	}
	r.QueueSnapshots = ownEntries(r.QueueSnapshots, rank, len(before))
	return r, nil
}

// ownEntries keeps the entries that are not per-VM resources, and of those
// that are, the rank-th VM's of vms: each VM lists each resource once, so
// the n-th entry of a name is the n-th VM's. A rank below 0, or names
// listed another number of times than vms, keep no resource entry.
func ownEntries(entries []protocol.QueueSnapshotEntry, rank, vms int) []protocol.QueueSnapshotEntry {
	seen := map[string]int{}
	for _, e := range entries {
		if e.Category == "resource" {
			seen[e.Name]++
		}
	}
	for _, n := range seen {
		if n != vms {
			rank = -1
		}
	}
	out := entries[:0:0]
	at := map[string]int{}
	for _, e := range entries {
		if e.Category != "resource" {
			out = append(out, e)
			continue
		}
		if at[e.Name] == rank {
			out = append(out, e)
		}
		at[e.Name]++
	}
	return out
}

// vmOrder returns the ids of the sidecar's VMs in the order they were
// created (the engine numbers them "vm-1", "vm-2", ...), and false while a
// creation is in flight or an id is not of that form.
func (s *Sidecar) vmOrder() ([]string, bool) {
	s.mu.Lock()
	ids := make([]string, 0, len(s.vms))
	for id := range s.vms {
		ids = append(ids, id)
	}
	creating := s.creating
	s.mu.Unlock()
	nums := make(map[string]int, len(ids))
	for _, id := range ids {
		n, err := strconv.Atoi(strings.TrimPrefix(id, "vm-"))
		if err != nil || !strings.HasPrefix(id, "vm-") {
			return ids, false
		}
		nums[id] = n
	}
	slices.SortFunc(ids, func(a, b string) int { return nums[a] - nums[b] })
	return ids, creating == 0
}
