// Package protocol implements the wire protocol spoken by the agentOS native
// sidecar: schema "agentos-native-sidecar" version 8 plus the ACP extension
// carried in ExtEnvelope payloads.
//
// It provides a Go type for every type of schema.bare, BARE encoding and
// decoding of the root types (MarshalFrame/UnmarshalFrame for ProtocolFrame,
// MarshalACPRequest/UnmarshalACPRequest and friends for the ACP roots), and
// the length-prefixed framing used on every lane (FrameReader, AppendFrame,
// WriteFrame).
//
// The types and codecs in zz_generated.go are generated from schema.bare by
// internal/baregen; run "go generate ./agentos/protocol" after editing the
// schema. Schema types map to Go as follows:
//
//   - struct → struct with fields in wire order; each field carries a
//     `bare:"schemaName"` tag;
//   - optional<T> → *T; list<T> → []T; map<K><V> → Map[K, V] (ordered);
//     str → string; data → []byte; uN/iN → uintN/intN;
//   - enum → a uint32 type with one constant per value;
//   - union → an interface implemented by the member types. Members are
//     stored as values, not pointers: switch on `case protocol.VMOwnership:`;
//   - void → struct{}; type aliases (RequestId, JsonUtf8) → Go aliases
//     (RequestID = int64, JSONText = string).
//
// Decoding is strict (canonical varints, 0/1 bools and presence bytes, valid
// UTF-8, known tags and enum values, unique map keys, exact consumption), so
// any accepted payload re-encodes to identical bytes. Decoding never panics,
// allocates at most in proportion to the input, and never aliases it: frame
// buffers can be reused as soon as Unmarshal* returns.
package protocol

import (
	"encoding/binary"
	"math"
)

// Schema identity and limits (SPEC §3, §5).
const (
	SchemaName           = "agentos-native-sidecar"
	SchemaVersion uint16 = 8
	// ACPNamespace is the ExtEnvelope namespace whose payload holds an ACP
	// root: ACPRequest in a RequestFrame, ACPResponse in a ResponseFrame,
	// ACPEvent in an EventFrame, ACPCallback in a SidecarRequestFrame and
	// ACPCallbackResponse in a SidecarResponseFrame.
	ACPNamespace = "dev.rivet.agent-os.acp"
	// DefaultMaxFrameBytes is the frame size limit the sidecar advertises
	// (AuthenticatedResponse.MaxFrameBytes).
	DefaultMaxFrameBytes = 16 << 20
)

// Schema is the ProtocolSchema every frame carries.
var Schema = ProtocolSchema{Name: SchemaName, Version: SchemaVersion}

// initialFrameCap is the starting buffer size for Marshal*: large enough
// for typical frames (the 27-byte schema header, ids and a small payload)
// to be encoded without regrowing.
const initialFrameCap = 256

// result returns the encoded bytes or the first encoding error.
func (w *Writer) result() ([]byte, error) {
	if err := w.Err(); err != nil {
		return nil, err
	}
	return w.buf, nil
}

// MarshalFrame returns the BARE encoding of f, without the length prefix.
func MarshalFrame(f ProtocolFrame) ([]byte, error) {
	w := Writer{buf: make([]byte, 0, initialFrameCap)}
	encodeProtocolFrame(&w, f)
	return w.result()
}

// AppendFrame appends f to dst as a complete frame: the 4-byte big-endian
// length prefix followed by the BARE payload. The payload is encoded in
// place and the prefix filled in afterwards, so nothing is copied. On error
// it returns dst with its original length.
func AppendFrame(dst []byte, f ProtocolFrame) ([]byte, error) {
	start := len(dst)
	w := Writer{buf: append(dst, 0, 0, 0, 0)}
	encodeProtocolFrame(&w, f)
	if err := w.Err(); err != nil {
		return dst, err
	}
	n := len(w.buf) - start - frameHeaderLen
	if uint64(n) > math.MaxUint32 {
		return dst, &FrameTooLargeError{Size: math.MaxUint32, Max: math.MaxUint32}
	}
	binary.BigEndian.PutUint32(w.buf[start:], uint32(n))
	return w.buf, nil
}

