package apispec

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// JSONStruct is a struct type with a json-tagged field, found in a
// package's source.
type JSONStruct struct {
	// Name is the type's name; empty for an anonymous struct.
	Name string
	Pos  token.Position
}

// JSONStructs returns the struct types, named and anonymous, of the non-test
// Go files in dir that have a field with a json tag, so that a test can hold
// every wire shape of a package against the spec (or forbid them). It fails
// t when dir holds no Go file, so that a scan of the wrong folder cannot pass.
func JSONStructs(t testing.TB, dir string) []JSONStruct {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []JSONStruct
	fset := token.NewFileSet()
	read := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		read++
		named := map[*ast.StructType]string{}
		ast.Inspect(file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.TypeSpec:
				if st, ok := n.Type.(*ast.StructType); ok {
					named[st] = n.Name.Name
				}
			case *ast.StructType:
				for _, field := range n.Fields.List {
					if field.Tag != nil && strings.Contains(field.Tag.Value, `json:"`) {
						out = append(out, JSONStruct{Name: named[n], Pos: fset.Position(n.Pos())})
						break
					}
				}
			}
			return true
		})
	}
	if read == 0 {
		t.Fatalf("no Go files in %s", dir)
	}
	return out
}
