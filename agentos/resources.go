package agentos

import (
	"context"
	"fmt"

	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

// Resources returns the VM kernel's resource counters.
func (vm *VM) Resources(ctx context.Context) (protocol.ResourceSnapshotResponse, error) {
	resp, err := vm.call(ctx, protocol.GetResourceSnapshotRequest{})
	if err != nil {
		return protocol.ResourceSnapshotResponse{}, fmt.Errorf("agentos: resources: %w", err)
	}
	r, ok := resp.(protocol.ResourceSnapshotResponse)
	if !ok {
		return r, unexpected("GetResourceSnapshotRequest", resp)
	}
	return r, nil
}
