package protocol

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/agentos-gateway/agentos-gateway/agentos/protocol/internal/baregen/gen"
)

// valueGen fills Go values of schema types with pseudo-random contents.
type valueGen struct {
	rng    *rand.Rand
	unions map[reflect.Type][]any // union interface type → member zero values
	enums  map[reflect.Type][]any // enum type → its values
}

func newValueGen(seed uint64) *valueGen {
	g := &valueGen{
		rng:    rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		unions: map[reflect.Type][]any{},
		enums:  map[reflect.Type][]any{},
	}
	for _, c := range schemaTypes() {
		t := reflect.TypeOf(c.zero()).Elem()
		if c.members != nil {
			g.unions[t] = c.members
		}
		if c.values != nil {
			g.enums[t] = c.values
		}
	}
	return g
}

// runes mixes ASCII, multi-byte UTF-8 and NUL so strings exercise the
// length prefix and UTF-8 validation.
var runes = []rune("abcXYZ019 _-/.:\"\\\x00\n\té中🙂\u2028\U0010FFFF")

func (g *valueGen) uint() uint64 {
	switch g.rng.IntN(4) {
	case 0:
		return 0
	case 1:
		return math.MaxUint64
	case 2:
		return uint64(g.rng.IntN(300))
	}
	return g.rng.Uint64()
}

// fill sets v (settable) to a random value. For a union it picks member
// memberIdx when ≥ 0, otherwise a random one.
func (g *valueGen) fill(v reflect.Value, memberIdx int) {
	t := v.Type()
	switch t.Kind() {
	case reflect.Interface:
		ms := g.unions[t]
		if memberIdx < 0 {
			memberIdx = g.rng.IntN(len(ms))
		}
		m := reflect.New(reflect.TypeOf(ms[memberIdx%len(ms)])).Elem()
		g.fill(m, -1)
		v.Set(m)
	case reflect.Pointer:
		if g.rng.IntN(2) == 0 {
			return
		}
		p := reflect.New(t.Elem())
		g.fill(p.Elem(), -1)
		v.Set(p)
	case reflect.Struct:
		for i := range v.NumField() {
			g.fill(v.Field(i), -1)
		}
	case reflect.Slice:
		// Empty lists decode as nil, so generate nil rather than empty.
		n := g.rng.IntN(4)
		if t.Elem().Kind() == reflect.Uint8 {
			n = g.rng.IntN(20)
		}
		if n == 0 {
			return
		}
		s := reflect.MakeSlice(t, 0, n)
		for range n {
			e := reflect.New(t.Elem()).Elem()
			g.fill(e, -1)
			if isMapType(t) && g.hasKey(s, e.Field(0)) {
				continue
			}
			s = reflect.Append(s, e)
		}
		v.Set(s)
	case reflect.String:
		rs := make([]rune, g.rng.IntN(10))
		for i := range rs {
			rs[i] = runes[g.rng.IntN(len(runes))]
		}
		v.SetString(string(rs))
	case reflect.Bool:
		v.SetBool(g.rng.IntN(2) == 1)
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if vals, ok := g.enums[t]; ok {
			v.Set(reflect.ValueOf(vals[g.rng.IntN(len(vals))]))
			return
		}
		v.SetUint(g.uint()) // truncated to the field width
	case reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(g.uint()))
	default:
		panic("valueGen: unexpected kind " + t.Kind().String())
	}
}

func (g *valueGen) hasKey(m reflect.Value, k reflect.Value) bool {
	for i := range m.Len() {
		if m.Index(i).Field(0).Equal(k) {
			return true
		}
	}
	return false
}

func TestEveryTypeRoundTrip(t *testing.T) {
	g := newValueGen(1)
	var w Writer
	total := 0
	for _, c := range schemaTypes() {
		n := 50
		if len(c.members) > 25 {
			n = 2 * len(c.members) // every tag at least twice
		}
		for i := range n {
			v := c.zero()
			g.fill(reflect.ValueOf(v).Elem(), i)
			w.Reset()
			c.encode(&w, v)
			if err := w.Err(); err != nil {
				t.Fatalf("%s #%d: encode: %v", c.name, i, err)
			}
			enc := bytes.Clone(w.Bytes())
			r := NewReader(enc)
			got := c.decode(r)
			if err := r.finish(c.name); err != nil {
				t.Fatalf("%s #%d: decode %x: %v", c.name, i, enc, err)
			}
			if !reflect.DeepEqual(got, v) {
				t.Fatalf("%s #%d: decoded value differs\n got %#v\nwant %#v", c.name, i, got, v)
			}
			w.Reset()
			c.encode(&w, got)
			if !bytes.Equal(w.Bytes(), enc) {
				t.Fatalf("%s #%d: re-encoding differs\n got %x\nwant %x", c.name, i, w.Bytes(), enc)
			}
			total++
		}
	}
	t.Logf("%d types, %d values round-tripped", len(schemaTypes()), total)
}

