package agentos

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"path"
	"slices"
	"testing"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

func TestCheckPath(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"/workspace/a.txt", "/workspace/a.txt", true},
		{"/workspace//x/./y/", "/workspace/x/y", true},
		{"/", "/", true},
		{"relative", "", false},
		{"", "", false},
		{"/workspace/../etc", "", false},
		{"/a\x00b", "", false},
	}
	for _, tc := range tests {
		got, err := CheckPath(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("CheckPath(%q) = %q, %v", tc.in, got, err)
		}
		if err != nil && !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("CheckPath(%q) error %v is not ErrInvalidArgument", tc.in, err)
		}
	}
}

func TestFilesystem(t *testing.T) {
	vm := newVM(t, VMOptions{})
	ctx := testContext(t, 120*time.Second)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// Text and binary content round-trip.
	must(vm.WriteFile(ctx, "/workspace/a.txt", []byte("hello\n")))
	binary := []byte{0, 1, 2, 0xff, 0xfe, '\n'}
	must(vm.WriteFile(ctx, "/workspace/b.bin", binary))
	for p, want := range map[string][]byte{"/workspace/a.txt": []byte("hello\n"), "/workspace/b.bin": binary} {
		got, err := vm.ReadFile(ctx, p)
		must(err)
		if !bytes.Equal(got, want) {
			t.Fatalf("%s = %q, want %q", p, got, want)
		}
	}
	// The guest sees what the API wrote.
	r, err := vm.Exec(ctx, "cat /workspace/a.txt", ExecOptions{})
	must(err)
	if string(r.Stdout) != "hello\n" {
		t.Fatalf("guest cat = %q", r.Stdout)
	}

	must(vm.Mkdir(ctx, "/workspace/x/y/z", true))
	must(vm.WriteFile(ctx, "/workspace/x/y/z/n.txt", []byte("nested")))
	must(vm.Mkdir(ctx, "/workspace/x/skip", false))
	must(vm.WriteFile(ctx, "/workspace/x/skip/hidden.txt", []byte("h")))

	entries, err := vm.ReadDir(ctx, "/workspace")
	must(err)
	names := entryNames(entries)
	for _, want := range []string{"a.txt", "b.bin", "x"} {
		if !slices.Contains(names, want) {
			t.Fatalf("readdir = %v, missing %s", names, want)
		}
	}
	// A plain listing holds the directory's children only, with their
	// sizes.
	for _, e := range entries {
		if path.Dir(e.Path) != "/workspace" {
			t.Errorf("readdir of /workspace lists %s", e.Path)
		}
		if e.Name == "a.txt" && e.Size != int64(len("hello\n")) {
			t.Errorf("readdir gives a.txt the size %d", e.Size)
		}
	}
	all, err := vm.ReadDirRecursive(ctx, "/workspace/x", ReadDirOptions{})
	must(err)
	if !slices.Contains(entryPaths(all), "/workspace/x/y/z/n.txt") {
		t.Fatalf("recursive = %v", entryPaths(all))
	}
	shallow, err := vm.ReadDirRecursive(ctx, "/workspace/x", ReadDirOptions{MaxDepth: 1})
	must(err)
	if slices.Contains(entryPaths(shallow), "/workspace/x/y/z/n.txt") {
		t.Fatalf("maxDepth 1 = %v", entryPaths(shallow))
	}
	excl, err := vm.ReadDirRecursive(ctx, "/workspace/x", ReadDirOptions{Exclude: []string{"skip"}})
	must(err)
	for _, p := range entryPaths(excl) {
		if p == "/workspace/x/skip" || p == "/workspace/x/skip/hidden.txt" {
			t.Fatalf("exclude kept %s", p)
		}
	}
	if _, err := vm.ReadDirRecursive(ctx, "/workspace/x", ReadDirOptions{Exclude: []string{"["}}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("bad pattern: %v", err)
	}

	st, err := vm.Stat(ctx, "/workspace/a.txt")
	must(err)
	if st.Size != 6 || st.IsDir || st.ModTime.IsZero() {
		t.Fatalf("stat = %+v", st)
	}
	dst, err := vm.Stat(ctx, "/workspace/x")
	must(err)
	if !dst.IsDir || !dst.Mode.IsDir() {
		t.Fatalf("stat dir = %+v", dst)
	}

	must(vm.Symlink(ctx, "/workspace/a.txt", "/workspace/link"))
	target, err := vm.Readlink(ctx, "/workspace/link")
	must(err)
	if target != "/workspace/a.txt" {
		t.Fatalf("readlink = %q", target)
	}
	lst, err := vm.Lstat(ctx, "/workspace/link")
	must(err)
	if !lst.IsSymlink {
		t.Fatalf("lstat = %+v", lst)
	}

	must(vm.Chmod(ctx, "/workspace/a.txt", 0o600))
	st, err = vm.Stat(ctx, "/workspace/a.txt")
	must(err)
	if st.Mode.Perm() != 0o600 {
		t.Fatalf("mode after chmod = %v", st.Mode)
	}

	for p, want := range map[string]bool{"/workspace/a.txt": true, "/workspace/nope": false} {
		ok, err := vm.Exists(ctx, p)
		must(err)
		if ok != want {
			t.Fatalf("exists %s = %v", p, ok)
		}
	}
	must(vm.Move(ctx, "/workspace/a.txt", "/workspace/moved.txt"))
	if ok, _ := vm.Exists(ctx, "/workspace/a.txt"); ok {
		t.Fatal("source still exists after move")
	}
	if err := vm.Remove(ctx, "/workspace/x", false); err == nil {
		t.Fatal("non-recursive remove of a tree succeeded")
	}
	must(vm.Remove(ctx, "/workspace/x", true))
	if ok, _ := vm.Exists(ctx, "/workspace/x/y"); ok {
		t.Fatal("tree survived recursive remove")
	}

	_, err = vm.ReadFile(ctx, "/workspace/missing.txt")
	var rej *RejectedError
	if !errors.As(err, &rej) || !errors.Is(err, ErrNotFound) || rej.Errno != "ENOENT" {
		t.Fatalf("missing file: %v", err)
	}
	if _, err := vm.ReadFile(ctx, "workspace/rel"); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("relative path: %v", err)
	}

	entriesFS, err := vm.ExportRootFilesystem(ctx, 1<<30)
	must(err)
	if len(entriesFS) < 100 {
		t.Fatalf("export returned %d entries", len(entriesFS))
	}
	if _, err := vm.ExportRootFilesystem(ctx, 1024); err == nil {
		t.Fatal("export within 1 KiB succeeded")
	}
	_ = fs.ModeDir
}

