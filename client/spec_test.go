package client

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/internal/apispec"
)

// TestNoJSONShapesOfItsOwn: every JSON shape the client decodes or sends is
// a type of package api or of the root package (held against
// api/openapi.yaml by api's tests, and the handlers' too), so the client
// cannot drift from the server. Its own types are Go views that convert to
// and from those at the edge, with no json tags.
func TestNoJSONShapesOfItsOwn(t *testing.T) {
	for _, s := range apispec.JSONStructs(t, ".") {
		t.Errorf("%s: struct %q has json tags: its shape belongs in package api or the root package", s.Pos, s.Name)
	}
}

// TestSentBodiesMatchSchemas validates what the client's own request types
// marshal to, empty and full, against the request schemas.
func TestSentBodiesMatchSchemas(t *testing.T) {
	doc := apispec.MustLoad(t)
	retention := 36 * time.Hour
	for _, c := range []struct {
		schema string
		v      any
	}{
		{"CreateVMRequest", CreateVMRequest{}},
		{"CreateVMRequest", CreateVMRequest{Labels: map[string]string{"a": "b"}, Env: map[string]string{"A": "1"},
			Permissions: map[string]any{"network": "deny"}, Limits: map[string]any{"resources": map[string]any{"maxProcesses": 5}},
			LoopbackExemptPorts: []uint16{8080}, Software: []string{"@agentos-software/pi"}, Agents: []string{"pi"}, IdleTimeout: 90 * time.Second}},
		{"CreateVMRequest", CreateVMRequest{Permissions: map[string]any{"fs": "allow", "network": NetworkRules{Default: "deny", Rules: []NetworkRule{
			{Mode: "deny", Hosts: []string{"internal.example.com"}}, {Mode: "allow", Hosts: []string{"*.example.com", "::1"}, Ports: []int{443, 8443}}}}}}},
		{"UpdateVMRequest", UpdateVMRequest{}},
		{"UpdateVMRequest", UpdateVMRequest{Labels: map[string]*string{"a": nil}, Permissions: map[string]any{"fs": nil,
			"network": NetworkRules{Rules: []NetworkRule{{Mode: "allow", Hosts: []string{"*"}}}}}}},
		{"ExecRequest", ExecRequest{Command: "true"}},
		{"ExecRequest", ExecRequest{Command: "cat", Args: []string{"-"}, Cwd: "/tmp", Env: map[string]string{"A": "1"},
			Stdin: []byte{0xff, 0}, Timeout: time.Second, MaxOutputBytes: 10}},
		{"ExecRequest", ExecRequest{Argv: []string{"echo", "hi"}, Stdin: []byte("text")}},
		{"SpawnRequest", SpawnRequest{Argv: []string{"sleep", "1"}, Cwd: "/", Env: map[string]string{"A": "1"}}},
		{"CreateMountRequest", MountRequest{Path: "/scratch", Driver: MountMemory}},
		{"CreateMountRequest", MountRequest{Path: "/mnt/data", Driver: MountHostDir, HostPath: "/srv/data", ReadOnly: new(true)}},
		{"OpenShellRequest", ShellRequest{}},
		{"OpenShellRequest", ShellRequest{Shell: "bash", Cols: 100, Rows: 30, Cwd: "/", Env: map[string]string{"A": "1"}}},
		{"CreateTenantRequest", TenantCreate{Name: "acme"}},
		{"CreateTenantRequest", TenantCreate{Name: "acme", Isolated: true, Quotas: &Quotas{MaxVMs: 3, RequestsPerSecond: 2},
			Sessions: &SessionSettingsUpdate{Retention: &retention, PermissionDefault: &PermissionDefault{Decision: "reject", TimeoutSeconds: 60}}}},
		{"UpdateTenantRequest", TenantUpdate{}},
		{"UpdateTenantRequest", TenantUpdate{Name: Ptr("b"), Isolated: Ptr(false), Quotas: &QuotasUpdate{MaxVMs: Ptr(1)},
			Sessions: &SessionSettingsUpdate{ClearPermissionDefault: true}}},
		{"OpenSessionRequest", OpenSessionRequest{Agent: "pi", PermissionPolicy: PolicyAsk,
			PermissionDefault: &PermissionDefault{Decision: "allow", TimeoutSeconds: 5}}},
		{"PromptRequest", PromptRequest{Content: TextPrompt("hi"), IdempotencyKey: "k"}},
	} {
		b, err := json.Marshal(c.v)
		if err != nil {
			t.Fatalf("%s %+v: %v", c.schema, c.v, err)
		}
		var body any
		if err := json.Unmarshal(b, &body); err != nil {
			t.Fatal(err)
		}
		ref := doc.Components.Schemas[c.schema]
		if ref == nil {
			t.Fatalf("no schema %s", c.schema)
		}
		if err := ref.Value.VisitJSON(body); err != nil {
			t.Errorf("%s: %s does not match: %v", c.schema, b, err)
		}
	}
}
