package protocol

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"strconv"
)

// ErrFrameTooLarge is matched (errors.Is) by every *FrameTooLargeError.
var ErrFrameTooLarge = errors.New("protocol: frame too large")

// FrameTooLargeError reports a frame whose length prefix exceeds the limit.
type FrameTooLargeError struct {
	Size uint32 // declared payload length
	Max  uint32 // configured limit
}

func (e *FrameTooLargeError) Error() string {
	return "protocol: frame of " + strconv.FormatUint(uint64(e.Size), 10) +
		" bytes exceeds the limit of " + strconv.FormatUint(uint64(e.Max), 10)
}

// Is makes errors.Is(err, ErrFrameTooLarge) true.
func (e *FrameTooLargeError) Is(target error) bool { return target == ErrFrameTooLarge }

// frameHeaderLen is the size of the big-endian u32 length prefix.
const frameHeaderLen = 4

// FrameReader splits a byte stream into length-prefixed frames (SPEC §3).
// The length is checked against the limit before any of the body is read or
// buffer space is allocated for it, so a hostile peer cannot make the reader
// allocate more than the limit.
type FrameReader struct {
	br  *bufio.Reader
	max uint32
	hdr [frameHeaderLen]byte // a field, so reading into it does not allocate
	buf []byte
	err error
}

// NewFrameReader returns a FrameReader that rejects frames longer than
// maxFrameBytes; a value ≤ 0 means DefaultMaxFrameBytes.
func NewFrameReader(r io.Reader, maxFrameBytes int) *FrameReader {
	if maxFrameBytes <= 0 {
		maxFrameBytes = DefaultMaxFrameBytes
	}
	limit := uint32(math.MaxUint32)
	if uint64(maxFrameBytes) < math.MaxUint32 {
		limit = uint32(maxFrameBytes)
	}
	return &FrameReader{br: bufio.NewReaderSize(r, 32<<10), max: limit}
}

// Next returns the payload of the next frame (without the length prefix).
// The slice is only valid until the following call, which reuses it.
//
// Next returns io.EOF only when the stream ends on a frame boundary and
// io.ErrUnexpectedEOF when it ends inside a frame. Errors are sticky: the
// stream position is unknown afterwards, so every later call returns the
// same error.
func (fr *FrameReader) Next() ([]byte, error) {
	if fr.err != nil {
		return nil, fr.err
	}
	if _, err := io.ReadFull(fr.br, fr.hdr[:]); err != nil {
		fr.err = err
		return nil, err
	}
	n := binary.BigEndian.Uint32(fr.hdr[:])
	if n > fr.max {
		fr.err = &FrameTooLargeError{Size: n, Max: fr.max}
		return nil, fr.err
	}
	if uint64(cap(fr.buf)) < uint64(n) {
		// Grow geometrically so a stream of slowly growing frames does not
		// reallocate every time, but never beyond the limit.
		c := max(uint64(n), min(2*uint64(cap(fr.buf)), uint64(fr.max)), 4<<10)
		fr.buf = make([]byte, c)
	}
	payload := fr.buf[:n]
	if _, err := io.ReadFull(fr.br, payload); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		fr.err = err
		return nil, err
	}
	return payload, nil
}

// WriteFrame writes the length prefix and payload with a single Write call,
// so concurrent writers serialised by a mutex never interleave partial
// frames. It copies payload; to avoid the copy, build the frame with
// AppendFrame and write its result directly.
func WriteFrame(w io.Writer, payload []byte) error {
	if uint64(len(payload)) > math.MaxUint32 {
		return &FrameTooLargeError{Size: math.MaxUint32, Max: math.MaxUint32}
	}
	buf := make([]byte, frameHeaderLen, frameHeaderLen+len(payload))
	binary.BigEndian.PutUint32(buf, uint32(len(payload)))
	_, err := w.Write(append(buf, payload...))
	return err
}