// TestLargeFileRoundTrip moves 256 MiB each way through a VM in chunks,
// never holding the file whole, and checks the guest agrees on its size.
func TestLargeFileRoundTrip(t *testing.T) {
	if testing.Short() {
		t.Skip("256 MiB transfer")
	}
	// The default guest filesystem holds 64 MiB; the limit is a VM option.
	vm := newVM(t, VMOptions{Limits: map[string]any{"resources": map[string]any{"maxFilesystemBytes": 1 << 30}}})
	ctx := testContext(t, 300*time.Second)
	const size = 256 << 20
	src := io.LimitReader(rand.NewChaCha8([32]byte{7}), size)
	h := sha256.New()
	n, err := vm.WriteFileFrom(ctx, "/workspace/big.bin", io.TeeReader(src, h))
	if err != nil || n != size {
		t.Fatalf("write: %d, %v", n, err)
	}
	want := h.Sum(nil)
	r, err := vm.Exec(ctx, "wc -c /workspace/big.bin", ExecOptions{Timeout: time.Minute})
	if err != nil || !bytes.HasPrefix(r.Stdout, []byte("268435456")) {
		t.Fatalf("guest wc = %q, %v", r.Stdout, err)
	}
	h.Reset()
	n, err = vm.ReadFileTo(ctx, "/workspace/big.bin", h)
	if err != nil || n != size {
		t.Fatalf("read: %d, %v", n, err)
	}
	if !bytes.Equal(h.Sum(nil), want) {
		t.Fatal("sha256 differs after the round trip")
	}
	// The sidecar survived: one oversized request would have killed it.
	if err := vm.Sidecar().Err(); err != nil {
		t.Fatal(err)
	}
}

