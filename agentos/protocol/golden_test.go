package protocol

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// wantTruncated is the number of oversized frames golden/README.md says are
// stored truncated (one RootFilesystemSnapshotResponse in each of b–g).
const wantTruncated = 6

// protocolDir returns the shared agentos-protocol folder (SPEC, schema and
// golden captures), overridable with AGENTOS_PROTOCOL_DIR.
func protocolDir() string {
	if d := os.Getenv("AGENTOS_PROTOCOL_DIR"); d != "" {
		return d
	}
	return filepath.Join("..", "..", "..", "shared", "agentos-protocol")
}

// goldenRecord is one line of a golden/*.jsonl capture.
type goldenRecord struct {
	Seq          int             `json:"seq"`
	Direction    string          `json:"direction"`
	FD           int             `json:"fd"`
	Len          int             `json:"len"`
	Hex          string          `json:"hex"`
	HexTruncated bool            `json:"hex_truncated"`
	Decoded      json.RawMessage `json:"decoded"`

	payload []byte
}

type goldenFile struct {
	name    string
	records []goldenRecord
}

// loadGolden reads every capture. A missing folder is a failure, not a
// skip: the round-trip guarantees are only meaningful against real frames.
func loadGolden(tb testing.TB) []goldenFile {
	tb.Helper()
	dir := filepath.Join(protocolDir(), "golden")
	paths, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil || len(paths) == 0 {
		tb.Fatalf("no golden captures found in %s (set AGENTOS_PROTOCOL_DIR to the agentos-protocol folder): %v", dir, err)
	}
	slices.Sort(paths)
	var files []goldenFile
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		gf := goldenFile{name: filepath.Base(p)}
		for i, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
			var rec goldenRecord
			if err := json.Unmarshal(line, &rec); err != nil {
				tb.Fatalf("%s:%d: %v", gf.name, i+1, err)
			}
			if rec.payload, err = hex.DecodeString(rec.Hex); err != nil {
				tb.Fatalf("%s:%d: bad hex: %v", gf.name, i+1, err)
			}
			gf.records = append(gf.records, rec)
		}
		files = append(files, gf)
	}
	return files
}

// goldenPayloads returns every complete golden frame payload.
func goldenPayloads(tb testing.TB) [][]byte {
	var out [][]byte
	for _, f := range loadGolden(tb) {
		for _, r := range f.records {
			if !r.HexTruncated {
				out = append(out, r.payload)
			}
		}
	}
	return out
}

// acpRoot is the codec of one ACP root type, used generically by tests.
type acpRoot struct {
	name      string // schema name
	unmarshal func([]byte) (any, error)
	marshal   func(any) ([]byte, error)
}

var acpRoots = []acpRoot{
	{"AcpRequest",
		func(b []byte) (any, error) { return UnmarshalACPRequest(b) },
		func(v any) ([]byte, error) { return MarshalACPRequest(v.(ACPRequest)) }},
	{"AcpResponse",
		func(b []byte) (any, error) { return UnmarshalACPResponse(b) },
		func(v any) ([]byte, error) { return MarshalACPResponse(v.(ACPResponse)) }},
	{"AcpEvent",
		func(b []byte) (any, error) { return UnmarshalACPEvent(b) },
		func(v any) ([]byte, error) { return MarshalACPEvent(v.(ACPEvent)) }},
	{"AcpCallback",
		func(b []byte) (any, error) { return UnmarshalACPCallback(b) },
		func(v any) ([]byte, error) { return MarshalACPCallback(v.(ACPCallback)) }},
	{"AcpCallbackResponse",
		func(b []byte) (any, error) { return UnmarshalACPCallbackResponse(b) },
		func(v any) ([]byte, error) { return MarshalACPCallbackResponse(v.(ACPCallbackResponse)) }},
}

// acpEnvelope returns the ACP payload of f and the root it holds, if f
// carries an ExtEnvelope in the ACP namespace.
func acpEnvelope(f ProtocolFrame) ([]byte, *acpRoot, bool) {
	var payload any
	var root int
	switch f := f.(type) {
	case RequestFrame:
		payload, root = f.Payload, 0
	case ResponseFrame:
		payload, root = f.Payload, 1
	case EventFrame:
		payload, root = f.Payload, 2
	case SidecarRequestFrame:
		payload, root = f.Payload, 3
	case SidecarResponseFrame:
		payload, root = f.Payload, 4
	default:
		return nil, nil, false
	}
	env, ok := payload.(ExtEnvelope)
	if !ok || env.Namespace != ACPNamespace {
		return nil, nil, false
	}
	return env.Payload, &acpRoots[root], true
}

