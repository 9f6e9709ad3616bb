package handlers

import (
	"testing"

	"github.com/agentos-gateway/agentos-gateway/internal/apispec"
)

// The handlers define no JSON shape of their own, named or anonymous: every
// body, event and frame they read or write is a type of package api or of
// the root package, where it is held against the spec (api/types_test.go).
func TestHandlersDefineNoWireShapes(t *testing.T) {
	for _, st := range apispec.JSONStructs(t, ".") {
		what := "an anonymous struct"
		if st.Name != "" {
			what = "struct " + st.Name
		}
		t.Errorf("%s: %s has JSON tags; wire shapes belong in package api (or the root package)", st.Pos, what)
	}
}
