package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"runtime"
	"testing"
	"testing/iotest"
)

// cat concatenates byte strings and single bytes into a test payload.
func cat(parts ...any) []byte {
	var b []byte
	for _, p := range parts {
		switch p := p.(type) {
		case int:
			b = append(b, byte(p))
		case string:
			b = append(b, p...)
		case []byte:
			b = append(b, p...)
		default:
			panic("cat: unsupported part")
		}
	}
	return b
}

// frameHeadLen is the length of frameHead: tag, str length, name, u16.
// (SPEC §5 says 27 bytes; it is 1+1+22+2 = 26.)
const frameHeadLen = 26

// frameHead is the ProtocolFrame tag plus the ProtocolSchema every frame
// starts with.
func frameHead(tag int) []byte {
	return cat(tag, len(SchemaName), SchemaName, 8, 0)
}

// request builds a RequestFrame (id 1, ConnectionOwnership "c") around a
// raw RequestPayload encoding.
func request(payload ...any) []byte {
	return cat(frameHead(0), "\x01\x00\x00\x00\x00\x00\x00\x00", 0, 1, "c", cat(payload...))
}

// control builds a ControlFrame around a ShutdownControl whose reason is
// the given raw str encoding.
func control(reason ...any) []byte {
	return cat(frameHead(5), 0, cat(reason...))
}

func uvarint(x uint64) []byte { return binary.AppendUvarint(nil, x) }

func TestHostileInputs(t *testing.T) {
	golden := goldenPayloads(t)
	manyDupes := []any{1, 0, 0, 10}
	for i := range 9 {
		manyDupes = append(manyDupes, 1, string(rune('a'+i)), 0)
	}
	manyDupes = append(manyDupes, 1, "e", 0) // duplicate found via the hash set

	type decodeFunc func([]byte) error
	frame := func(b []byte) error { _, err := UnmarshalFrame(b); return err }
	acpReq := func(b []byte) error { _, err := UnmarshalACPRequest(b); return err }
	acpResp := func(b []byte) error { _, err := UnmarshalACPResponse(b); return err }

	for _, tc := range []struct {
		name    string
		in      []byte
		decode  decodeFunc
		want    error
		errType string // expected DecodeError.Type, if set
		errOff  int    // expected DecodeError.Offset, if errType is set
	}{
		{"empty payload", nil, frame, ErrTruncated, "ProtocolFrame", 0},
		{"empty ACP payload", nil, acpReq, ErrTruncated, "AcpRequest", 0},
		{"unknown frame tag", frameHead(6), frame, ErrUnknownTag, "ProtocolFrame", 0},
		{"unknown frame tag 128", cat(0x80, 0x01), frame, ErrUnknownTag, "ProtocolFrame", 0},
		{"unknown ownership tag", cat(frameHead(0), "12345678", 3), frame, ErrUnknownTag, "OwnershipScope", 34},
		{"unknown request payload tag", request(65), frame, ErrUnknownTag, "RequestPayload", 37},
		{"unknown ACP tag", cat(20), acpReq, ErrUnknownTag, "AcpRequest", 0},
		{"unknown enum value", request(2, 3, 0), frame, ErrUnknownEnum, "GuestRuntimeKind", 38},
		{"unknown enum value 2^32", request(2, uvarint(1<<32), 0), frame, ErrUnknownEnum, "GuestRuntimeKind", 38},
		{"invalid UTF-8", control(2, 0xff, 0xfe), frame, ErrInvalidUTF8, "ShutdownControl", 28},
		{"UTF-16 surrogate", control(3, 0xed, 0xa0, 0x80), frame, ErrInvalidUTF8, "", 0},
		{"invalid UTF-8 in schema name", cat(5, 1, 0xc0, 8, 0), frame, ErrInvalidUTF8, "ProtocolSchema", 2},
		{"list count past the end", request(4, 5), frame, ErrTruncated, "BootstrapRootFilesystemRequest", 38},
		{"list count 2^35", request(4, uvarint(1<<35)), frame, ErrTruncated, "", 0},
		{"list count fits bytes, not elements", request(4, 3, "abcdefghijklmnopqr"), frame, ErrTruncated, "", 0},
		{"string length 2^62", control(uvarint(1 << 62)), frame, ErrTruncated, "ShutdownControl", 27},
		{"data length 2^63", request(15, 1, "p", uvarint(1<<63)), frame, ErrTruncated, "", 0},
		{"non-canonical varint 0x80 0x00", control(0x80, 0x00), frame, ErrNonCanonical, "", 0},
		{"non-canonical varint 0x81 0x00", control(0x81, 0x00, "x"), frame, ErrNonCanonical, "", 0},
		{"non-canonical tag", cat(0x80, 0x00), frame, ErrNonCanonical, "", 0},
		{"varint overflow (10th byte > 1)", control(bytes.Repeat([]byte{0xff}, 9), 0x02), frame, ErrOverflow, "", 0},
		{"varint longer than 10 bytes", control(bytes.Repeat([]byte{0x80}, 10), 0x01), frame, ErrOverflow, "", 0},
		{"truncated varint", control(0x80), frame, ErrTruncated, "ShutdownControl", 27},
		{"truncated union tag", cat(frameHead(0), "12345678"), frame, ErrTruncated, "OwnershipScope", 34},
		{"bool 0x02", cat(19, 2), acpReq, ErrInvalidBool, "AcpListAgentsRequest", 1},
		{"bool 0xff", cat(0, 0xff), acpResp, ErrInvalidBool, "", 0},
		{"optional presence 0x02", request(1, 0, 2), frame, ErrInvalidOptional, "SidecarPlacementShared", 39},
		{"trailing byte", cat(golden[0], 0), frame, ErrTrailingBytes, "ProtocolFrame", len(golden[0])},
		{"trailing byte after ACP", cat(19, 0, 0), acpReq, ErrTrailingBytes, "AcpRequest", 2},
		{"duplicate map key", request(1, 0, 0, 3, 1, "a", 1, "b", 1, "c", 1, "d", 1, "a", 1, "e"), frame, ErrDuplicateKey, "OpenSessionRequest", 0},
		{"duplicate key in large map", request(manyDupes...), frame, ErrDuplicateKey, "", 0},
		{"truncated fixed int", cat(frameHead(0), "1234"), frame, ErrTruncated, "RequestFrame", 26},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.decode(tc.in)
			if !errors.Is(err, tc.want) {
				t.Fatalf("error = %v, want %v", err, tc.want)
			}
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error %T is not a *DecodeError", err)
			}
			if de.Type == "" {
				t.Errorf("error %v names no schema type", err)
			}
			if tc.errType != "" && (de.Type != tc.errType || tc.errOff != 0 && de.Offset != tc.errOff) {
				t.Errorf("error at %s offset %d, want %s offset %d (%v)", de.Type, de.Offset, tc.errType, tc.errOff, err)
			}
		})
	}

	t.Run("every prefix of golden frames", func(t *testing.T) {
		checked := 0
		for _, p := range golden {
			if len(p) > 4096 || checked > 60 && len(p) < 400 {
				continue // keep it quick: all large-ish frames plus a sample of small ones
			}
			checked++
			for n := range len(p) {
				if _, err := UnmarshalFrame(p[:n]); !errors.Is(err, ErrTruncated) {
					t.Fatalf("prefix %d/%d of %x: error = %v, want ErrTruncated", n, len(p), p, err)
				}
			}
		}
		t.Logf("all prefixes of %d frames rejected", checked)
	})
}

