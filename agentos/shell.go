package agentos

import (
	"context"
	"fmt"

	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

// Resize changes the window size of a process running on a PTY.
func (p *Process) Resize(ctx context.Context, cols, rows uint16) error {
	if cols == 0 || rows == 0 {
		return fmt.Errorf("%w: cols and rows must be positive", ErrInvalidArgument)
	}
	resp, err := p.vm.call(ctx, protocol.ResizePTYRequest{ProcessID: p.id, Cols: cols, Rows: rows})
	if err != nil {
		return fmt.Errorf("agentos: resize %s: %w", p.id, err)
	}
	if _, ok := resp.(protocol.PTYResizedResponse); !ok {
		return unexpected("ResizePtyRequest", resp)
	}
	return nil
}

// ShellName returns the guest shell a request names: "sh" (also for "") or
// "bash", both brush in the guest; any other name is ErrInvalidArgument.
func ShellName(name string) (string, error) {
	switch name {
	case "":
		return "sh", nil
	case "sh", "bash":
		return name, nil
	}
	return "", fmt.Errorf("%w: shell must be sh or bash, not %q", ErrInvalidArgument, name)
}
