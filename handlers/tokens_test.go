package handlers

import (
	"testing"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// TestTokenScopesNameRealRoutes: every route the scope table opens to
// tokens is a route of api/openapi.yaml with a known scope, so that a
// renamed route cannot leave a stale entry that opens nothing, or a typo
// open something else; and every scope opens at least one route.
func TestTokenScopesNameRealRoutes(t *testing.T) {
	documented := specOperations(t)
	used := map[gateway.Scope]bool{}
	for route, scope := range tokenScopes {
		if !documented[route] {
			t.Errorf("tokenScopes names %s, which api/openapi.yaml does not have", route)
		}
		if scope != anyToken && !scope.Valid() {
			t.Errorf("%s needs the unknown scope %q", route, scope)
		}
		used[scope] = true
	}
	used[gateway.ScopePreviews] = true // the guest port proxy, by pattern
	for _, sc := range gateway.Scopes {
		if !used[sc] {
			t.Errorf("the scope %s opens no route", sc)
		}
	}
	for _, closed := range []string{"POST /v1/vms", "POST /v1/tokens", "GET /v1/tokens", "DELETE /v1/tokens/{token}", "GET /v1/tenants",
		"GET /v1/sidecars", "GET /v1/nodes", "GET /v1/webhook-secret", "POST /v1/vms/{vm}/snapshots", "POST /v1/vms/{vm}/mounts", "PUT /v1/vms/{vm}/bindings"} {
		if _, open := tokenScopes[closed]; open {
			t.Errorf("%s is open to tokens", closed)
		}
	}
}