// headerOnlyReader serves hdr in its first Read and fails the test if asked
// for more: a FrameReader must reject an oversized frame from its header.
type headerOnlyReader struct {
	t     *testing.T
	hdr   []byte
	reads int
}

func (r *headerOnlyReader) Read(p []byte) (int, error) {
	r.reads++
	if r.reads > 1 {
		r.t.Fatalf("FrameReader read past the header of an oversized frame")
	}
	return copy(p, r.hdr), nil
}

// zeros is an endless stream of zero bytes after a header.
type zeros struct {
	hdr    []byte
	served int
}

func (z *zeros) Read(p []byte) (int, error) {
	n := copy(p, z.hdr)
	z.hdr = z.hdr[n:]
	clear(p[n:])
	z.served += len(p)
	return len(p), nil
}

func TestFrameReader(t *testing.T) {
	t.Run("4 GiB frame rejected from the header", func(t *testing.T) {
		r := &headerOnlyReader{t: t, hdr: []byte{0xff, 0xff, 0xff, 0xff}}
		fr := NewFrameReader(r, 0)
		_, err := fr.Next()
		var tl *FrameTooLargeError
		if !errors.As(err, &tl) || !errors.Is(err, ErrFrameTooLarge) || tl.Size != 0xffffffff || tl.Max != DefaultMaxFrameBytes {
			t.Fatalf("Next error = %v, want FrameTooLargeError{4294967295, %d}", err, DefaultMaxFrameBytes)
		}
		if _, err2 := fr.Next(); err2 != err {
			t.Fatalf("error is not sticky: %v", err2)
		}
	})
	t.Run("oversized frame allocates nothing for the body", func(t *testing.T) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range 10 {
			z := &zeros{hdr: []byte{0x7f, 0xff, 0xff, 0xff}}
			if _, err := NewFrameReader(z, 1<<20).Next(); !errors.Is(err, ErrFrameTooLarge) {
				t.Fatal(err)
			}
		}
		runtime.ReadMemStats(&after)
		if perCall := (after.TotalAlloc - before.TotalAlloc) / 10; perCall > 256<<10 {
			t.Fatalf("rejecting a 2 GiB frame allocated %d bytes", perCall)
		}
	})
	t.Run("frames split across reads", func(t *testing.T) {
		var stream []byte
		var want [][]byte
		for i, p := range goldenPayloads(t) {
			if i%7 != 0 {
				continue
			}
			stream = binary.BigEndian.AppendUint32(stream, uint32(len(p)))
			stream = append(stream, p...)
			want = append(want, p)
		}
		stream = append(stream, 0, 0, 0, 0) // an empty frame is returned as such
		want = append(want, []byte{})
		fr := NewFrameReader(iotest.OneByteReader(bytes.NewReader(stream)), 0)
		for i, w := range want {
			got, err := fr.Next()
			if err != nil || !bytes.Equal(got, w) {
				t.Fatalf("frame %d: got %d bytes, %v; want %d bytes", i, len(got), err, len(w))
			}
		}
		if _, err := fr.Next(); err != io.EOF {
			t.Fatalf("at end: %v, want io.EOF", err)
		}
	})
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{"empty stream", nil, io.EOF},
		{"partial header", []byte{0, 0}, io.ErrUnexpectedEOF},
		{"truncated body", []byte{0, 0, 0, 16, 1, 2, 3, 4, 5}, io.ErrUnexpectedEOF},
		{"header without body", []byte{0, 0, 0, 16}, io.ErrUnexpectedEOF},
		{"over a small limit", []byte{0, 0, 0, 65}, ErrFrameTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fr := NewFrameReader(bytes.NewReader(tc.in), 64)
			if _, err := fr.Next(); !errors.Is(err, tc.want) {
				t.Fatalf("Next error = %v, want %v", err, tc.want)
			}
		})
	}
	t.Run("empty payload fails to decode", func(t *testing.T) {
		p, err := NewFrameReader(bytes.NewReader([]byte{0, 0, 0, 0}), 0).Next()
		if err != nil || len(p) != 0 {
			t.Fatalf("Next = %x, %v", p, err)
		}
		if _, err := UnmarshalFrame(p); !errors.Is(err, ErrTruncated) {
			t.Fatalf("UnmarshalFrame(empty) = %v", err)
		}
	})
}