func entryNames(es []gateway.DirEntry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Name
	}
	return out
}

func entryPaths(es []gateway.DirEntry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Path
	}
	return out
}

// TestGuestDirectoriesWritable: after create every POSIX directory the
// official SDK guarantees exists, and the guest user (uid 1000) can write
// where it must: the bootstrap must not re-own existing directories.
func TestGuestDirectoriesWritable(t *testing.T) {
	vm := newVM(t, VMOptions{})
	ctx := testContext(t, 60*time.Second)
	for _, d := range posixDirs {
		if d == "/var/lock" || d == "/var/run" {
			// Relative symlinks in the base layer; on 0.2.21 every
			// filesystem call on them (even LSTAT) fails with EEXIST.
			continue
		}
		if _, err := vm.Stat(ctx, d); err != nil {
			t.Fatalf("%s: %v", d, err)
		}
	}
	for _, d := range []string{"/workspace", "/home/agentos", "/tmp"} {
		r, err := vm.Exec(ctx, "sh -c 'echo x > "+d+"/probe && cat "+d+"/probe'", ExecOptions{Timeout: 30 * time.Second})
		if err != nil || r.ExitCode != 0 || string(r.Stdout) != "x\n" {
			t.Fatalf("guest write in %s: %+v %v stderr=%q", d, r, err, r.Stderr)
		}
	}
	st, err := vm.Stat(ctx, "/tmp")
	if err != nil || st.RawMode&0o1777 != 0o1777 {
		t.Fatalf("/tmp mode = %o, %v", st.RawMode, err)
	}
}

// TestReadAtUtimesLink: ReadAt reads exactly the bytes asked for, short with
// io.EOF at the end; Utimes sets the modification time; Link makes a second
// name of the same file.
func TestReadAtUtimesLink(t *testing.T) {
	vm := newVM(t, VMOptions{})
	ctx := testContext(t, 60*time.Second)
	if err := vm.WriteFile(ctx, "/workspace/r.txt", []byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		off, n int
		want   string
		eof    bool
	}{
		{0, 4, "0123", false},
		{6, 4, "6789", false},
		{8, 4, "89", true},
		{10, 4, "", true},
		{20, 1, "", true},
	} {
		b := make([]byte, tc.n)
		n, err := vm.ReadAt(ctx, "/workspace/r.txt", b, int64(tc.off))
		if string(b[:n]) != tc.want || errors.Is(err, io.EOF) != tc.eof || (err != nil && !errors.Is(err, io.EOF)) {
			t.Errorf("ReadAt(%d, %d) = %q, %v", tc.off, tc.n, b[:n], err)
		}
	}
	mt := time.Unix(1_600_000_000, 0).UTC()
	if err := vm.Utimes(ctx, "/workspace/r.txt", mt, mt); err != nil {
		t.Fatal(err)
	}
	if info, err := vm.Stat(ctx, "/workspace/r.txt"); err != nil || !info.ModTime.Equal(mt) {
		t.Fatalf("mtime %v, %v; want %v", info.ModTime, err, mt)
	}
	if err := vm.Link(ctx, "/workspace/r.txt", "/workspace/h.txt"); err != nil {
		t.Fatal(err)
	}
	a, _ := vm.Stat(ctx, "/workspace/r.txt")
	b, err := vm.Stat(ctx, "/workspace/h.txt")
	if err != nil || a.Ino != b.Ino || b.Nlink != 2 {
		t.Fatalf("link: %+v %+v %v", a, b, err)
	}
}
