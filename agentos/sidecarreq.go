package agentos

import (
	"context"
	"time"

	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

// sidecarRequestTimeout bounds how long the host takes to answer a request of
// the sidecar; an unanswered request would stall the guest forever.
const sidecarRequestTimeout = 2 * time.Minute

// serveSidecarRequest answers one request the sidecar made of the host. It
// runs on its own goroutine because answering may need round trips of its own
// (an ACP fs/read_text_file reads the guest filesystem). Every request gets an
// answer, an error when nothing handles it, echoing id and ownership.
func (s *Sidecar) serveSidecarRequest(f protocol.SidecarRequestFrame) {
	defer s.wg.Done()
	ctx, cancel := context.WithTimeout(s.life, sidecarRequestTimeout)
	defer cancel()

	var reply protocol.SidecarResponsePayload
	switch r := f.Payload.(type) {
	case protocol.HostCallbackRequest:
		reply = s.serveHostCall(ctx, f.Ownership, r)
	case protocol.JSBridgeCallRequest:
		msg := "no sidecar request handler registered for js_bridge"
		reply = protocol.JSBridgeResultResponse{CallID: r.CallID, Error: &msg}
	case protocol.ExtEnvelope:
		reply = s.serveExt(ctx, f.Ownership, r)
	default:
		return
	}
	frame := protocol.SidecarResponseFrame{Schema: protocol.Schema, RequestID: f.RequestID, Ownership: f.Ownership, Payload: reply}
	_ = s.send(ctx, s.ctlLane, frame)
}

func (s *Sidecar) serveExt(ctx context.Context, own protocol.OwnershipScope, env protocol.ExtEnvelope) protocol.ExtEnvelope {
	if env.Namespace != protocol.ACPNamespace {
		return protocol.ExtEnvelope{Namespace: env.Namespace, Payload: []byte("unknown extension namespace")}
	}
	var vm *VM
	if vo, ok := own.(protocol.VMOwnership); ok {
		s.mu.Lock()
		vm = s.vms[vo.VMID]
		s.mu.Unlock()
	}
	var response *string
	cb, err := protocol.UnmarshalACPCallback(env.Payload)
	if err == nil {
		if hr, ok := cb.(protocol.ACPHostRequestCallback); ok {
			out := serveACPHostRequest(ctx, vm, hr.Request)
			response = &out
		}
	}
	payload, _ := protocol.MarshalACPCallbackResponse(protocol.ACPHostRequestCallbackResponse{Response: response})
	return protocol.ExtEnvelope{Namespace: protocol.ACPNamespace, Payload: payload}
}
