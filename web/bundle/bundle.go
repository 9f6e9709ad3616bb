// Package bundle builds the web console: esbuild bundles src/main.js (with
// xterm.js, CodeMirror and their CSS from node_modules, and the TypeScript
// SDK from its sources in ../sdk/typescript/src, which esbuild compiles
// itself) into content-hashed assets, and index.html is written to load them.
package bundle

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/evanw/esbuild/pkg/api"
)

// assetsPlaceholder is replaced in src/index.html by the tags that load the
// bundle's assets.
const assetsPlaceholder = "<!-- assets -->"

// Build bundles the console whose package.json and src/ are in webDir into
// outDir, replacing what outDir held. It needs webDir/node_modules (npm ci).
func Build(webDir, outDir string) error {
	files, err := Bundle(webDir)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(outDir); err != nil {
		return fmt.Errorf("clear %s: %w", outDir, err)
	}
	for name, data := range files {
		p := filepath.Join(outDir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("create %s: %w", filepath.Dir(p), err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
	}
	return nil
}

// Bundle builds the console in memory and returns its files by slash path
// relative to the output root: index.html and assets/*.
func Bundle(webDir string) (map[string][]byte, error) {
	abs, err := filepath.Abs(webDir)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", webDir, err)
	}
	if _, err := os.Stat(filepath.Join(abs, "node_modules")); err != nil {
		return nil, fmt.Errorf("%s has no node_modules: run `make setup` (npm ci in web/): %w", abs, err)
	}
	out := filepath.Join(abs, "dist")
	res := api.Build(api.BuildOptions{
		AbsWorkingDir:     abs,
		EntryPoints:       []string{"src/main.js"},
		Bundle:            true,
		Write:             false,
		Outdir:            out,
		EntryNames:        "assets/[name]-[hash]",
		AssetNames:        "assets/[name]-[hash]",
		Format:            api.FormatESModule,
		Target:            api.ES2020,
		Platform:          api.PlatformBrowser,
		MinifyWhitespace:  true,
		MinifyIdentifiers: true,
		MinifySyntax:      true,
		LegalComments:     api.LegalCommentsLinked,
		Charset:           api.CharsetUTF8,
		LogLevel:          api.LogLevelSilent,
	})
	if len(res.Errors) > 0 {
		msgs := api.FormatMessages(res.Errors, api.FormatMessagesOptions{Kind: api.ErrorMessage})
		return nil, errors.New("esbuild: " + strings.Join(msgs, "\n"))
	}
	files := map[string][]byte{}
	var tags []string
	for _, f := range res.OutputFiles {
		rel, err := filepath.Rel(out, f.Path)
		if err != nil {
			return nil, fmt.Errorf("output %s: %w", f.Path, err)
		}
		rel = filepath.ToSlash(rel)
		files[rel] = f.Contents
		switch {
		case strings.HasSuffix(rel, ".js"):
			tags = append(tags, `<script type="module" src="/`+rel+`"></script>`)
		case strings.HasSuffix(rel, ".css"):
			tags = append(tags, `<link rel="stylesheet" href="/`+rel+`">`)
		}
	}
	// Stylesheets first, then the script; each kind in name order, so the
	// page is the same from build to build.
	sort.Slice(tags, func(i, j int) bool {
		ci, cj := strings.HasPrefix(tags[i], "<link"), strings.HasPrefix(tags[j], "<link")
		if ci != cj {
			return ci
		}
		return tags[i] < tags[j]
	})
	page, err := os.ReadFile(filepath.Join(abs, "src", "index.html"))
	if err != nil {
		return nil, fmt.Errorf("read the page: %w", err)
	}
	if !strings.Contains(string(page), assetsPlaceholder) {
		return nil, fmt.Errorf("src/index.html has no %q", assetsPlaceholder)
	}
	files["index.html"] = []byte(strings.Replace(string(page), assetsPlaceholder, strings.Join(tags, "\n    "), 1))
	return files, nil
}
