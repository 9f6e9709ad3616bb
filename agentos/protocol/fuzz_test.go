package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"testing"
)

// maxSeedLen keeps huge golden frames (the 199 KB snapshot) out of the
// corpus: they slow every fuzz iteration and add no structure that smaller
// frames lack.
const maxSeedLen = 16 << 10

// checkCanonical asserts the property strict decoding guarantees: an
// accepted payload re-encodes to exactly the same bytes, and the
// re-encoding decodes to an equal value.
func checkCanonical[T any](t *testing.T, in []byte, v T, marshal func(T) ([]byte, error), unmarshal func([]byte) (T, error)) {
	t.Helper()
	out, err := marshal(v)
	if err != nil {
		t.Fatalf("decoded value does not re-encode: %v", err)
	}
	if !bytes.Equal(out, in) {
		t.Fatalf("re-encoding differs\n  in %x\n out %x", in, out)
	}
	v2, err := unmarshal(out)
	if err != nil {
		t.Fatalf("re-encoding does not decode: %v", err)
	}
	if !reflect.DeepEqual(v, v2) {
		t.Fatalf("decode(encode(v)) != v\n%#v\n%#v", v, v2)
	}
}

func mustBeDecodeError(t *testing.T, err error) {
	t.Helper()
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("error %v (%T) is not a *DecodeError", err, err)
	}
	if de.Type == "" {
		t.Fatalf("error %v names no schema type", err)
	}
}

func FuzzUnmarshalFrame(f *testing.F) {
	for _, p := range goldenPayloads(f) {
		if len(p) <= maxSeedLen {
			f.Add(p)
		}
	}
	f.Add([]byte{})
	f.Add(control(0x81, 0x00, "x"))
	f.Add(request(1, 0, 0, 2, 1, "a", 1, "b", 1, "a", 1, "c"))
	f.Fuzz(func(t *testing.T, in []byte) {
		v, err := UnmarshalFrame(in)
		if err != nil {
			mustBeDecodeError(t, err)
			return
		}
		checkCanonical(t, in, v, MarshalFrame, UnmarshalFrame)
	})
}

func FuzzACP(f *testing.F) {
	for _, p := range goldenPayloads(f) {
		fr, err := UnmarshalFrame(p)
		if err != nil {
			f.Fatal(err)
		}
		if payload, root, ok := acpEnvelope(fr); ok {
			for i := range acpRoots {
				if &acpRoots[i] == root {
					f.Add(uint8(i), payload)
				}
			}
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, in []byte) {
		root := acpRoots[int(which)%len(acpRoots)]
		v, err := root.unmarshal(in)
		if err != nil {
			mustBeDecodeError(t, err)
			return
		}
		checkCanonical(t, in, v, root.marshal, root.unmarshal)
	})
}

func FuzzFrameReader(f *testing.F) {
	const limit = 64
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 3, 'a', 'b', 'c', 0, 0, 0, 0})
	f.Add([]byte{0, 0, 0, 65})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1})
	f.Add([]byte{0, 0, 0, 8, 1, 2})
	f.Fuzz(func(t *testing.T, in []byte) {
		fr := NewFrameReader(bytes.NewReader(in), limit)
		var rebuilt []byte
		for {
			p, err := fr.Next()
			if err != nil {
				switch {
				case err == io.EOF:
					if !bytes.Equal(rebuilt, in) {
						t.Fatalf("frames do not reassemble the stream:\n  in %x\n out %x", in, rebuilt)
					}
				case err == io.ErrUnexpectedEOF, errors.Is(err, ErrFrameTooLarge):
					if !bytes.HasPrefix(in, rebuilt) {
						t.Fatalf("frames read before %v are not a prefix of the stream", err)
					}
				default:
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if len(p) > limit {
				t.Fatalf("frame of %d bytes exceeds the limit %d", len(p), limit)
			}
			rebuilt = binary.BigEndian.AppendUint32(rebuilt, uint32(len(p)))
			rebuilt = append(rebuilt, p...)
		}
	})
}
