package bundle

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// webDir is the console's directory, the parent of this package.
const webDir = ".."

// TestCommittedBundleIsCurrent rebuilds the console and fails when web/dist
// differs from what the sources make: run `go generate ./web` and commit.
func TestCommittedBundleIsCurrent(t *testing.T) {
	built, err := Bundle(webDir)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	if err := Build(webDir, tmp); err != nil {
		t.Fatal(err)
	}
	committed := readTree(t, filepath.Join(webDir, "dist"))
	written := readTree(t, tmp)
	for _, tree := range []map[string][]byte{committed, written} {
		if got, want := sortedNames(tree), sortedNames(built); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("files %v, the sources build %v: run `go generate ./web` and commit web/dist", got, want)
		}
		for name, data := range built {
			if !bytes.Equal(tree[name], data) {
				t.Errorf("%s differs from what the sources build: run `go generate ./web` and commit web/dist", name)
			}
		}
	}
}

// budget is the most compressed JavaScript and CSS the first load may
// fetch, the terminal and the editor included.
const budget = 400 << 10

// TestFirstLoadBudget holds the gzip-compressed size of every script and
// stylesheet index.html loads to the budget.
func TestFirstLoadBudget(t *testing.T) {
	files, err := Bundle(webDir)
	if err != nil {
		t.Fatal(err)
	}
	page := string(files["index.html"])
	total, loaded := 0, 0
	for name, data := range files {
		if !strings.HasSuffix(name, ".js") && !strings.HasSuffix(name, ".css") {
			continue
		}
		if !strings.Contains(page, `"/`+name+`"`) {
			t.Errorf("index.html does not load %s", name)
			continue
		}
		loaded++
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		_, _ = zw.Write(data)
		_ = zw.Close()
		t.Logf("%s: %d bytes, %d gzip-compressed", name, len(data), buf.Len())
		total += buf.Len()
	}
	if loaded < 2 {
		t.Fatalf("index.html loads %d scripts and stylesheets, want the script and the stylesheet", loaded)
	}
	if total > budget {
		t.Errorf("the first load is %d bytes compressed, over the budget of %d", total, budget)
	}
}

func readTree(t *testing.T, root string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		b, err := os.ReadFile(p)
		out[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sortedNames(m map[string][]byte) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