func TestGoldenRoundTrip(t *testing.T) {
	var frames, acp, skipped int
	for _, gf := range loadGolden(t) {
		t.Run(gf.name, func(t *testing.T) {
			var fileFrames, fileACP int
			for _, rec := range gf.records {
				if rec.HexTruncated {
					skipped++
					continue
				}
				if rec.Len != len(rec.payload) {
					t.Errorf("seq %d: len field %d, payload has %d bytes", rec.Seq, rec.Len, len(rec.payload))
				}
				f, err := UnmarshalFrame(rec.payload)
				if err != nil {
					t.Errorf("seq %d: UnmarshalFrame: %v", rec.Seq, err)
					continue
				}
				out, err := MarshalFrame(f)
				if err != nil {
					t.Errorf("seq %d: MarshalFrame: %v", rec.Seq, err)
					continue
				}
				if !bytes.Equal(out, rec.payload) {
					t.Errorf("seq %d: re-encoding differs\n got %x\nwant %x", rec.Seq, out, rec.payload)
					continue
				}
				framed, err := AppendFrame([]byte("xx"), f)
				if err != nil || !bytes.Equal(framed[6:], rec.payload) || int(framed[2])<<24|int(framed[3])<<16|int(framed[4])<<8|int(framed[5]) != rec.Len {
					t.Errorf("seq %d: AppendFrame = %x, %v", rec.Seq, framed, err)
				}
				fileFrames++
				payload, root, ok := acpEnvelope(f)
				if !ok {
					continue
				}
				v, err := root.unmarshal(payload)
				if err != nil {
					t.Errorf("seq %d: %s: %v", rec.Seq, root.name, err)
					continue
				}
				if out, err := root.marshal(v); err != nil || !bytes.Equal(out, payload) {
					t.Errorf("seq %d: %s re-encoding = %x, %v; want %x", rec.Seq, root.name, out, err, payload)
					continue
				}
				fileACP++
			}
			t.Logf("%d frames, %d ACP payloads round-tripped", fileFrames, fileACP)
			frames += fileFrames
			acp += fileACP
		})
	}
	t.Logf("total: %d frames, %d ACP payloads round-tripped byte-exactly; %d truncated frames skipped", frames, acp, skipped)
	if skipped != wantTruncated {
		t.Errorf("skipped %d truncated frames, golden/README.md says %d", skipped, wantTruncated)
	}
	if frames == 0 || acp == 0 {
		t.Errorf("nothing checked: %d frames, %d ACP payloads", frames, acp)
	}
}

func TestGoldenMatchesJSDecode(t *testing.T) {
	rn := newRenderer()
	var frames, acp int
	for _, gf := range loadGolden(t) {
		t.Run(gf.name, func(t *testing.T) {
			for _, rec := range gf.records {
				if rec.HexTruncated {
					continue
				}
				want := parseJSON(t, rec.Decoded)
				var wantACP any
				if env := extEnvelopeJSON(want); env != nil {
					if v, ok := env["payload_decoded"]; ok {
						wantACP = v
						delete(env, "payload_decoded")
					}
				}
				f, err := UnmarshalFrame(rec.payload)
				if err != nil {
					t.Errorf("seq %d: %v", rec.Seq, err)
					continue
				}
				if diff := jsonDiff("decoded", rn.json(t, f), want); diff != "" {
					t.Errorf("seq %d: Go decode differs from JS decode: %s", rec.Seq, diff)
					continue
				}
				frames++
				payload, root, ok := acpEnvelope(f)
				if !ok {
					if wantACP != nil {
						t.Errorf("seq %d: JS decoded an ACP payload that Go did not recognise", rec.Seq)
					}
					continue
				}
				v, err := root.unmarshal(payload)
				if err != nil {
					t.Errorf("seq %d: %v", rec.Seq, err)
					continue
				}
				if diff := jsonDiff("payload_decoded", rn.json(t, v), wantACP); diff != "" {
					t.Errorf("seq %d: Go %s decode differs from JS decode: %s", rec.Seq, root.name, diff)
					continue
				}
				acp++
			}
		})
	}
	t.Logf("%d frames and %d ACP payloads match the JS decode", frames, acp)
}

// extEnvelopeJSON returns the rendered ExtEnvelope of a rendered frame, or nil.
func extEnvelopeJSON(frame any) map[string]any {
	payload, _ := at(frame, "val", "payload").(map[string]any)
	if payload == nil || payload["tag"] != "ExtEnvelope" {
		return nil
	}
	env, _ := payload["val"].(map[string]any)
	return env
}

func at(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func parseJSON(tb testing.TB, b []byte) any {
	tb.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		tb.Fatal(err)
	}
	return v
}

// jsonDiff describes the first difference between two parsed JSON trees.
func jsonDiff(path string, got, want any) string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s: got %v, want object", path, got)
		}
		keys := make([]string, 0, len(w))
		for k := range w {
			keys = append(keys, k)
		}
		for k := range g {
			if _, ok := w[k]; !ok {
				return fmt.Sprintf("%s: unexpected key %q", path, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			if _, ok := g[k]; !ok {
				return fmt.Sprintf("%s: missing key %q", path, k)
			}
			if d := jsonDiff(path+"."+k, g[k], w[k]); d != "" {
				return d
			}
		}
		return ""
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Sprintf("%s: got %v, want %v", path, got, want)
		}
		for i := range w {
			if d := jsonDiff(path+"["+strconv.Itoa(i)+"]", g[i], w[i]); d != "" {
				return d
			}
		}
		return ""
	}
	if !reflect.DeepEqual(got, want) {
		return fmt.Sprintf("%s: got %#v, want %#v", path, got, want)
	}
	return ""
}