// TestDecodedDoesNotAlias checks that decoded strings and data are copies:
// FrameReader reuses its buffer for the next frame. Small and large
// payloads take different string paths (see sharedStringMax).
func TestDecodedDoesNotAlias(t *testing.T) {
	for _, size := range []int{5, 2 * sharedStringMax} {
		chunk := bytes.Repeat([]byte("h"), size)
		in, err := MarshalFrame(EventFrame{
			Schema:    Schema,
			Ownership: ConnectionOwnership{ConnectionID: "c"},
			Payload:   ProcessOutputEvent{ProcessID: "p", Channel: StreamChannelStdout, Chunk: chunk},
		})
		if err != nil {
			t.Fatal(err)
		}
		f, err := UnmarshalFrame(in)
		if err != nil {
			t.Fatal(err)
		}
		for i := range in {
			in[i] = 'X'
		}
		ev := f.(EventFrame).Payload.(ProcessOutputEvent)
		if ev.ProcessID != "p" || !bytes.Equal(ev.Chunk, chunk) || f.(EventFrame).Schema != Schema {
			t.Errorf("%d-byte chunk: decoded value aliases the input: %+v", size, f)
		}
	}
}

func TestEncodeErrors(t *testing.T) {
	vm := VMOwnership{ConnectionID: "c", SessionID: "s", VMID: "v"}
	for _, tc := range []struct {
		name string
		f    ProtocolFrame
		want error
	}{
		{"nil frame", nil, ErrNilUnion},
		{"nil ownership", RequestFrame{Schema: Schema, Payload: CreateLayerRequest{}}, ErrNilUnion},
		{"nil payload", RequestFrame{Schema: Schema, Ownership: vm}, ErrNilUnion},
		{"pointer member", RequestFrame{Schema: Schema, Ownership: &vm, Payload: CreateLayerRequest{}}, ErrInvalidMember},
		{"pointer frame", &ControlFrame{Schema: Schema, Payload: ShutdownControl{}}, ErrInvalidMember},
		{"unknown enum", RequestFrame{Schema: Schema, Ownership: vm, Payload: CreateVMRequest{Runtime: 3}}, ErrUnknownEnum},
		{"invalid UTF-8", ControlFrame{Schema: Schema, Payload: ShutdownControl{Reason: "\xff"}}, ErrInvalidUTF8},
		{"duplicate key", RequestFrame{Schema: Schema, Ownership: vm, Payload: OpenSessionRequest{
			Placement: SidecarPlacementShared{},
			Metadata:  Map[string, string]{{"a", "1"}, {"a", "2"}},
		}}, ErrDuplicateKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := MarshalFrame(tc.f)
			var ee *EncodeError
			if !errors.Is(err, tc.want) || !errors.As(err, &ee) {
				t.Fatalf("MarshalFrame error = %v, want *EncodeError wrapping %v", err, tc.want)
			}
			dst := []byte("keep")
			out, err := AppendFrame(dst, tc.f)
			if !errors.Is(err, tc.want) || string(out) != "keep" {
				t.Fatalf("AppendFrame = %q, %v; want dst unchanged and %v", out, err, tc.want)
			}
		})
	}
}

