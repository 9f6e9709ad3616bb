package handlers

import (
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/agentos-gateway/agentos-gateway/internal/apispec"
)

// routerRoutes returns "METHOD /path" for every route of the router.
func routerRoutes(t *testing.T, r chi.Routes) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	err := chi.Walk(r, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if strings.Contains(strings.TrimSuffix(route, "/*"), "*") {
			t.Errorf("%s %s: a wildcard route other than a trailing one ({path}) cannot be described in openapi.yaml", method, route)
		}
		key := method + " " + normalizeRoute(route)
		if out[key] {
			t.Errorf("%s is routed twice", key)
		}
		out[key] = true
		return nil
	})
	if err != nil {
		t.Fatalf("walk the router: %v", err)
	}
	return out
}

func sortedRouteKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// specOperations are the operations of api/openapi.yaml, "METHOD /path".
func specOperations(t *testing.T) map[string]bool {
	t.Helper()
	doc, err := apispec.Load()
	if err != nil {
		t.Fatal(err)
	}
	ops := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			ops[strings.ToUpper(method)+" "+path] = true
		}
	}
	return ops
}

// TestRoutesMatchSpec proves the router and api/openapi.yaml describe the
// same set of operations: every route is documented, and every documented
// operation is routed.
func TestRoutesMatchSpec(t *testing.T) {
	// New only wires the router; nothing it is given is called until a
	// request comes, so no store, service or pool is needed to walk it.
	s := New(Config{}, nil, nil, nil, nil, nil, nil)
	t.Cleanup(s.Close)
	routed := routerRoutes(t, s.Router())

	documented := specOperations(t)

	var missing, extra []string
	for _, k := range sortedRouteKeys(routed) {
		if !documented[k] {
			missing = append(missing, k)
		}
	}
	for _, k := range sortedRouteKeys(documented) {
		if !routed[k] {
			extra = append(extra, k)
		}
	}
	if len(missing) > 0 {
		t.Errorf("routed but not in api/openapi.yaml:\n\t%s", strings.Join(missing, "\n\t"))
	}
	if len(extra) > 0 {
		t.Errorf("in api/openapi.yaml but not routed:\n\t%s", strings.Join(extra, "\n\t"))
	}
	if len(routed) < 30 {
		t.Errorf("only %d routes walked; is the router wired?", len(routed))
	}
	t.Logf("%d routes, %d documented operations", len(routed), len(documented))
}

func TestNormalizeRoute(t *testing.T) {
	for in, want := range map[string]string{
		"/":                                   "/",
		"/v1/vms":                             "/v1/vms",
		"/v1/vms/{vm}/":                       "/v1/vms/{vm}",
		"/v1/vms/{vm}/processes/{pid:[0-9]+}": "/v1/vms/{vm}/processes/{pid}",
		"/v1/tenants/{tenant}/keys/{key}":     "/v1/tenants/{tenant}/keys/{key}",
	} {
		if got := normalizeRoute(in); got != want {
			t.Errorf("normalizeRoute(%q) = %q, want %q", in, got, want)
		}
	}
}
