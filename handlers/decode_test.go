package handlers

import (
	"errors"
	"testing"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// A validation error names the field as the JSON body spells it: nested
// objects by their path, embedded structs not at all (JSON flattens them).
func TestValidateStructNamesJSONFields(t *testing.T) {
	for _, c := range []struct {
		name  string
		v     any
		field string
	}{
		{"embedded", &execRequest{commandJSON: commandJSON{Command: "true", Cwd: "relative"}}, "cwd"},
		{"embedded in spawn", &spawnRequest{commandJSON{Command: "b", Cwd: "relative"}}, "cwd"},
		{"nested", &createTenantRequest{Name: "t", Quotas: quotasJSON{MaxVMs: ptr(-1)}}, "quotas.maxVms"},
		{"top level", &openSessionRequest{Agent: "pi", PermissionPolicy: "sometimes"}, "permissionPolicy"},
		{"pointer to struct", &openSessionRequest{Agent: "pi", PermissionDefault: &gateway.PermissionDefault{Decision: "maybe", TimeoutSeconds: 1}}, "permissionDefault.decision"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := validateStruct(c.v)
			var ge *gateway.Error
			if !errors.As(err, &ge) || ge.Details["field"] != c.field {
				t.Fatalf("validateStruct = %v, want field %q", err, c.field)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
