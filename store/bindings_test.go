package store

import (
	"encoding/json"
	"reflect"
	"testing"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

func TestSetVMBindings(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		mustTenant(t, db, "acme")
		mustTenant(t, db, "other")
		if err := db.CreateVM(ctx, gateway.VM{ID: "vm_b", TenantID: "acme", Spec: testSpec()}); err != nil {
			t.Fatal(err)
		}
		b := &gateway.Bindings{
			Collections: []gateway.BindingCollection{{Name: "weather", Description: "d", Bindings: []gateway.Binding{
				{Name: "get", Description: "d", InputSchema: json.RawMessage(`{"type":"object"}`), TimeoutMs: 500, WebhookURL: "https://h.example/x",
					Examples: []gateway.BindingExample{{Description: "e", Input: json.RawMessage(`{"city":"Paris"}`)}}},
			}}},
			PermissionWebhookURL: "https://h.example/p",
		}
		for _, tc := range []struct {
			name, tenant, id string
			code             gateway.Code
		}{
			{"owner", "acme", "vm_b", ""},
			{"other tenant", "other", "vm_b", gateway.CodeNotFound},
			{"no such vm", "acme", "vm_none", gateway.CodeNotFound},
		} {
			_, err := db.SetVMBindings(ctx, tc.tenant, tc.id, b)
			if gateway.ErrorCode(err) != tc.code {
				t.Errorf("%s: %v, want %q", tc.name, err, tc.code)
			}
		}
		got, err := db.GetVM(ctx, "acme", "vm_b")
		if err != nil {
			t.Fatal(err)
		}
		want := testSpec()
		want.Bindings = b
		// PostgreSQL keeps the spec as jsonb, which respaces and reorders
		// the raw JSON of schemas and examples: compare as JSON values.
		if !reflect.DeepEqual(jsonValue(t, got.Spec), jsonValue(t, want)) {
			t.Errorf("spec %s\nwant %s", mustJSON(t, got.Spec), mustJSON(t, want))
		}
		if _, err := db.SetVMState(ctx, "vm_b", gateway.VMDisposed, "", ""); err != nil {
			t.Fatal(err)
		}
		if _, err := db.SetVMBindings(ctx, "acme", "vm_b", nil); gateway.ErrorCode(err) != gateway.CodeConflict {
			t.Errorf("an ended VM's bindings changed: %v", err)
		}
	})
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func jsonValue(t *testing.T, v any) any {
	t.Helper()
	var out any
	if err := json.Unmarshal(mustJSON(t, v), &out); err != nil {
		t.Fatal(err)
	}
	return out
}