func TestWriteFrame(t *testing.T) {
	var buf bytes.Buffer
	w := &countingWriter{w: &buf}
	if err := WriteFrame(w, []byte("abc")); err != nil {
		t.Fatal(err)
	}
	if got := buf.String(); got != "\x00\x00\x00\x03abc" || w.writes != 1 {
		t.Fatalf("WriteFrame wrote %q in %d writes", got, w.writes)
	}
}

type countingWriter struct {
	w      io.Writer
	writes int
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.writes++
	return c.w.Write(p)
}

// TestAllocationBound decodes small hostile payloads that declare huge
// lists and strings, and random corruptions of golden frames, and checks
// that no 64-byte input makes the decoder allocate more than 64 KiB.
func TestAllocationBound(t *testing.T) {
	const inputSize, limit = 64, 64 << 10
	pad := func(b []byte) []byte {
		if len(b) > inputSize {
			return b[:inputSize]
		}
		return append(b, make([]byte, inputSize-len(b))...)
	}
	inputs := [][]byte{
		pad(request(4, uvarint(1<<40))),                              // list of RootFilesystemEntry
		pad(request(4, 20)),                                          // 20 entries that fit in the bytes but not as entries
		pad(request(5, 0, 0, 0, 0, 0, 0, uvarint(1<<40))),            // list<u16>
		pad(request(14, 1, "p", 0, 0, 0, 24)),                        // list<str> of 24 empty strings: legitimately decodable
		pad(control(uvarint(1 << 62))),                               // str length
		pad(request(15, 1, "p", uvarint(1<<62))),                     // data length
		pad(request(1, 0, 0, uvarint(1<<40))),                        // map count
		pad(cat(19, uvarint(1<<40))),                                 // ACP as frame: garbage tag path
		pad(request(6, 0, 0, 0, 0, 18, bytes.Repeat([]byte{0}, 40))), // map<str><RegisteredHostCallbackDefinition>
	}
	rng := rand.New(rand.NewPCG(7, 7))
	for _, p := range goldenPayloads(t) {
		if len(p) < inputSize || rng.IntN(4) != 0 {
			continue
		}
		in := bytes.Clone(p[:inputSize])
		for range 3 {
			in[frameHeadLen+rng.IntN(inputSize-frameHeadLen)] = byte(rng.Uint32())
		}
		inputs = append(inputs, in)
	}
	worst := uint64(0)
	for _, in := range inputs {
		const runs = 20
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range runs {
			_, _ = UnmarshalFrame(in)
			_, _ = UnmarshalACPRequest(in[frameHeadLen:])
		}
		runtime.ReadMemStats(&after)
		per := (after.TotalAlloc - before.TotalAlloc) / runs
		worst = max(worst, per)
		if per > limit {
			t.Errorf("decoding %x allocated %d bytes", in, per)
		}
	}
	t.Logf("%d hostile %d-byte inputs; worst allocation %d bytes per decode", len(inputs), inputSize, worst)
}
