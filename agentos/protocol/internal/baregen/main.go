// Command baregen generates Go types and BARE codecs from a BARE schema.
//
// Usage (see ../../generate.go):
//
//	go run ./internal/baregen -schema schema.bare -out zz_generated.go
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/agentos-gateway/agentos-gateway/agentos/protocol/internal/baregen/gen"
)

func main() {
	schema := flag.String("schema", "schema.bare", "BARE schema to read")
	out := flag.String("out", "zz_generated.go", "Go file to write")
	pkg := flag.String("package", "protocol", "package name of the generated file")
	flag.Parse()

	src, err := os.ReadFile(*schema)
	if err != nil {
		fail(err)
	}
	code, err := gen.Generate(src, gen.Options{Package: *pkg, Source: filepath.Base(*schema)})
	if err != nil {
		fail(fmt.Errorf("%s: %w", *schema, err))
	}
	if err := os.WriteFile(*out, code, 0o644); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "baregen:", err)
	os.Exit(1)
}
