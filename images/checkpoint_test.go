package images

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

// layerEntry is one entry of a test layer: a directory (name ends with /),
// a symlink (target set) or a file.
type testEntry struct {
	name, content, target string
}

// testLayer writes a checkpoint layer as writeLayer does: the deleted
// paths in a global header, then the entries.
func testLayer(t testing.TB, deleted []string, entries ...testEntry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if len(deleted) > 0 {
		list, _ := json.Marshal(deleted)
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "pax_global_header",
			PAXRecords: map[string]string{deletedRecord: string(list)}, Format: tar.FormatPAX}); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Mode: 0o644, Format: tar.FormatPAX}
		switch {
		case strings.HasSuffix(e.name, "/"):
			hdr.Typeflag, hdr.Mode = tar.TypeDir, 0o755
		case e.target != "":
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, e.target
		default:
			hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(e.content))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// readTar lists a tar as "name" for directories, "name->target" for
// symlinks and "name=content" for files, in its order.
func readTar(t testing.TB, b []byte) []string {
	t.Helper()
	var out []string
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			out = append(out, hdr.Name)
		case tar.TypeSymlink:
			out = append(out, hdr.Name+"->"+hdr.Linkname)
		default:
			data, _ := io.ReadAll(tr)
			out = append(out, hdr.Name+"="+string(data))
		}
	}
}

// TestMergeLayers: a restore takes each path from the newest layer that has
// it, drops what a later layer deleted (a directory with everything below
// it, but not a sibling whose name starts alike), keeps what was created
// again after a deletion, and writes each parent before its children.
func TestMergeLayers(t *testing.T) {
	base := testLayer(t, nil,
		testEntry{name: "etc/"}, testEntry{name: "etc/hosts", content: "base"},
		testEntry{name: "workspace/"}, testEntry{name: "workspace/a.txt", content: "a1"},
		testEntry{name: "workspace/src/"}, testEntry{name: "workspace/src/main.go", content: "package main"},
		testEntry{name: "workspace/src-old/"}, testEntry{name: "workspace/src-old/x", content: "x"},
		testEntry{name: "workspace/link", target: "a.txt"})
	for _, tc := range []struct {
		name   string
		layers [][]byte
		want   []string
	}{
		{"base alone", [][]byte{base}, []string{"etc/", "etc/hosts=base", "workspace/", "workspace/a.txt=a1", "workspace/link->a.txt",
			"workspace/src/", "workspace/src-old/", "workspace/src-old/x=x", "workspace/src/main.go=package main"}},
		{"changes and a deleted tree", [][]byte{base,
			testLayer(t, nil, testEntry{name: "workspace/a.txt", content: "a2"}, testEntry{name: "workspace/b.txt", content: "b"}),
			testLayer(t, []string{"/workspace/src", "/workspace/link"}, testEntry{name: "etc/hosts", content: "edited"}),
		}, []string{"etc/", "etc/hosts=edited", "workspace/", "workspace/a.txt=a2", "workspace/b.txt=b",
			"workspace/src-old/", "workspace/src-old/x=x"}},
		{"deleted then made again", [][]byte{base,
			testLayer(t, []string{"/workspace/src"}),
			testLayer(t, nil, testEntry{name: "workspace/src/"}, testEntry{name: "workspace/src/new.go", content: "new"}),
		}, []string{"etc/", "etc/hosts=base", "workspace/", "workspace/a.txt=a1", "workspace/link->a.txt",
			"workspace/src/", "workspace/src-old/", "workspace/src-old/x=x", "workspace/src/new.go=new"}},
		{"a file replaced by a directory", [][]byte{base,
			testLayer(t, []string{"/workspace/a.txt"}, testEntry{name: "workspace/a.txt/"}, testEntry{name: "workspace/a.txt/inner", content: "i"}),
		}, []string{"etc/", "etc/hosts=base", "workspace/", "workspace/a.txt/", "workspace/a.txt/inner=i", "workspace/link->a.txt",
			"workspace/src/", "workspace/src-old/", "workspace/src-old/x=x", "workspace/src/main.go=package main"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rs []io.ReadSeeker
			for _, l := range tc.layers {
				rs = append(rs, bytes.NewReader(l))
			}
			var out bytes.Buffer
			if err := mergeLayers(&out, rs); err != nil {
				t.Fatal(err)
			}
			got := readTar(t, out.Bytes())
			if !slices.Equal(got, tc.want) {
				t.Fatalf("merged:\n got %q\nwant %q", got, tc.want)
			}
			// The merged tar is a snapshot a wake reads.
			if _, err := readRoot(bytes.NewReader(out.Bytes())); err != nil {
				t.Fatalf("readRoot: %v", err)
			}
		})
	}
	t.Run("an entry outside the root", func(t *testing.T) {
		bad := testLayer(t, nil, testEntry{name: "../escape", content: "x"})
		if err := mergeLayers(io.Discard, []io.ReadSeeker{bytes.NewReader(bad)}); err == nil {
			t.Fatal("a layer with ../escape was merged")
		}
	})
}

