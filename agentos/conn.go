package agentos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

// readLane reads frames from one sidecar→host lane until it fails. Any read
// or decode error is fatal for the whole connection, as in the official
// client: a lane that lost framing cannot be resynchronised.
func (s *Sidecar) readLane(name string, r io.Reader) {
	defer s.wg.Done()
	fr := protocol.NewFrameReader(r, s.opts.MaxFrameBytes)
	for {
		payload, err := fr.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("%s lane closed", name)
			} else {
				err = fmt.Errorf("%s lane: %w", name, err)
			}
			s.trip(err)
			return
		}
		s.lastActivity.Store(time.Now().UnixNano())
		frame, err := protocol.UnmarshalFrame(payload)
		if err != nil {
			s.trip(fmt.Errorf("%w: %s lane: %w", ErrProtocol, name, err))
			return
		}
		if err := s.dispatch(name, frame); err != nil {
			s.trip(err)
			return
		}
	}
}

func checkSchema(sc protocol.ProtocolSchema) error {
	if sc.Name != protocol.SchemaName || sc.Version != protocol.SchemaVersion {
		return fmt.Errorf("%w: schema %s v%d, want %s v%d", ErrProtocol, sc.Name, sc.Version, protocol.SchemaName, protocol.SchemaVersion)
	}
	return nil
}

// dispatch routes one inbound frame. It runs on a lane's reader goroutine and
// must never block: everything it hands on goes into bounded, non-blocking
// structures, and work that needs further round trips (sidecar requests) runs
// on goroutines of its own.
func (s *Sidecar) dispatch(lane string, frame protocol.ProtocolFrame) error {
	switch f := frame.(type) {
	case protocol.ResponseFrame:
		if err := checkSchema(f.Schema); err != nil {
			return err
		}
		if lane != "control" {
			return fmt.Errorf("%w: response on the %s lane", ErrProtocol, lane)
		}
		s.mu.Lock()
		ch, ok := s.pending[f.RequestID]
		delete(s.pending, f.RequestID)
		s.mu.Unlock()
		if ok {
			ch <- response{ownership: f.Ownership, payload: f.Payload} // buffered, never blocks
		}
		// A response nobody waits for belongs to a call whose context was
		// cancelled; dropping it is correct.
		return nil
	case protocol.EventFrame:
		if err := checkSchema(f.Schema); err != nil {
			return err
		}
		if ev, ok := f.Payload.(protocol.StructuredEvent); ok && ev.Name == "heartbeat" {
			return nil // liveness only; already counted by the reader
		}
		if lane != "events" {
			return fmt.Errorf("%w: %T event on the %s lane", ErrProtocol, f.Payload, lane)
		}
		s.routeEvent(f.Ownership, f.Payload)
		return nil
	case protocol.SidecarRequestFrame:
		if err := checkSchema(f.Schema); err != nil {
			return err
		}
		if lane != "control" {
			return fmt.Errorf("%w: sidecar request on the %s lane", ErrProtocol, lane)
		}
		s.wg.Add(1)
		go s.serveSidecarRequest(f)
		return nil
	default:
		return fmt.Errorf("%w: unexpected %T from the sidecar", ErrProtocol, frame)
	}
}

// routeEvent hands an event to the VM that owns it.
func (s *Sidecar) routeEvent(own protocol.OwnershipScope, ev protocol.EventPayload) {
	vo, ok := own.(protocol.VMOwnership)
	if !ok {
		return // connection/session events carry nothing a client acts on
	}
	s.mu.Lock()
	vm := s.vms[vo.VMID]
	if vm == nil && s.creating > 0 && len(s.orphans[vo.VMID]) < maxOrphanEvents {
		s.orphans[vo.VMID] = append(s.orphans[vo.VMID], ev)
	}
	s.mu.Unlock()
	if vm != nil {
		vm.handleEvent(ev)
	}
}

// maxOrphanEvents bounds what is kept for a VM whose id is not known yet; a
// VM being created produces a handful (CREATING, READY).
const maxOrphanEvents = 64

