package client

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/agentos-gateway/agentos-gateway/internal/apispec"
)

// TestTypesMatchSchemas holds the client's JSON shapes against the schemas
// of api/openapi.yaml: a type the client decodes has a field for every
// property (nothing the gateway sends is dropped), and a type it sends has
// exactly the schema's properties, each required exactly when the client
// always sends it. A type with its own MarshalJSON or UnmarshalJSON is held
// through the wire struct that method goes through. The handlers' types are
// held against the same schemas, so the two sides cannot drift apart.
func TestTypesMatchSchemas(t *testing.T) {
	doc := apispec.MustLoad(t)
	checked := map[string]bool{}
	for _, c := range []struct {
		schema string
		v      any
		sends  bool
	}{
		// What the client decodes.
		{"VM", wireVM{}, false},
		{"VMList", List[VM]{}, false},
		{"ProcessInfo", Process{}, false},
		{"ExitStatus", ExitStatus{}, false},
		{"ExecResult", wireExecResult{}, false},
		{"FileWritten", WriteResult{}, false},
		{"Shell", Shell{}, false},
		{"DirEntry", DirEntry{}, false},
		{"Stat", FileStat{}, false},
		{"ArchiveExtracted", ArchiveResult{}, false},
		{"Tenant", Tenant{}, false},
		{"Quotas", Quotas{}, false},
		{"CreatedAPIKey", APIKey{}, false},
		{"Sidecar", Sidecar{}, false},
		{"VMEvent", VMEvent{}, false},
		{"Agent", Agent{}, false},
		{"Session", Session{}, false},
		{"Permission", Permission{}, false},
		{"PermissionDecision", PermissionDecision{}, false},
		{"PermissionAnswer", PermissionAnswer{}, false},
		{"PromptResult", PromptResult{}, false},
		{"SessionConfig", SessionConfig{}, false},
		{"SessionEvent", SessionEvent{}, false},
		{"SessionHistory", History{}, false},
		{"SessionSettings", wireSessionSettings{}, false},
		{"PermissionOption", PermissionOption{}, false},
		{"Problem", problemJSON{}, false},
		{"ShellCreated", wireShellCreated{}, false},
		{"CancelResult", wireCancelResult{}, false},
		// The data of stream events. One type decodes both exit events (and
		// a shell's end); the exec one has every field.
		{"OutputEvent", wireOutput{}, false},
		{"ExecExitEvent", wireExit{}, false},
		{"GapEvent", wireGap{}, false},
		{"ErrorEvent", wireError{}, false},
		{"EphemeralEvent", EphemeralEvent{}, false},
		{"AgentStderrEvent", wireAgentStderr{}, false},
		{"AgentExitEvent", wireAgentExit{}, false},
		{"OverflowEvent", wireOverflow{}, false},
		{"SessionEndEvent", wireSessionEnd{}, false},
		// What the client sends.
		{"CreateVMRequest", wireCreateVM{}, true},
		{"ExecRequest", wireExec{}, true},
		{"SpawnRequest", SpawnRequest{}, true},
		{"OpenShellRequest", ShellRequest{}, true},
		{"CreateTenantRequest", TenantCreate{}, true},
		{"UpdateTenantRequest", TenantUpdate{}, true},
		{"QuotasUpdate", QuotasUpdate{}, true},
		{"OpenSessionRequest", OpenSessionRequest{}, true},
		{"PromptRequest", PromptRequest{}, true},
		{"PermissionDefault", wirePermissionDefault{}, true},
	} {
		t.Run(c.schema, func(t *testing.T) { apispec.CheckType(t, doc, c.schema, c.v, c.sends) })
		name, _, _ := strings.Cut(reflect.TypeOf(c.v).Name(), "[")
		checked[name] = true
	}
	// Every struct of the package with JSON tags, exported or not, is a
	// wire shape, and is in the table above.
	for _, name := range wireTypes(t) {
		if !checked[name] {
			t.Errorf("%s has JSON tags but is not held against a schema", name)
		}
	}
}

// wireTypes returns the named struct types of the package's source that
// have a field with a json tag, and fails t for an anonymous one.
func wireTypes(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		// A named struct is reported by name; an anonymous one (a wire
		// shape that cannot be held) is an error.
		named := map[*ast.StructType]bool{}
		ast.Inspect(file, func(n ast.Node) bool {
			if ts, ok := n.(*ast.TypeSpec); ok {
				if st, ok := ts.Type.(*ast.StructType); ok {
					named[st] = true
					if hasJSONTag(st) {
						out = append(out, ts.Name.Name)
					}
				}
				return true
			}
			if st, ok := n.(*ast.StructType); ok && !named[st] && hasJSONTag(st) {
				t.Errorf("%s: an anonymous struct with JSON tags: name it and hold it against its schema", fset.Position(st.Pos()))
			}
			return true
		})
	}
	if len(out) < 45 {
		t.Fatalf("found only %d JSON structs: the scan is broken", len(out))
	}
	return out
}

func hasJSONTag(st *ast.StructType) bool {
	for _, field := range st.Fields.List {
		if field.Tag != nil && strings.Contains(field.Tag.Value, `json:"`) {
			return true
		}
	}
	return false
}
