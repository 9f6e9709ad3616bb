package vms

import (
	"context"
	"errors"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/agentos"
)

// FetchRequest is an HTTP request to a server listening inside the VM.
type FetchRequest = agentos.FetchRequest

// GuestResponse is a streamed answer of a server inside a VM. Close it:
// that ends the sidecar's stream and the hold on the VM.
type GuestResponse struct {
	*agentos.FetchStream
	release func()
}

// Close ends the stream and the hold on the VM.
func (g *GuestResponse) Close() error {
	err := g.FetchStream.Close()
	g.release()
	return err
}

// Fetch sends an HTTP request to a server listening on req.Port inside a
// tenant's live VM and returns its answer once the head arrived; the body
// streams. The VM stays busy (not reaped as idle) until the answer is
// closed.
func (s *Service) Fetch(ctx context.Context, tenantID, vmID string, req FetchRequest) (*GuestResponse, error) {
	lv, err := s.lookup(ctx, tenantID, vmID)
	if err != nil {
		return nil, err
	}
	release := lv.hold(s.cfg.Now())
	st, err := lv.vm.FetchStream(ctx, req)
	if err != nil {
		release()
		return nil, fetchError(err, req.Port)
	}
	return &GuestResponse{FetchStream: st, release: release}, nil
}

// fetchError maps a failed guest request. The engine rejects a request
// to a port nothing listens on as an execution error; its resource limits
// (a request body over the VM's socket buffer) as EAGAIN.
func fetchError(err error, port uint16) error {
	var rej *agentos.RejectedError
	if errors.As(err, &rej) {
		switch {
		case rej.Errno == "EAGAIN":
			return gateway.Wrap(gateway.CodeResourceExhausted, err, "the request to port %d is larger than the VM's socket buffers take", port)
		case rej.Code == "execution_error":
			return gateway.Wrap(gateway.CodeUnavailable, err, "no HTTP server listens on port %d in the VM", port).WithDetail("port", port)
		}
	}
	return EngineError(err, "guest request")
}
