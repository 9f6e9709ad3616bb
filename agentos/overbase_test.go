package agentos

import (
	"path"
	"slices"
	"testing"

	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

// TestOverBase: which trees overBase lays over the base, and with which
// entries. Pure: the live behaviour it relies on is
// TestBaseFilesSurviveAStat's and TestRootSnapshotKeepsFiles's.
func TestOverBase(t *testing.T) {
	dir := func(p string, mode uint32) protocol.RootFilesystemEntry {
		m := 0o040000 | mode
		return protocol.RootFilesystemEntry{Path: p, Kind: protocol.RootFilesystemEntryKindDirectory, Mode: &m}
	}
	file := func(p, body string) protocol.RootFilesystemEntry {
		m := uint32(0o100644)
		c, enc := EncodeContent([]byte(body))
		return protocol.RootFilesystemEntry{Path: p, Kind: protocol.RootFilesystemEntryKindFile, Mode: &m, Content: &c, Encoding: enc}
	}
	link := func(p, target string) protocol.RootFilesystemEntry {
		m := uint32(0o120777)
		return protocol.RootFilesystemEntry{Path: p, Kind: protocol.RootFilesystemEntryKindSymlink, Mode: &m, Target: &target}
	}
	base := []protocol.RootFilesystemEntry{
		dir("/", 0o755), dir("/etc", 0o755), file("/etc/passwd", "root:x:0:0"), file("/etc/a", "a"),
		dir("/etc/ssl", 0o755), dir("/etc/ssl/certs", 0o755), file("/etc/ssl/certs/ca.crt", "pem"),
		dir("/usr", 0o755), dir("/usr/bin", 0o755), file("/usr/bin/env", "#!"),
		dir("/var", 0o755), dir("/var/empty", 0o755), dir("/workspace", 0o755), link("/var/run", "../run"), dir("/run", 0o755),
		dir("/proc", 0o555), file("/proc/self", "kernel's"),
	}
	without := func(p string) []protocol.RootFilesystemEntry {
		return slices.DeleteFunc(slices.Clone(base), func(e protocol.RootFilesystemEntry) bool { return e.Path == p })
	}
	with := func(es ...protocol.RootFilesystemEntry) []protocol.RootFilesystemEntry {
		out := slices.Clone(base)
		for _, e := range es {
			if i := slices.IndexFunc(out, func(o protocol.RootFilesystemEntry) bool { return o.Path == e.Path }); i >= 0 {
				out[i] = e
			} else {
				out = append(out, e)
			}
		}
		return out
	}
	for _, tc := range []struct {
		name string
		root []protocol.RootFilesystemEntry
		ok   bool
		own  []string // the entries of root's own, besides the base's guards
	}{
		{"the base itself", base, true, nil},
		{"a new file", with(file("/workspace/keep.txt", "survives")), true, []string{"/workspace/keep.txt"}},
		{"a new directory", with(dir("/workspace/sub", 0o700), file("/workspace/sub/deep", "d")), true, []string{"/workspace/sub", "/workspace/sub/deep"}},
		{"a changed file of the base", with(file("/etc/passwd", "changed")), true, []string{"/etc/passwd"}},
		{"a new file in a base directory", with(file("/etc/new.cfg", "x")), true, []string{"/etc/new.cfg"}},
		{"a file of the base deleted", without("/etc/a"), false, nil},
		{"an empty directory of the base deleted", without("/var/empty"), false, nil},
		{"a file of the base made a directory", with(dir("/etc/a", 0o755)), false, nil},
		{"a directory of the base chmodded", with(dir("/etc", 0o700)), false, nil},
		{"the kernel's content differs", with(file("/proc/self", "other")), true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, reason := overBase(base, tc.root)
			ok := reason == ""
			if ok != tc.ok {
				t.Fatalf("laid over the base: %v (%s), want %v", ok, reason, tc.ok)
			}
			if !ok {
				return
			}
			inBase := map[string]protocol.RootFilesystemEntry{}
			for _, b := range base {
				inBase[b.Path] = b
			}
			var own []string
			upper := map[string]bool{}
			for _, e := range got {
				if kernelPath(e.Path) || e.Path == "/" {
					t.Errorf("entry %s: the kernel's or the root", e.Path)
				}
				if b, ok := inBase[e.Path]; ok && sameEntry(b, e) {
					if e.Kind == protocol.RootFilesystemEntryKindDirectory && slices.ContainsFunc(base, func(b protocol.RootFilesystemEntry) bool { return under(b.Path, e.Path) }) {
						t.Errorf("entry %s: a directory of the base with children (staged opaque, it hides them)", e.Path)
					}
				} else {
					own = append(own, e.Path)
				}
				for d := path.Dir(e.Path); d != "/"; d = path.Dir(d) {
					upper[d] = true
				}
			}
			if !slices.Equal(own, tc.own) {
				t.Errorf("own entries %q, want %q", own, tc.own)
			}
			// Every directory of the base with children is placed in
			// the upper layer by an entry below it.
			for _, d := range []string{"/etc", "/etc/ssl", "/etc/ssl/certs", "/usr", "/usr/bin", "/var"} {
				if !upper[d] {
					t.Errorf("%s is not below any entry: a touch of it would hide its files", d)
				}
			}
			// Every symlink is an entry: the engine's shadow sync
			// removes a lower layer's.
			if !slices.ContainsFunc(got, func(e protocol.RootFilesystemEntry) bool { return e.Path == "/var/run" }) {
				t.Errorf("the base's symlink /var/run is not an entry")
			}
			// And each base file is given once at most: the root's
			// tree, no more.
			seen := map[string]bool{}
			for _, e := range got {
				if seen[e.Path] {
					t.Errorf("%s twice", e.Path)
				}
				seen[e.Path] = true
			}
		})
	}
}