// TestNaming pins the generated Go names of representative schema types so
// that a generator change that renames public API fails loudly.
func TestNaming(t *testing.T) {
	var (
		_ OwnershipScope         = ConnectionOwnership{}
		_ OwnershipScope         = SessionOwnership{}
		_ OwnershipScope         = VMOwnership{VMID: "vm-1"}
		_ ProtocolFrame          = RequestFrame{RequestID: 1}
		_ ProtocolFrame          = ResponseFrame{}
		_ ProtocolFrame          = EventFrame{}
		_ ProtocolFrame          = SidecarRequestFrame{}
		_ ProtocolFrame          = SidecarResponseFrame{}
		_ ProtocolFrame          = ControlFrame{}
		_ RequestPayload         = ExecuteRequest{ProcessID: "p", Env: Map[string, string]{}}
		_ RequestPayload         = GuestFilesystemCallRequest{Operation: GuestFilesystemOperationPwrite, UID: new(uint32), GID: new(uint32)}
		_ RequestPayload         = ExtEnvelope{}
		_ RequestPayload         = VMFetchRequest{HeadersJSON: "{}"}
		_ RequestPayload         = CreateLayerRequest{}
		_ ResponsePayload        = RejectedResponse{VMID: new(string)}
		_ ResponsePayload        = ExecutionIOResponse{}
		_ ResponsePayload        = BoundUDPSnapshotResponse{}
		_ ResponsePayload        = ExtEnvelope{}
		_ EventPayload           = ProcessOutputEvent{Channel: StreamChannelStdout}
		_ EventPayload           = VMLifecycleEvent{State: VMLifecycleStateReady}
		_ EventPayload           = ExecutionOutputEvent{Channel: ExecutionStreamChannelPTY}
		_ SidecarRequestPayload  = JSBridgeCallRequest{Args: JSONText("[]")}
		_ SidecarResponsePayload = HostCallbackResultResponse{}
		_ FsPermissionScope      = PermissionModeAllow
		_ FsPermissionScope      = FsPermissionRuleSet{Default: new(PermissionMode)}
		_ ACPRequest             = ACPPromptRequest{}
		_ ACPRequest             = ACPCreateSessionRequest{MCPServers: "[]"}
		_ ACPResponse            = ACPSessionRPCResponse{}
		_ ACPCallback            = ACPHostRequestCallback{}
		_ RequestID              = int64(0)
		_                        = LinkPackageRequest{Package: PackageDescriptor{}}
		_                        = PythonInstallRequest{IndexURL: nil, ExtraIndexUrls: nil}
		_                        = GuestFilesystemStat{IsSymbolicLink: true}
		_                        = []any{GuestRuntimeKindJavaScript, RootFilesystemEntryEncodingUTF8, RootFilesystemEntryEncodingBase64, JavaScriptModuleFormatCommonJS, GuestFilesystemOperationReadFile}
	)
	for v, want := range map[interface{ String() string }]string{
		GuestFilesystemOperationReadDirRecursive: "READ_DIR_RECURSIVE",
		RootFilesystemEntryEncodingUTF8:          "UTF8",
		VMLifecycleStateDisposed:                 "DISPOSED",
		GuestRuntimeKind(7):                      "GuestRuntimeKind(7)",
	} {
		if got := v.String(); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
}

func TestMap(t *testing.T) {
	m := MapOf(map[string]int{"b": 2, "a": 1, "c": 3})
	if want := (Map[string, int]{{"a", 1}, {"b", 2}, {"c", 3}}); !reflect.DeepEqual(m, want) {
		t.Fatalf("MapOf = %v, want %v", m, want)
	}
	m.Set("b", 20)
	m.Set("d", 4)
	if v, ok := m.Get("b"); !ok || v != 20 || len(m) != 4 || m[3].Key != "d" {
		t.Fatalf("after Set: %v", m)
	}
	if _, ok := m.Get("zz"); ok {
		t.Fatal("Get of a missing key reported present")
	}
	if got := m.ToMap(); len(got) != 4 || got["d"] != 4 {
		t.Fatalf("ToMap = %v", got)
	}
	if MapOf(map[string]int{}) != nil {
		t.Fatal("MapOf(empty) is not nil")
	}
	// duplicateKey switches to a hash set beyond smallMap entries.
	big := make(Map[uint32, bool], 3*smallMap)
	var seen map[uint32]struct{}
	for i := range big {
		big[i].Key = uint32(i)
		if duplicateKey(big, i, &seen) {
			t.Fatalf("false duplicate at %d", i)
		}
	}
	big = append(big, MapEntry[uint32, bool]{Key: 2})
	if !duplicateKey(big, len(big)-1, &seen) || uniqueKeys(big) {
		t.Fatal("duplicate key not detected")
	}
}

func TestGeneratedIsUpToDate(t *testing.T) {
	src, err := os.ReadFile("schema.bare")
	if err != nil {
		t.Fatal(err)
	}
	want, err := gen.Generate(src, gen.Options{Package: "protocol", Source: "schema.bare"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("zz_generated.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("zz_generated.go is stale: run go generate ./agentos/protocol")
	}
}

func TestSchemaCopyMatchesShared(t *testing.T) {
	shared := filepath.Join(protocolDir(), "schema.bare")
	want, err := os.ReadFile(shared)
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("%s not present", shared)
	}
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("schema.bare")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("schema.bare differs from %s: copy it and run go generate ./agentos/protocol", shared)
	}
}
