package apispec

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestJSONStructs(t *testing.T) {
	for _, c := range []struct {
		name string
		src  string
		want []string
	}{
		{"named", "package p\n\ntype A struct {\n\tX int `json:\"x\"`\n}\n", []string{"A"}},
		{"unexported", "package p\n\ntype a struct {\n\tX int `json:\"x,omitempty\"`\n}\n", []string{"a"}},
		{"anonymous", "package p\n\nvar v = struct {\n\tX int `json:\"x\"`\n}{}\n", []string{""}},
		{"nested anonymous", "package p\n\ntype A struct {\n\tB struct {\n\t\tX int `json:\"x\"`\n\t}\n}\n", []string{""}},
		{"other tags only", "package p\n\ntype A struct {\n\tX int `yaml:\"x\"`\n}\n", nil},
		{"no tags", "package p\n\ntype A struct{ X int }\n", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(c.src), 0o600); err != nil {
				t.Fatal(err)
			}
			// A test file's structs are not the package's shapes.
			if err := os.WriteFile(filepath.Join(dir, "p_test.go"), []byte("package p\n\ntype T struct {\n\tX int `json:\"x\"`\n}\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, st := range JSONStructs(t, dir) {
				got = append(got, st.Name)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("JSONStructs = %q, want %q", got, c.want)
			}
		})
	}
}
