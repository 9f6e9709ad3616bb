package protocol

import (
	"encoding/binary"
	"errors"
	"strconv"
	"unicode/utf8"
)

// Sentinel errors. Decoding errors are reported as *DecodeError and encoding
// errors as *EncodeError; both unwrap to one of these, so callers test them
// with errors.Is.
var (
	ErrTruncated       = errors.New("input ends before the value does")
	ErrNonCanonical    = errors.New("non-canonical varint")
	ErrOverflow        = errors.New("varint overflows 64 bits")
	ErrInvalidUTF8     = errors.New("string is not valid UTF-8")
	ErrInvalidBool     = errors.New("bool byte is neither 0 nor 1")
	ErrInvalidOptional = errors.New("optional presence byte is neither 0 nor 1")
	ErrUnknownTag      = errors.New("unknown union tag")
	ErrUnknownEnum     = errors.New("unknown enum value")
	ErrDuplicateKey    = errors.New("duplicate map key")
	ErrTrailingBytes   = errors.New("trailing bytes after the value")

	ErrNilUnion      = errors.New("nil union value")
	ErrInvalidMember = errors.New("value is not a member of the union (members are values, not pointers)")
)

// DecodeError describes why a payload could not be decoded.
type DecodeError struct {
	Type   string // innermost struct, union or enum being decoded, e.g. "VmOwnership"
	Offset int    // byte offset in the payload where the problem was detected
	Err    error  // one of the Err* sentinels
}

func (e *DecodeError) Error() string {
	return "protocol: decoding " + e.Type + " at offset " + strconv.Itoa(e.Offset) + ": " + e.Err.Error()
}

func (e *DecodeError) Unwrap() error { return e.Err }

// EncodeError describes why a value could not be encoded.
type EncodeError struct {
	Type string // schema type whose value was invalid
	Err  error  // one of the Err* sentinels
}

func (e *EncodeError) Error() string {
	return "protocol: encoding " + e.Type + ": " + e.Err.Error()
}

func (e *EncodeError) Unwrap() error { return e.Err }

// Writer appends BARE encodings to a byte slice. The zero value is ready to
// use. The first encoding error is kept (see Err) and later ones are
// ignored, so generated encoders need no error plumbing.
type Writer struct {
	buf []byte
	err *EncodeError
}

// Reset empties w for reuse, keeping its buffer.
func (w *Writer) Reset() {
	w.buf = w.buf[:0]
	w.err = nil
}

// Bytes returns the encoded bytes. They alias w's buffer until Reset.
func (w *Writer) Bytes() []byte { return w.buf }

// Err returns the first encoding error, or nil.
func (w *Writer) Err() error {
	if w.err == nil {
		return nil
	}
	return w.err
}

// fail records err for schema type typ ("" if the caller does not know it)
// unless an error is already pending.
func (w *Writer) fail(typ string, err error) {
	if w.err == nil {
		w.err = &EncodeError{Type: typ, Err: err}
	}
}

// annotate attributes a pending error to typ unless an inner type already
// claimed it. Generated struct encoders call it on the way out.
func (w *Writer) annotate(typ string) {
	if w.err != nil && w.err.Type == "" {
		w.err.Type = typ
	}
}

// Uint appends x as a LEB128 varint (BARE uint).
func (w *Writer) Uint(x uint64) {
	if x < 0x80 {
		w.buf = append(w.buf, byte(x))
		return
	}
	w.buf = binary.AppendUvarint(w.buf, x)
}

// U8 appends a u8.
func (w *Writer) U8(x uint8) { w.buf = append(w.buf, x) }

// U16 appends a little-endian u16.
func (w *Writer) U16(x uint16) { w.buf = binary.LittleEndian.AppendUint16(w.buf, x) }

// U32 appends a little-endian u32.
func (w *Writer) U32(x uint32) { w.buf = binary.LittleEndian.AppendUint32(w.buf, x) }

// U64 appends a little-endian u64.
func (w *Writer) U64(x uint64) { w.buf = binary.LittleEndian.AppendUint64(w.buf, x) }

// I8 appends an i8.
func (w *Writer) I8(x int8) { w.U8(uint8(x)) }

// I16 appends a little-endian i16.
func (w *Writer) I16(x int16) { w.U16(uint16(x)) }

// I32 appends a little-endian i32.
func (w *Writer) I32(x int32) { w.U32(uint32(x)) }

// I64 appends a little-endian i64.
func (w *Writer) I64(x int64) { w.U64(uint64(x)) }

// Bool appends 0x01 for true and 0x00 for false.
func (w *Writer) Bool(x bool) {
	var b byte
	if x {
		b = 1
	}
	w.buf = append(w.buf, b)
}

// Optional appends the presence byte of an optional value.
func (w *Writer) Optional(present bool) { w.Bool(present) }

