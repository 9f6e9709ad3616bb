// Command bundle rebuilds the web console's dist/ from its sources (run by
// `go generate ./web` from the web directory).
package main

import (
	"fmt"
	"os"

	"github.com/agentos-gateway/agentos-gateway/web/bundle"
)

func main() {
	if err := bundle.Build(".", "dist"); err != nil {
		fmt.Fprintln(os.Stderr, "bundle:", err)
		os.Exit(1)
	}
}
