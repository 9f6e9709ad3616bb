package agentos

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

// TestRootSnapshotKeepsFiles: a VM created from a root
// snapshot keeps every file of it, in the guest's view and in its next
// export, whatever the guest does to the directories first. The pinned
// engine marks a directory that it copies from a lower layer into the
// upper one (as a guest's ls of it does, updating its times) as opaque,
// which hides the directory's lower children; a snapshot given as a lower
// layer then loses the files of every directory a guest command touched
// (issue 33: the second hibernation lost a file the files API wrote).
func TestRootSnapshotKeepsFiles(t *testing.T) {
	ctx := testContext(t, 180*time.Second)
	src := newVM(t, VMOptions{})
	files := map[string]string{
		"/workspace/keep.txt":      "survives",
		"/workspace/sub/deep.txt":  "deep",
		"/home/agentos/notes.md":   "notes",
		"/tmp/scratch":             "tmp",
		"/etc/agentos-gateway.cfg": "cfg",
	}
	for p, body := range files {
		if err := src.Mkdir(ctx, p[:strings.LastIndex(p, "/")], true); err != nil {
			t.Fatal(err)
		}
		if err := src.WriteFile(ctx, p, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	es, err := src.ExportRootFilesystemFrame(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, cmd string }{
		{"ls of the directory", "ls /workspace"},
		{"ls as the cwd", "ls"},
		{"ls of every directory", "ls / /workspace /workspace/sub /home/agentos /tmp /etc"},
		{"touch of a directory", "touch /workspace /etc"},
		{"find", "find / -name '*.txt'"},
		{"stat", "stat /workspace /workspace/sub"},
		{"chmod of a directory", "chmod 0750 /workspace/sub"},
		{"a write beside", "sh -c 'echo new > /workspace/new.txt'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vm, err := sharedSidecar(t).CreateVM(ctx, VMOptions{RootSnapshot: es})
			if err != nil {
				t.Fatal(err)
			}
			defer vm.Dispose(ctx)
			if r, err := vm.Exec(ctx, tc.cmd, ExecOptions{Cwd: "/workspace"}); err != nil {
				t.Fatalf("%s: %v", tc.cmd, err)
			} else if r.ExitCode != 0 {
				t.Logf("%s exited %d: %s", tc.cmd, r.ExitCode, r.Stderr)
			}
			// The guest's own view, twice: the first read may be what
			// copies a directory up.
			for range 2 {
				r, err := vm.Exec(ctx, "ls -a /workspace /workspace/sub /home/agentos /tmp /etc", ExecOptions{Cwd: "/"})
				if err != nil {
					t.Fatal(err)
				}
				for p := range files {
					if !strings.Contains(string(r.Stdout), p[strings.LastIndex(p, "/")+1:]) {
						t.Errorf("the guest's ls no longer lists %s:\n%s", p, r.Stdout)
					}
				}
			}
			after, err := vm.ExportRootFilesystemFrame(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// The base's files too: the snapshot is laid over the base.
			for _, p := range []string{"/etc/passwd", "/usr/bin/env", "/etc/ssl/certs/ca-certificates.crt"} {
				if !slices.ContainsFunc(after, func(e protocol.RootFilesystemEntry) bool { return e.Path == p }) {
					t.Errorf("the export lost the base's %s", p)
				}
			}
			for p, body := range files {
				i := slices.IndexFunc(after, func(e protocol.RootFilesystemEntry) bool { return e.Path == p })
				if i < 0 {
					t.Errorf("the export lost %s", p)
					continue
				}
				if got, err := DecodeContent(after[i]); err != nil || string(got) != body {
					t.Errorf("%s exported as %q, %v", p, got, err)
				}
			}
		})
	}
}

// TestBaseFilesSurviveAStat: the base layer's files stay in a VM created
// without a snapshot whatever its commands do to their directories (a stat
// of /usr/bin hid /usr/bin/env, and a hibernation then lost it for good),
// and such a VM starts with the tree the engine's own base layer gives.
func TestBaseFilesSurviveAStat(t *testing.T) {
	ctx := testContext(t, 120*time.Second)
	vm := newVM(t, VMOptions{})
	before, err := vm.ExportRootFilesystemFrame(ctx)
	if err != nil {
		t.Fatal(err)
	}
	engine, err := sharedSidecar(t).createVM(ctx, VMOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	own, err := engine.ExportRootFilesystemFrame(ctx)
	_ = engine.Dispose(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := treeOf(t, before), treeOf(t, own); !maps.Equal(got, want) {
		for p, e := range want {
			if got[p] != e {
				t.Errorf("%s: %q, over the engine's base layer %q", p, got[p], e)
			}
		}
		for p := range got {
			if _, ok := want[p]; !ok {
				t.Errorf("%s: not in the engine's base layer", p)
			}
		}
	}
	// Every directory of the base, touched: a touch is what copies a
	// directory that only the base holds up as opaque.
	var dirs []string
	for _, e := range before {
		if e.Kind == protocol.RootFilesystemEntryKindDirectory && e.Path != "/" && !kernelPath(e.Path) && !under(e.Path, PackagesMountAt) && e.Path != PackagesMountAt {
			dirs = append(dirs, e.Path)
		}
	}
	// A recursive listing through the files API first: the engine's
	// shadow sync before it removed the base's symlinks (/var/lock).
	if _, err := vm.ReadDirRecursive(ctx, "/etc", ReadDirOptions{}); err != nil {
		t.Fatal(err)
	}
	// (/etc/agentos is the engine's, read-only: its touch fails.)
	for _, cmd := range []string{"ls -la /usr/bin", "stat /usr/bin", "find / -name '*.txt'", "touch " + strings.Join(dirs, " ")} {
		if r, err := vm.Exec(ctx, cmd, ExecOptions{}); err != nil {
			t.Fatalf("%.60s: %v", cmd, err)
		} else if r.ExitCode != 0 {
			t.Logf("%.60s: exit %d: %s", cmd, r.ExitCode, r.Stderr)
		}
	}
	r, err := vm.Exec(ctx, "ls /usr/bin", ExecOptions{})
	if err != nil || !strings.Contains(string(r.Stdout), "env") {
		t.Errorf("ls /usr/bin after a stat: %q, %v", r.Stdout, err)
	}
	after, err := vm.ExportRootFilesystemFrame(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a := treeOf(t, after)
	for p, e := range treeOf(t, before) {
		if _, ok := a[p]; !ok {
			t.Errorf("the export lost %s (%s) after a touch of its directory", p, e)
		}
	}
}

// treeOf is an export as path → kind, mode and content, without the
// kernel's and the packages' mount points.
func treeOf(t *testing.T, es []protocol.RootFilesystemEntry) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, e := range es {
		p := e.Path
		if slices.ContainsFunc(append(slices.Clone(kernelDirs), PackagesMountAt), func(d string) bool { return under(p, d) }) {
			continue
		}
		var mode uint32
		if e.Mode != nil {
			mode = *e.Mode
		}
		body, err := DecodeContent(e)
		if err != nil {
			t.Fatal(err)
		}
		target := ""
		if e.Target != nil {
			target = *e.Target
		}
		out[p] = fmt.Sprintf("%s %o %q %q", e.Kind, mode, body, target)
	}
	return out
}