// Str appends a length-prefixed string. Invalid UTF-8 is an encoding error
// because every conforming decoder, this one included, rejects it.
func (w *Writer) Str(s string) {
	if !utf8.ValidString(s) {
		w.fail("", ErrInvalidUTF8)
	}
	w.Uint(uint64(len(s)))
	w.buf = append(w.buf, s...)
}

// Data appends length-prefixed bytes.
func (w *Writer) Data(b []byte) {
	w.Uint(uint64(len(b)))
	w.buf = append(w.buf, b...)
}

// Reader decodes BARE values from a byte slice. Every read is bounds-checked
// against the input; the first error is kept (see Err) and turns all later
// reads into cheap no-ops that return zero values, so generated decoders
// need no error plumbing and stop allocating once the input is known to be
// bad.
//
// Decoded strings and byte slices never alias the input.
type Reader struct {
	buf []byte
	off int
	err *DecodeError
	// str, when set, is an immutable copy of buf from which strings are
	// sliced, so a small payload costs one string allocation instead of
	// one per field. See sharedStringMax.
	str string
}

// sharedStringMax is the largest input whose strings share one copy. The
// limit bounds what a retained string can keep alive: a long-lived 6-byte
// id from a 16 MiB frame must not pin the whole frame.
const sharedStringMax = 1 << 10

// NewReader returns a Reader over b.
func NewReader(b []byte) *Reader {
	r := new(Reader)
	r.Reset(b)
	return r
}

// Reset makes r read b from the start.
func (r *Reader) Reset(b []byte) {
	*r = Reader{buf: b}
	if len(b) <= sharedStringMax {
		r.str = string(b)
	}
}

// Offset returns the number of bytes consumed so far.
func (r *Reader) Offset() int { return r.off }

// Len returns the number of unread bytes.
func (r *Reader) Len() int { return len(r.buf) - r.off }

// Err returns the first decoding error, or nil.
func (r *Reader) Err() error {
	if r.err == nil {
		return nil
	}
	return r.err
}

// fail records err at the current offset and skips to the end of the
// input, so that every further read fails without looking at the bytes.
func (r *Reader) fail(err error) { r.invalid(r.off, "", err) }

// invalid records err at offset off, attributed to schema type typ.
func (r *Reader) invalid(off int, typ string, err error) {
	if r.err == nil {
		r.err = &DecodeError{Type: typ, Offset: off, Err: err}
		r.off = len(r.buf)
	}
}

// annotate attributes a pending error to typ unless an inner type already
// claimed it. Generated decoders call it on the way out; because they
// return at once when entered with an error pending, only decoders that
// were active when the error happened get here.
func (r *Reader) annotate(typ string) {
	if r.err != nil && r.err.Type == "" {
		r.err.Type = typ
	}
}

// finish completes decoding of a root value of schema type typ: the value
// must consume the input exactly.
func (r *Reader) finish(typ string) error {
	if r.err != nil {
		return r.err
	}
	if r.off != len(r.buf) {
		return &DecodeError{Type: typ, Offset: r.off, Err: ErrTrailingBytes}
	}
	return nil
}

// Uint reads a LEB128 varint (BARE uint). It must be canonical (no final
// zero group) and fit in 64 bits.
func (r *Reader) Uint() uint64 {
	if off := r.off; off < len(r.buf) {
		if b := r.buf[off]; b < 0x80 {
			r.off = off + 1
			return uint64(b)
		}
	}
	return r.uintSlow()
}

func (r *Reader) uintSlow() uint64 {
	var x uint64
	for i := 0; ; i++ {
		if r.off+i >= len(r.buf) {
			r.fail(ErrTruncated)
			return 0
		}
		b := r.buf[r.off+i]
		if i == 9 && b > 1 {
			// The tenth group may only supply bit 63 and must be the last.
			r.fail(ErrOverflow)
			return 0
		}
		x |= uint64(b&0x7f) << (7 * i)
		if b < 0x80 {
			if b == 0 && i > 0 {
				r.fail(ErrNonCanonical)
				return 0
			}
			r.off += i + 1
			return x
		}
	}
}

// take returns the next n bytes, or nil after recording ErrTruncated.
func (r *Reader) take(n int) []byte {
	if len(r.buf)-r.off < n {
		r.fail(ErrTruncated)
		return nil
	}
	b := r.buf[r.off : r.off+n]
	r.off += n
	return b
}

// U8 reads a u8.
func (r *Reader) U8() uint8 {
	if r.off >= len(r.buf) {
		r.fail(ErrTruncated)
		return 0
	}
	r.off++
	return r.buf[r.off-1]
}

// U16 reads a little-endian u16.
func (r *Reader) U16() uint16 {
	if b := r.take(2); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}

