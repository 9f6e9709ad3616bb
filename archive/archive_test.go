package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io/fs"
	"maps"
	"strings"
	"testing"
	"time"
)

// entry is one tar entry of a test archive.
type entry struct {
	name, link string
	typ        byte
	body       string
	size       int64 // when set, a header claiming this size (and no body)
	mode       int64
}

func tarOf(t testing.TB, es ...entry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	claimed := false
	for _, e := range es {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode, Size: int64(len(e.body)), ModTime: time.Unix(1_600_000_000, 0)}
		switch {
		case e.typ == tar.TypeXGlobalHeader:
			h = &tar.Header{Typeflag: tar.TypeXGlobalHeader, PAXRecords: map[string]string{"comment": "global"}}
		case e.typ == 0:
			h.Typeflag = tar.TypeReg
		case e.typ != tar.TypeReg:
			h.Size = 0
		}
		if h.Mode == 0 && e.typ != tar.TypeXGlobalHeader {
			h.Mode = 0o644
		}
		if e.size > 0 {
			h.Size, claimed = e.size, true
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.size == 0 {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if claimed {
		// A header claiming a size and no body is what a truncated or
		// hostile archive looks like; the writer would refuse to close it.
		return b.Bytes()
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

const (
	target  = "/t/x"
	outside = "/t/outside"
)

func hostileFS() *memFS {
	m := newMemFS(target, outside)
	data := []byte("secret")
	m.nodes["/t/outside/secret"] = &memNode{mode: 0o600, data: &data}
	return m
}

func TestExtract(t *testing.T) {
	ctx := context.Background()
	m := hostileFS()
	arch := tarOf(t,
		entry{name: "dir/", typ: tar.TypeDir, mode: 0o750},
		entry{name: "dir/a.txt", body: "alpha", mode: 0o600},
		entry{name: "./implicit/parents/b.txt", body: "beta"},
		entry{name: "dir/link", typ: tar.TypeSymlink, link: "a.txt"},
		entry{name: "up", typ: tar.TypeSymlink, link: "dir/../dir/a.txt"},
		entry{name: "implicit/parents/rel", typ: tar.TypeSymlink, link: "../../dir"},
		entry{name: "hard", typ: tar.TypeLink, link: "dir/a.txt"},
		entry{name: "empty/", typ: tar.TypeDir},
		entry{name: "pax", typ: tar.TypeXGlobalHeader},
	)
	st, err := Extract(ctx, bytes.NewReader(arch), m, target, Limits{MaxBytes: 1 << 20, MaxEntries: 100})
	if err == nil {
		t.Fatalf("a symlink target with .. after a name must be refused, got %+v", st)
	}
	var ee *EntryError
	if !errors.As(err, &ee) || ee.Name != "up" || !errors.Is(err, ErrUnsafe) {
		t.Fatalf("err = %v", err)
	}

	m = hostileFS()
	arch = tarOf(t,
		entry{name: "dir/", typ: tar.TypeDir, mode: 0o750},
		entry{name: "dir/a.txt", body: "alpha", mode: 0o600},
		entry{name: "./implicit/parents/b.txt", body: "beta"},
		entry{name: "dir/link", typ: tar.TypeSymlink, link: "a.txt"},
		entry{name: "implicit/parents/rel", typ: tar.TypeSymlink, link: "../../dir"},
		entry{name: "hard", typ: tar.TypeLink, link: "dir/a.txt"},
		entry{name: "empty/", typ: tar.TypeDir},
		entry{name: "./", typ: tar.TypeDir},
	)
	before := m.snapshot(target)
	st, err = Extract(ctx, bytes.NewReader(arch), m, target, Limits{MaxBytes: 1 << 20, MaxEntries: 100})
	if err != nil {
		t.Fatal(err)
	}
	if want := (Stats{Files: 3, Dirs: 2, Symlinks: 2, Bytes: 9}); st != want {
		t.Fatalf("stats %+v, want %+v", st, want)
	}
	if !maps.Equal(before, m.snapshot(target)) {
		t.Fatal("something outside the target changed")
	}
	for name, want := range map[string]string{"dir/a.txt": "alpha", "implicit/parents/b.txt": "beta", "dir/link": "alpha", "hard": "alpha", "implicit/parents/rel/a.txt": "alpha"} {
		var b bytes.Buffer
		if _, err := m.ReadFile(ctx, target+"/"+name, &b); err != nil || b.String() != want {
			t.Errorf("%s = %q, %v; want %q", name, b.String(), err, want)
		}
	}
	if info, _ := m.Lstat(ctx, target+"/dir"); info.Mode != fs.ModeDir|0o750 || !info.ModTime.Equal(time.Unix(1_600_000_000, 0)) {
		t.Errorf("dir: %v %v", info.Mode, info.ModTime)
	}
	if info, _ := m.Lstat(ctx, target+"/dir/a.txt"); info.Mode != 0o600 {
		t.Errorf("dir/a.txt: %v", info.Mode)
	}
}

func TestExtractRefuses(t *testing.T) {
	tests := []struct {
		name    string
		entries []entry
		lim     Limits
		want    error
		entry   string // the refused entry, for EntryErrors
	}{
		{"dot-dot", []entry{{name: "a/../../outside/secret", body: "x"}}, Limits{}, ErrUnsafe, "a/../../outside/secret"},
		{"dot-dot at the end", []entry{{name: "..", typ: tar.TypeDir}}, Limits{}, ErrUnsafe, ".."},
		{"absolute", []entry{{name: "/t/outside/secret", body: "x"}}, Limits{}, ErrUnsafe, "/t/outside/secret"},
		{"symlink absolute", []entry{{name: "l", typ: tar.TypeSymlink, link: "/t/outside"}}, Limits{}, ErrUnsafe, "l"},
		{"symlink climbing out", []entry{{name: "d/l", typ: tar.TypeSymlink, link: "../../outside"}}, Limits{}, ErrUnsafe, "d/l"},
		{"symlink dot-dot after a name", []entry{{name: "l", typ: tar.TypeSymlink, link: "d/../../outside"}}, Limits{}, ErrUnsafe, "l"},
		{"file through an extracted symlink", []entry{
			{name: "l", typ: tar.TypeSymlink, link: "."},
			{name: "l/secret", body: "x"},
		}, Limits{}, ErrUnsafe, "l/secret"},
		{"file over an extracted symlink", []entry{
			{name: "l", typ: tar.TypeSymlink, link: "f"},
			{name: "l", body: "x"},
		}, Limits{}, ErrUnsafe, "l"},
		{"hard link out", []entry{{name: "h", typ: tar.TypeLink, link: "../outside/secret"}}, Limits{}, ErrUnsafe, "h"},
		{"hard link absolute", []entry{{name: "h", typ: tar.TypeLink, link: "/t/outside/secret"}}, Limits{}, ErrUnsafe, "h"},
		{"hard link to a symlink", []entry{
			{name: "l", typ: tar.TypeSymlink, link: "x"},
			{name: "h", typ: tar.TypeLink, link: "l"},
		}, Limits{}, ErrUnsafe, "h"},
		{"hard link to nothing extracted", []entry{{name: "h", typ: tar.TypeLink, link: "missing"}}, Limits{}, ErrUnsafe, "h"},
		{"fifo", []entry{{name: "f", typ: tar.TypeFifo}}, Limits{}, ErrUnsupported, "f"},
		{"device", []entry{{name: "d", typ: tar.TypeChar}}, Limits{}, ErrUnsupported, "d"},
		{"file is the target", []entry{{name: ".", body: "x"}}, Limits{}, ErrUnsafe, "."},
		{"too large at once", []entry{{name: "big", size: 1 << 40}}, Limits{MaxBytes: 1 << 20}, ErrTooLarge, ""},
		{"too large in sum", []entry{{name: "a", body: strings.Repeat("a", 600)}, {name: "b", body: strings.Repeat("b", 600)}}, Limits{MaxBytes: 1000}, ErrTooLarge, ""},
		{"too many entries", []entry{{name: "a/", typ: tar.TypeDir}, {name: "b/", typ: tar.TypeDir}, {name: "c/", typ: tar.TypeDir}}, Limits{MaxEntries: 2}, ErrTooManyEntries, ""},
		{"truncated", []entry{{name: "short", size: 5000}}, Limits{}, ErrMalformed, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := hostileFS()
			before := m.snapshot(target)
			_, err := Extract(context.Background(), bytes.NewReader(tarOf(t, tc.entries...)), m, target, tc.lim)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			var ee *EntryError
			if tc.entry != "" && (!errors.As(err, &ee) || ee.Name != tc.entry) {
				t.Fatalf("err = %v, want the entry %q named", err, tc.entry)
			}
			if !maps.Equal(before, m.snapshot(target)) {
				t.Fatal("something outside the target changed")
			}
		})
	}
}

func TestExtractNotTar(t *testing.T) {
	_, err := Extract(context.Background(), strings.NewReader(strings.Repeat("not a tar archive ", 100)), hostileFS(), target, Limits{})
	if !errors.Is(err, ErrMalformed) {
		t.Fatalf("err = %v", err)
	}
}

// TestWriteRoundTrip writes a tree as tar and extracts it elsewhere: every
// entry comes back with its content, mode and time, and the special file is
// left out.
func TestWriteRoundTrip(t *testing.T) {
	ctx := context.Background()
	m := newMemFS("/src/tree/empty", "/src/tree/sub/deeper", "/dst")
	mt := time.Unix(1_700_000_000, 0)
	for name, body := range map[string]string{"/src/tree/a.txt": "alpha", "/src/tree/sub/b.bin": "\x00\x01\xff", "/src/tree/sub/deeper/c": ""} {
		data := []byte(body)
		m.nodes[name] = &memNode{mode: 0o640, data: &data, mtime: mt}
	}
	m.nodes["/src/tree/sub/link"] = &memNode{mode: fs.ModeSymlink | 0o777, target: "../a.txt"}
	m.nodes["/src/tree/fifo"] = &memNode{mode: fs.ModeNamedPipe | 0o644}
	for _, d := range []string{"/src/tree", "/src/tree/empty", "/src/tree/sub", "/src/tree/sub/deeper"} {
		m.nodes[d].mtime = mt
	}
	m.nodes["/src/tree/sub"].mode = fs.ModeDir | 0o700

	var b bytes.Buffer
	if err := Write(ctx, &b, m, "/src/tree"); err != nil {
		t.Fatal(err)
	}
	st, err := Extract(ctx, bytes.NewReader(b.Bytes()), m, "/dst", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if want := (Stats{Files: 3, Dirs: 3, Symlinks: 1, Bytes: 8}); st != want {
		t.Fatalf("stats %+v, want %+v", st, want)
	}
	for _, rel := range []string{"a.txt", "sub", "sub/b.bin", "sub/deeper", "sub/deeper/c", "sub/link", "empty"} {
		src, dst := m.nodes["/src/tree/"+rel], m.nodes["/dst/"+rel]
		if dst == nil {
			t.Fatalf("%s was not extracted", rel)
		}
		if src.mode != dst.mode || src.target != dst.target || (src.data != nil && string(*src.data) != string(*dst.data)) {
			t.Errorf("%s: %v %q, want %v %q", rel, dst.mode, dst.target, src.mode, src.target)
		}
		if src.mode.Type() != fs.ModeSymlink && !src.mtime.Equal(dst.mtime) {
			t.Errorf("%s: mtime %v, want %v", rel, dst.mtime, src.mtime)
		}
	}
	if m.nodes["/dst/fifo"] != nil {
		t.Error("the fifo was archived")
	}

	// A single file is one entry named after it.
	b.Reset()
	if err := Write(ctx, &b, m, "/src/tree/a.txt"); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&b)
	h, err := tr.Next()
	if err != nil || h.Name != "a.txt" || h.Size != 5 {
		t.Fatalf("single file: %+v %v", h, err)
	}
}

// FuzzExtract feeds arbitrary bytes to Extract over the in-memory
// filesystem: it must never panic, never change anything outside the
// target, and never write more than the limits allow.
func FuzzExtract(f *testing.F) {
	f.Add(tarOf(f, entry{name: "a/", typ: tar.TypeDir}, entry{name: "a/b", body: "hello"}))
	f.Add(tarOf(f, entry{name: "l", typ: tar.TypeSymlink, link: "."}, entry{name: "l/x", body: "x"}))
	f.Add(tarOf(f, entry{name: "d/l", typ: tar.TypeSymlink, link: "../../outside"}, entry{name: "d/l/secret", body: "x"}))
	f.Add(tarOf(f, entry{name: "d/e/l", typ: tar.TypeSymlink, link: "../.."}, entry{name: "x", typ: tar.TypeSymlink, link: "d/e/l/.."}))
	f.Add(tarOf(f, entry{name: "f", body: "x"}, entry{name: "h", typ: tar.TypeLink, link: "f"}, entry{name: "h2", typ: tar.TypeLink, link: "../outside/secret"}))
	f.Add(tarOf(f, entry{name: "../x", body: "x"}))
	f.Add(tarOf(f, entry{name: "big", size: 1 << 30}))
	f.Add([]byte("garbage"))
	const maxBytes, maxEntries = 1 << 16, 64
	f.Fuzz(func(t *testing.T, data []byte) {
		m := hostileFS()
		before := m.snapshot(target)
		st, err := Extract(context.Background(), bytes.NewReader(data), m, target, Limits{MaxBytes: maxBytes, MaxEntries: maxEntries})
		if !maps.Equal(before, m.snapshot(target)) {
			t.Fatalf("something outside the target changed (err %v)", err)
		}
		if st.Bytes > maxBytes || st.Files+st.Dirs+st.Symlinks > maxEntries {
			t.Fatalf("stats %+v over the limits", st)
		}
		var total int64
		seen := map[*[]byte]bool{}
		for p, n := range m.nodes {
			if strings.HasPrefix(p, target+"/") && n.data != nil && !seen[n.data] {
				seen[n.data] = true
				total += int64(len(*n.data))
			}
		}
		if total > maxBytes {
			t.Fatalf("%d bytes written, over %d", total, maxBytes)
		}
	})
}
