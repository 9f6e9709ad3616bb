package client_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/agentos-gateway/agentos-gateway/client"
	"github.com/agentos-gateway/agentos-gateway/internal/apispec"
)

// TestTypesMatchSchemas holds the client's types against the schemas of
// api/openapi.yaml: a type the client decodes has a field for every
// property (nothing the gateway sends is dropped), and a type it sends has
// exactly the schema's properties, each required exactly when the client
// always sends it. The handlers' types are held against the same schemas,
// so the two sides cannot drift apart.
func TestTypesMatchSchemas(t *testing.T) {
	doc := apispec.MustLoad(t)
	checked := map[string]bool{}
	for _, c := range []struct {
		schema string
		v      any
		sends  bool
	}{
		// What the client decodes.
		{"VM", client.VM{}, false},
		{"VMList", client.List[client.VM]{}, false},
		{"ProcessInfo", client.Process{}, false},
		{"ExitStatus", client.ExitStatus{}, false},
		{"ExecResult", client.ExecResult{}, false},
		{"FileWritten", client.WriteResult{}, false},
		{"Shell", client.Shell{}, false},
		{"DirEntry", client.DirEntry{}, false},
		{"Stat", client.FileStat{}, false},
		{"ArchiveExtracted", client.ArchiveResult{}, false},
		{"Tenant", client.Tenant{}, false},
		{"Quotas", client.Quotas{}, false},
		{"CreatedAPIKey", client.APIKey{}, false},
		{"Sidecar", client.Sidecar{}, false},
		{"VMEvent", client.VMEvent{}, false},
		{"Agent", client.Agent{}, false},
		{"Session", client.Session{}, false},
		{"Permission", client.Permission{}, false},
		{"PermissionDecision", client.PermissionDecision{}, false},
		{"PermissionAnswer", client.PermissionAnswer{}, false},
		{"PromptResult", client.PromptResult{}, false},
		{"SessionConfig", client.SessionConfig{}, false},
		{"SessionEvent", client.SessionEvent{}, false},
		{"SessionHistory", client.History{}, false},
		{"SessionSettings", client.SessionSettings{}, false},
		{"PermissionOption", client.PermissionOption{}, false},
		{"EphemeralEvent", client.EphemeralEvent{}, false},
		{"GapEvent", client.Gap{}, false},
		// One type decodes both exit events; the exec one has every field.
		{"ExecExitEvent", client.ExitEvent{}, false},
		// What the client sends.
		{"CreateVMRequest", client.CreateVMRequest{}, true},
		{"SpawnRequest", client.SpawnRequest{}, true},
		{"OpenShellRequest", client.ShellRequest{}, true},
		{"CreateTenantRequest", client.TenantCreate{}, true},
		{"UpdateTenantRequest", client.TenantUpdate{}, true},
		{"QuotasUpdate", client.QuotasUpdate{}, true},
		{"OpenSessionRequest", client.OpenSessionRequest{}, true},
		{"PromptRequest", client.PromptRequest{}, true},
		{"PermissionDefault", client.PermissionDefault{}, true},
	} {
		t.Run(c.schema, func(t *testing.T) { apispec.CheckType(t, doc, c.schema, c.v, c.sends) })
		name, _, _ := strings.Cut(reflect.TypeOf(c.v).Name(), "[")
		checked[name] = true
	}
	// Every struct of the package with JSON tags is a wire shape, and is in
	// the table above.
	for _, name := range wireTypes(t) {
		if !checked[name] {
			t.Errorf("client.%s has JSON tags but is not held against a schema", name)
		}
	}
}

// wireTypes returns the exported struct types of the package's source that
// have a field with a json tag.
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
		ast.Inspect(file, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok || !ts.Name.IsExported() {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return true
			}
			for _, field := range st.Fields.List {
				if field.Tag != nil && strings.Contains(field.Tag.Value, `json:"`) {
					out = append(out, ts.Name.Name)
					break
				}
			}
			return true
		})
	}
	return out
}
