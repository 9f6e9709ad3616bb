// Package web holds the gateway's web console: its sources in src/ and the
// bundle built from them in dist/, which the gateway embeds and serves at /.
//
// dist/ is committed, so that `go build ./...` needs no Node.js and no build
// step; `go generate ./web` rebuilds it after a change to src/ (see
// bundle.Build), and a test fails when it is stale.
package web

import (
	"embed"
	"io/fs"
)

//go:generate go run ./cmd/bundle

//go:embed dist
var dist embed.FS

// Dist is the built console: index.html at its root and content-hashed
// assets under assets/.
func Dist() fs.FS {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		// fs.Sub fails only on an invalid path, and "dist" is valid.
		panic(err)
	}
	return sub
}
