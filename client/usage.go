package client

import (
	"context"

	"github.com/agentos-gateway/agentos-gateway/api"
)

// VMUsage is a VM's use of its node: its memory and CPU time when it has
// its sidecar to itself (OwnSidecar), its guest processes, open handles and
// filesystem bytes as the engine counts them, and their limits; for a
// hibernated VM, its stored image's size alone. Absent figures are ones the
// engine cannot give.
type VMUsage = api.VMUsage

// UsageProcesses counts a VM's guest processes.
type UsageProcesses = api.UsageProcesses

// UsageHandles counts what a VM's guest processes hold open.
type UsageHandles = api.UsageHandles

// UsageLimits are the engine's limits of a VM's usage figures.
type UsageLimits = api.UsageLimits

// Usage returns the VM's usage, at most 2 s old. It does not wake a
// hibernated VM, nor count as use of a running one.
func (v *VMHandle) Usage(ctx context.Context) (*VMUsage, error) {
	return get[VMUsage](ctx, v.c, vmPath(v.id, "usage"), nil)
}