// U32 reads a little-endian u32.
func (r *Reader) U32() uint32 {
	if b := r.take(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

// U64 reads a little-endian u64.
func (r *Reader) U64() uint64 {
	if b := r.take(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

// I8 reads an i8.
func (r *Reader) I8() int8 { return int8(r.U8()) }

// I16 reads a little-endian i16.
func (r *Reader) I16() int16 {
	if b := r.take(2); b != nil {
		return int16(binary.LittleEndian.Uint16(b))
	}
	return 0
}

// I32 reads a little-endian i32.
func (r *Reader) I32() int32 {
	if b := r.take(4); b != nil {
		return int32(binary.LittleEndian.Uint32(b))
	}
	return 0
}

// I64 reads a little-endian i64.
func (r *Reader) I64() int64 {
	if b := r.take(8); b != nil {
		return int64(binary.LittleEndian.Uint64(b))
	}
	return 0
}

// flag reads a byte that must be 0 or 1, failing with err otherwise.
func (r *Reader) flag(err error) bool {
	if off := r.off; off < len(r.buf) {
		if b := r.buf[off]; b <= 1 {
			r.off = off + 1
			return b == 1
		}
		r.fail(err)
		return false
	}
	r.fail(ErrTruncated)
	return false
}

// Bool reads a bool byte.
func (r *Reader) Bool() bool { return r.flag(ErrInvalidBool) }

// Optional reads the presence byte of an optional value.
func (r *Reader) Optional() bool { return r.flag(ErrInvalidOptional) }

// length reads a str/data length and checks it against the remaining input.
func (r *Reader) length() int {
	off := r.off
	n := r.Uint()
	if n > uint64(len(r.buf)-r.off) {
		r.invalid(off, "", ErrTruncated)
		return 0
	}
	return int(n)
}

// Str reads a length-prefixed UTF-8 string.
func (r *Reader) Str() string {
	n := r.length()
	if n == 0 {
		return ""
	}
	b := r.buf[r.off : r.off+n]
	if !utf8.Valid(b) {
		r.fail(ErrInvalidUTF8)
		return ""
	}
	if r.str != "" {
		s := r.str[r.off : r.off+n]
		r.off += n
		return s
	}
	r.off += n
	return string(b)
}

// Data reads length-prefixed bytes into a new slice; an empty value is nil.
func (r *Reader) Data() []byte {
	n := r.length()
	if n == 0 {
		return nil
	}
	b := make([]byte, n)
	r.off += copy(b, r.buf[r.off:])
	return b
}

// ListLen reads a list or map count whose elements each encode to at least
// minSize bytes (≥ 1). A count that cannot fit in the remaining input is
// reported as ErrTruncated before the caller allocates anything, which
// bounds allocation by the input size.
func (r *Reader) ListLen(minSize int) int {
	off := r.off
	n := r.Uint()
	if n > uint64((len(r.buf)-r.off)/max(minSize, 1)) {
		r.invalid(off, "", ErrTruncated)
		return 0
	}
	return int(n)
}

// typeCodec describes one named schema type. The generated schemaTypes
// table lists every type so tests can exercise all of them generically.
type typeCodec struct {
	name    string             // schema name
	zero    func() any         // returns a pointer to a new zero value
	encode  func(*Writer, any) // encodes the pointed-to value
	decode  func(*Reader) any  // decodes into a new value and returns its pointer
	members []any              // unions: a zero value of every member, in schema order
	values  []any              // enums: every value, in schema order
}

// structCodec is the typeCodec of a generated struct type T.
func structCodec[T any, P interface {
	*T
	encode(*Writer)
	decode(*Reader)
}](name string) typeCodec {
	return typeCodec{
		name:   name,
		zero:   func() any { return new(T) },
		encode: func(w *Writer, v any) { P(v.(*T)).encode(w) },
		decode: func(r *Reader) any {
			p := P(new(T))
			p.decode(r)
			return p
		},
	}
}

// funcCodec is the typeCodec of a type T encoded by functions: enums,
// unions and aliases of primitives.
func funcCodec[T any](name string, enc func(*Writer, T), dec func(*Reader) T) typeCodec {
	return typeCodec{
		name:   name,
		zero:   func() any { return new(T) },
		encode: func(w *Writer, v any) { enc(w, *v.(*T)) },
		decode: func(r *Reader) any {
			v := dec(r)
			return &v
		},
	}
}

// voidCodec is the typeCodec of a void type, which encodes to nothing.
func voidCodec[T any](name string) typeCodec {
	return typeCodec{
		name:   name,
		zero:   func() any { return new(T) },
		encode: func(*Writer, any) {},
		decode: func(*Reader) any { return new(T) },
	}
}

// withMembers records the members of a union codec.
func (c typeCodec) withMembers(members ...any) typeCodec {
	c.members = members
	return c
}

// withValues records the values of an enum codec.
func (c typeCodec) withValues(values ...any) typeCodec {
	c.values = values
	return c
}