// UnmarshalFrame decodes a frame payload (without the length prefix). The
// payload must hold exactly one ProtocolFrame.
func UnmarshalFrame(payload []byte) (ProtocolFrame, error) {
	var r Reader
	r.Reset(payload)
	v := decodeProtocolFrame(&r)
	if err := r.finish("ProtocolFrame"); err != nil {
		return nil, err
	}
	return v, nil
}

// MarshalACPRequest encodes the payload of an ACP ExtEnvelope in a
// RequestFrame.
func MarshalACPRequest(v ACPRequest) ([]byte, error) {
	w := Writer{buf: make([]byte, 0, initialFrameCap)}
	encodeACPRequest(&w, v)
	return w.result()
}

// UnmarshalACPRequest decodes the payload of an ACP ExtEnvelope in a
// RequestFrame.
func UnmarshalACPRequest(b []byte) (ACPRequest, error) {
	var r Reader
	r.Reset(b)
	v := decodeACPRequest(&r)
	if err := r.finish("AcpRequest"); err != nil {
		return nil, err
	}
	return v, nil
}

// MarshalACPResponse encodes the payload of an ACP ExtEnvelope in a
// ResponseFrame.
func MarshalACPResponse(v ACPResponse) ([]byte, error) {
	w := Writer{buf: make([]byte, 0, initialFrameCap)}
	encodeACPResponse(&w, v)
	return w.result()
}

// UnmarshalACPResponse decodes the payload of an ACP ExtEnvelope in a
// ResponseFrame.
func UnmarshalACPResponse(b []byte) (ACPResponse, error) {
	var r Reader
	r.Reset(b)
	v := decodeACPResponse(&r)
	if err := r.finish("AcpResponse"); err != nil {
		return nil, err
	}
	return v, nil
}

// MarshalACPEvent encodes the payload of an ACP ExtEnvelope in an
// EventFrame.
func MarshalACPEvent(v ACPEvent) ([]byte, error) {
	w := Writer{buf: make([]byte, 0, initialFrameCap)}
	encodeACPEvent(&w, v)
	return w.result()
}

// UnmarshalACPEvent decodes the payload of an ACP ExtEnvelope in an
// EventFrame.
func UnmarshalACPEvent(b []byte) (ACPEvent, error) {
	var r Reader
	r.Reset(b)
	v := decodeACPEvent(&r)
	if err := r.finish("AcpEvent"); err != nil {
		return nil, err
	}
	return v, nil
}

// MarshalACPCallback encodes the payload of an ACP ExtEnvelope in a
// SidecarRequestFrame.
func MarshalACPCallback(v ACPCallback) ([]byte, error) {
	w := Writer{buf: make([]byte, 0, initialFrameCap)}
	encodeACPCallback(&w, v)
	return w.result()
}

// UnmarshalACPCallback decodes the payload of an ACP ExtEnvelope in a
// SidecarRequestFrame.
func UnmarshalACPCallback(b []byte) (ACPCallback, error) {
	var r Reader
	r.Reset(b)
	v := decodeACPCallback(&r)
	if err := r.finish("AcpCallback"); err != nil {
		return nil, err
	}
	return v, nil
}

// MarshalACPCallbackResponse encodes the payload of an ACP ExtEnvelope in a
// SidecarResponseFrame.
func MarshalACPCallbackResponse(v ACPCallbackResponse) ([]byte, error) {
	w := Writer{buf: make([]byte, 0, initialFrameCap)}
	encodeACPCallbackResponse(&w, v)
	return w.result()
}

// UnmarshalACPCallbackResponse decodes the payload of an ACP ExtEnvelope in
// a SidecarResponseFrame.
func UnmarshalACPCallbackResponse(b []byte) (ACPCallbackResponse, error) {
	var r Reader
	r.Reset(b)
	v := decodeACPCallbackResponse(&r)
	if err := r.finish("AcpCallbackResponse"); err != nil {
		return nil, err
	}
	return v, nil
}
