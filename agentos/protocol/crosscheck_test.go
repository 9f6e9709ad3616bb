package protocol

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestCrossCheckPythonReference encodes random frames with this package and
// has the independent reference codec (tools/bare_roundtrip.py, built only
// from schema.bare) decode them, re-encode them byte-exactly and compare
// them with our generic rendering. Together with the golden captures this
// covers the union members the captures never exercise.
func TestCrossCheckPythonReference(t *testing.T) {
	script := filepath.Join(protocolDir(), "tools", "bare_roundtrip.py")
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	if _, err := os.Stat(script); err != nil {
		t.Skipf("reference codec not available: %v", err)
	}
	g := newValueGen(2)
	rn := newRenderer()
	frameType := reflect.TypeFor[ProtocolFrame]()
	var lines []string
	add := func(f ProtocolFrame, acp any) {
		payload, err := MarshalFrame(f)
		if err != nil {
			t.Fatal(err)
		}
		decoded := rn.render(reflect.ValueOf(&f).Elem())
		if acp != nil {
			decoded.(map[string]any)["val"].(map[string]any)["payload"].(map[string]any)["val"].(map[string]any)["payload_decoded"] =
				rn.render(reflect.ValueOf(&acp).Elem())
		}
		rec, err := json.Marshal(map[string]any{"seq": len(lines) + 1, "hex": hex.EncodeToString(payload), "decoded": decoded})
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, string(rec))
	}
	for i := range 3000 {
		f := reflect.New(frameType).Elem()
		g.fill(f, i)
		add(f.Interface().(ProtocolFrame), nil)
	}
	// ACP payloads inside ExtEnvelopes, one root per frame kind.
	vm := VMOwnership{ConnectionID: "conn-1", SessionID: "session-1", VMID: "vm-1"}
	for i := range 500 {
		root := acpRoots[i%len(acpRoots)]
		var v any
		for _, c := range schemaTypes() {
			if c.name == root.name {
				p := reflect.ValueOf(c.zero())
				g.fill(p.Elem(), i/len(acpRoots))
				v = p.Elem().Interface()
			}
		}
		b, err := root.marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		env := ExtEnvelope{Namespace: ACPNamespace, Payload: b}
		frames := []ProtocolFrame{
			RequestFrame{Schema, 1, vm, env},
			ResponseFrame{Schema, 1, vm, env},
			EventFrame{Schema, vm, env},
			SidecarRequestFrame{Schema, 1, vm, env},
			SidecarResponseFrame{Schema, 1, vm, env},
		}
		add(frames[i%len(acpRoots)], v)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "random.jsonl"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(python, script, "schema.bare", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("reference codec rejected our encodings: %v\n%s", err, out)
	}
	summary, _, _ := strings.Cut(string(out), "frame/payload kinds seen:")
	t.Logf("reference codec:\n%s", strings.TrimSpace(summary))
}