// TestDiffManifests: what a checkpoint stores and deletes, from two stamps
// of the tree; stamps that share neither a hash nor a modification time
// count as changed.
func TestDiffManifests(t *testing.T) {
	t0 := time.Unix(1000, 0)
	file := func(size int64, mtime time.Time) stamp {
		return stamp{kind: tar.TypeReg, perm: 0o644, hasOwner: true, size: size, mtime: mtime}
	}
	dir := stamp{kind: tar.TypeDir, perm: 0o755, hasOwner: true}
	hashed := stamp{kind: tar.TypeReg, perm: 0o644, hasOwner: true, size: 3, hasSum: true, sum: [32]byte{1}}
	old := manifest{"/w": dir, "/w/a": file(3, t0), "/w/b": file(3, t0), "/w/gone": dir, "/w/gone/x": file(1, t0),
		"/w/h": hashed, "/w/mode": file(1, t0)}
	mode := file(1, t0)
	mode.perm = 0o755
	cur := manifest{"/w": dir, "/w/a": file(3, t0), "/w/b": file(3, t0.Add(time.Millisecond)), "/w/new": file(0, t0),
		"/w/h": file(3, t0), "/w/mode": mode}
	changed, deleted := diffManifests(old, cur, nil)
	if want := []string{"/w/b", "/w/h", "/w/mode", "/w/new"}; !slices.Equal(changed, want) {
		t.Errorf("changed %q, want %q", changed, want)
	}
	if want := []string{"/w/gone"}; !slices.Equal(deleted, want) {
		t.Errorf("deleted %q, want %q", deleted, want)
	}
	changed, deleted = diffManifests(old, cur, func(p string) bool { return p == "/w/b" })
	if !slices.Equal(changed, []string{"/w/b"}) || len(deleted) != 0 {
		t.Errorf("within /w/b: changed %q, deleted %q", changed, deleted)
	}
	// The guest's find knows no owner nor change time: its stamp of an
	// untouched file is the stat's, and a touched one differs.
	found := file(3, t0)
	found.hasOwner, found.perm = false, 0o777
	statted := file(3, t0)
	statted.ctime = t0.Add(time.Second)
	if !found.same(statted) || !statted.same(found) {
		t.Error("find's stamp of an untouched file differs from the stat's")
	}
	if found.same(file(3, t0.Add(time.Millisecond))) {
		t.Error("find's stamp of a touched file is the same")
	}
}

// FuzzMergeLayers: whatever bytes a stored layer holds, a merge returns an
// error or a tar that reads to its end, each path once, and never panics.
func FuzzMergeLayers(f *testing.F) {
	f.Add(testLayer(f, nil, testEntry{name: "a/"}, testEntry{name: "a/b", content: "x"}), testLayer(f, []string{"/a/b"}))
	f.Add([]byte("not a tar"), []byte{})
	f.Fuzz(func(t *testing.T, a, b []byte) {
		var out bytes.Buffer
		if err := mergeLayers(&out, []io.ReadSeeker{bytes.NewReader(a), bytes.NewReader(b)}); err != nil {
			return
		}
		tr := tar.NewReader(&out)
		seen := map[string]bool{}
		for {
			hdr, err := tr.Next()
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				t.Fatalf("the merged tar does not read: %v", err)
			}
			name := strings.TrimSuffix(hdr.Name, "/")
			if seen[name] {
				t.Fatalf("%s is twice in the merged tar", name)
			}
			seen[name] = true
			if _, err := io.Copy(io.Discard, tr); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
	})
}