// renderer turns decoded Go values into the generic JSON shape of the
// golden `decoded` field, using the bare struct tags and the schemaTypes
// table to recover schema names.
type renderer struct {
	names map[reflect.Type]string // struct, void and enum Go types → schema name
	enums map[reflect.Type]bool
}

func newRenderer() *renderer {
	rn := &renderer{names: map[reflect.Type]string{}, enums: map[reflect.Type]bool{}}
	for _, c := range schemaTypes() {
		t := reflect.TypeOf(c.zero()).Elem()
		switch {
		case c.values != nil:
			rn.enums[t] = true
		case t.Kind() != reflect.Struct:
			continue // aliases and unions have no member name of their own
		}
		rn.names[t] = c.name
	}
	return rn
}

// json renders v and parses the result back, so numbers compare as
// json.Number exactly like the expected side.
func (rn *renderer) json(tb testing.TB, v any) any {
	b, err := json.Marshal(rn.render(reflect.ValueOf(&v).Elem()))
	if err != nil {
		tb.Fatal(err)
	}
	return parseJSON(tb, b)
}

func (rn *renderer) render(v reflect.Value) any {
	switch v.Kind() {
	case reflect.Interface:
		if v.IsNil() {
			return nil
		}
		m := v.Elem()
		return map[string]any{"tag": rn.names[m.Type()], "val": rn.render(m)}
	case reflect.Pointer:
		if v.IsNil() {
			return nil
		}
		return rn.render(v.Elem())
	case reflect.Struct:
		if v.NumField() == 0 {
			return nil // void member
		}
		obj := map[string]any{}
		for i := range v.NumField() {
			obj[v.Type().Field(i).Tag.Get("bare")] = rn.render(v.Field(i))
		}
		return obj
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return base64.StdEncoding.EncodeToString(v.Bytes())
		}
		if isMapType(v.Type()) {
			obj := map[string]any{}
			for i := range v.Len() {
				obj[fmt.Sprint(v.Index(i).Field(0).Interface())] = rn.render(v.Index(i).Field(1))
			}
			return obj
		}
		arr := make([]any, v.Len())
		for i := range arr {
			arr[i] = rn.render(v.Index(i))
		}
		return arr
	case reflect.String:
		return v.String()
	case reflect.Bool:
		return v.Bool()
	case reflect.Uint64:
		return strconv.FormatUint(v.Uint(), 10)
	case reflect.Int64:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Uint8, reflect.Uint16, reflect.Uint32:
		if rn.enums[v.Type()] {
			return bareTSEnumName(v.Interface().(fmt.Stringer).String())
		}
		return json.Number(strconv.FormatUint(v.Uint(), 10))
	case reflect.Int8, reflect.Int16, reflect.Int32:
		return json.Number(strconv.FormatInt(v.Int(), 10))
	}
	panic("render: unexpected kind " + v.Kind().String())
}

func isMapType(t reflect.Type) bool {
	return t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct &&
		strings.HasPrefix(t.Elem().Name(), "MapEntry[")
}

// bareTSEnumName spells an enum value the way bare-ts 0.6 names it in JS
// (its toPascalCase): a capital followed by a lowercase letter or digit
// starts a new word ("UTF8" → "UT_F8"), then the words are lower-cased and
// capitalised: JAVA_SCRIPT → JavaScript, UTF8 → UtF8, BASE64 → BasE64.
func bareTSEnumName(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if i > 0 && c >= 'A' && c <= 'Z' && i+1 < len(s) && isLowerOrDigit(s[i+1]) {
			b.WriteByte('_')
			b.WriteByte(c)
			b.WriteByte(s[i+1])
			i++
			continue
		}
		b.WriteByte(c)
	}
	var out []byte
	upper := true
	for _, c := range []byte(strings.ToLower(b.String())) {
		switch {
		case c == '_' || c == '-' || c == ' ':
			upper = true
			continue
		case upper && c >= 'a' && c <= 'z':
			c -= 'a' - 'A'
		}
		upper = false
		out = append(out, c)
	}
	return string(out)
}

func isLowerOrDigit(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }

func TestBareTSEnumName(t *testing.T) {
	for in, want := range map[string]string{
		"JAVA_SCRIPT": "JavaScript", "UTF8": "UtF8", "BASE64": "BasE64", "STDOUT": "Stdout",
		"READ_DIR_RECURSIVE": "ReadDirRecursive", "TIMED_OUT": "TimedOut", "PTY": "Pty",
	} {
		if got := bareTSEnumName(in); got != want {
			t.Errorf("bareTSEnumName(%q) = %q, want %q", in, got, want)
		}
	}
}