// call sends a request and waits for its response. A RejectedResponse comes
// back as *RejectedError. ctx abandons the wait (the request may still run in
// the sidecar); the sidecar's death fails the call with its exit error.
func (s *Sidecar) call(ctx context.Context, own protocol.OwnershipScope, req protocol.RequestPayload) (_ protocol.ResponsePayload, err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if span := s.startRequestSpan(ctx, own, req); span != nil {
		defer func() { endRequestSpan(span, err) }()
	}
	id := s.nextID.Add(1)
	ch := make(chan response, 1)
	s.mu.Lock()
	if s.pending == nil {
		s.mu.Unlock()
		<-s.dead
		return nil, s.deadErr
	}
	s.pending[id] = ch
	s.mu.Unlock()

	frame := protocol.RequestFrame{Schema: protocol.Schema, RequestID: id, Ownership: own, Payload: req}
	if err := s.send(ctx, s.reqLane, frame); err != nil {
		s.forget(id)
		return nil, err
	}
	select {
	case r, ok := <-ch:
		if !ok {
			return nil, s.deadErr
		}
		if rej, isRej := r.payload.(protocol.RejectedResponse); isRej {
			return nil, newRejectedError(payloadName(req), rej)
		}
		return r.payload, nil
	case <-ctx.Done():
		s.forget(id)
		return nil, ctx.Err()
	}
}

func (s *Sidecar) forget(id int64) {
	s.mu.Lock()
	if s.pending != nil {
		delete(s.pending, id)
	}
	s.mu.Unlock()
}

// laneWriter is the write side of a host→sidecar lane. A one-slot semaphore
// rather than a mutex serialises whole frames, so a caller can give up
// waiting for its turn without abandoning a frame half written.
type laneWriter struct {
	sem chan struct{}
	w   io.Writer
}

func newLaneWriter(w io.Writer) *laneWriter {
	return &laneWriter{sem: make(chan struct{}, 1), w: w}
}

// send encodes a frame and writes it whole. A write that has begun is never
// abandoned (that would desynchronise the lane); ctx only bounds the wait for
// the lane. A failed write is fatal for the connection.
func (s *Sidecar) send(ctx context.Context, l *laneWriter, frame protocol.ProtocolFrame) error {
	// The frame is built in a pooled buffer: a file chunk's frame is
	// megabytes, and the buffer is free again once written.
	pooled := transferBuffers.get(0)
	defer transferBuffers.put(pooled)
	buf, err := protocol.AppendFrame((*pooled)[:0], frame)
	*pooled = buf
	if err != nil {
		return fmt.Errorf("agentos: encode %s: %w", payloadName(frame), err)
	}
	if len(buf)-4 > s.maxSend() {
		return fmt.Errorf("%w: frame of %d bytes exceeds the sidecar's limit of %d", ErrInvalidArgument, len(buf)-4, s.maxSend())
	}
	select {
	case l.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.dead:
		return s.deadErr
	}
	_, err = l.w.Write(buf)
	<-l.sem
	if err != nil {
		s.trip(fmt.Errorf("write: %w", err))
		<-s.dead
		return s.deadErr
	}
	return nil
}

func (s *Sidecar) maxSend() int {
	if s.maxSendBytes > 0 {
		return s.maxSendBytes
	}
	return protocol.DefaultMaxFrameBytes
}

// handshake authenticates and opens the session every VM of this connection
// lives in (SPEC §6).
func (s *Sidecar) handshake(ctx context.Context) error {
	resp, err := s.call(ctx, protocol.ConnectionOwnership{ConnectionID: "client-hint"}, protocol.AuthenticateRequest{
		ClientName: clientName, AuthToken: clientToken,
		ProtocolVersion: protocol.SchemaVersion, BridgeVersion: bridgeVersion,
	})
	if err != nil {
		return err
	}
	auth, ok := resp.(protocol.AuthenticatedResponse)
	if !ok {
		return unexpected("AuthenticateRequest", resp)
	}
	s.connectionID = auth.ConnectionID
	if auth.MaxFrameBytes > 0 {
		s.maxSendBytes = int(auth.MaxFrameBytes)
	}
	resp, err = s.call(ctx, protocol.ConnectionOwnership{ConnectionID: s.connectionID}, protocol.OpenSessionRequest{
		Placement: protocol.SidecarPlacementShared{},
		Metadata:  protocol.Map[string, string]{},
	})
	if err != nil {
		return err
	}
	opened, ok := resp.(protocol.SessionOpenedResponse)
	if !ok {
		return unexpected("OpenSessionRequest", resp)
	}
	s.sessionID = opened.SessionID
	return nil
}

func unexpected(op string, resp protocol.ResponsePayload) error {
	return fmt.Errorf("%w: %s answered with %T", ErrProtocol, op, resp)
}

// payloadName is a payload's schema type name, for messages.
func payloadName(p any) string {
	n := fmt.Sprintf("%T", p)
	return n[strings.LastIndexByte(n, '.')+1:]
}
