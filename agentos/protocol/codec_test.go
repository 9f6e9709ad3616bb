package protocol

import (
	"errors"
	"math"
	"reflect"
	"testing"
)

func TestPrimitives(t *testing.T) {
	var w Writer
	w.U8(0xfe)
	w.I8(-2)
	w.U16(0xbeef)
	w.I16(-3)
	w.U32(0xdeadbeef)
	w.I32(math.MinInt32)
	w.U64(math.MaxUint64)
	w.I64(-5)
	w.Uint(0)
	w.Uint(127)
	w.Uint(128)
	w.Uint(math.MaxUint64)
	w.Bool(true)
	w.Optional(false)
	w.Str("é")
	w.Data([]byte{1, 2})
	if err := w.Err(); err != nil {
		t.Fatal(err)
	}
	r := NewReader(w.Bytes())
	got := []any{r.U8(), r.I8(), r.U16(), r.I16(), r.U32(), r.I32(), r.U64(), r.I64(),
		r.Uint(), r.Uint(), r.Uint(), r.Uint(), r.Bool(), r.Optional(), r.Str(), r.Data()}
	want := []any{uint8(0xfe), int8(-2), uint16(0xbeef), int16(-3), uint32(0xdeadbeef), int32(math.MinInt32),
		uint64(math.MaxUint64), int64(-5), uint64(0), uint64(127), uint64(128), uint64(math.MaxUint64),
		true, false, "é", []byte{1, 2}}
	if err := r.Err(); err != nil || r.Len() != 0 || !reflect.DeepEqual(got, want) {
		t.Fatalf("read back %v (err %v, %d left), want %v", got, err, r.Len(), want)
	}
	// Every read past the end fails without panicking and keeps the first error.
	if r.U8() != 0 || r.I8() != 0 || r.I16() != 0 || r.U64() != 0 || r.Str() != "" || r.Data() != nil || r.ListLen(1) != 0 {
		t.Fatal("reads past the end returned data")
	}
	var de *DecodeError
	if err := r.Err(); !errors.As(err, &de) || !errors.Is(err, ErrTruncated) || de.Offset != len(w.Bytes()) {
		t.Fatalf("Err() = %v", err)
	}
	w.Reset()
	if len(w.Bytes()) != 0 || w.Err() != nil {
		t.Fatal("Reset did not empty the writer")
	}
}

func TestErrorMessages(t *testing.T) {
	_, err := UnmarshalFrame(request(2, 3, 0))
	if got, want := err.Error(), "protocol: decoding GuestRuntimeKind at offset 38: unknown enum value"; got != want {
		t.Errorf("DecodeError = %q, want %q", got, want)
	}
	_, err = MarshalFrame(nil)
	if got, want := err.Error(), "protocol: encoding ProtocolFrame: nil union value"; got != want {
		t.Errorf("EncodeError = %q, want %q", got, want)
	}
	_, err = MarshalFrame(ControlFrame{Schema: Schema, Payload: ShutdownControl{Reason: "\xff"}})
	if got, want := err.Error(), "protocol: encoding ShutdownControl: string is not valid UTF-8"; got != want {
		t.Errorf("EncodeError = %q, want %q", got, want)
	}
	// The failing struct is blamed, not a sibling encoded after it.
	_, err = MarshalFrame(RequestFrame{Schema: ProtocolSchema{Name: "\xff"}, Ownership: VMOwnership{}, Payload: CreateLayerRequest{}})
	if got, want := err.Error(), "protocol: encoding ProtocolSchema: string is not valid UTF-8"; got != want {
		t.Errorf("EncodeError = %q, want %q", got, want)
	}
	err = &FrameTooLargeError{Size: 20, Max: 10}
	if got, want := err.Error(), "protocol: frame of 20 bytes exceeds the limit of 10"; got != want {
		t.Errorf("FrameTooLargeError = %q, want %q", got, want)
	}
}

func TestACPRootsRoundTrip(t *testing.T) {
	g := newValueGen(3)
	for _, root := range acpRoots {
		var c typeCodec
		for _, tc := range schemaTypes() {
			if tc.name == root.name {
				c = tc
			}
		}
		for i := range 2 * len(c.members) {
			p := reflect.ValueOf(c.zero())
			g.fill(p.Elem(), i)
			v := p.Elem().Interface()
			b, err := root.marshal(v)
			if err != nil {
				t.Fatalf("%s: %v", root.name, err)
			}
			got, err := root.unmarshal(b)
			if err != nil || !reflect.DeepEqual(got, v) {
				t.Fatalf("%s: got %#v, %v; want %#v", root.name, got, err, v)
			}
			if _, err := root.unmarshal(append(b, 0)); !errors.Is(err, ErrTrailingBytes) {
				t.Fatalf("%s: trailing byte: %v", root.name, err)
			}
			if _, err := root.unmarshal(b[:len(b)-1]); !errors.Is(err, ErrTruncated) {
				t.Fatalf("%s: truncated: %v", root.name, err)
			}
		}
	}
}
