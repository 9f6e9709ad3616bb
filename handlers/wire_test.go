package handlers

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// The handlers define no JSON shape of their own, named or anonymous: every
// body, event and frame they read or write is a type of package api or of
// the root package, where it is held against the spec (api/types_test.go).
func TestHandlersDefineNoWireShapes(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
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
		ast.Inspect(file, func(n ast.Node) bool {
			st, ok := n.(*ast.StructType)
			if !ok {
				return true
			}
			for _, field := range st.Fields.List {
				if field.Tag != nil && strings.Contains(field.Tag.Value, `json:"`) {
					t.Errorf("%s: a struct with JSON tags; wire shapes belong in package api (or the root package)", fset.Position(st.Pos()))
					break
				}
			}
			return true
		})
	}
	if read == 0 {
		t.Fatal("no Go files read")
	}
}
