package agentos

import (
	"strings"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

// TestEngineShadowRevertsGuestChanges pins the engine behaviour that
// shadow.go works around (found by the durability run, seeds
// 1796640892135698367 and 1796641006080321249): after a guest command
// changed a file that a filesystem call wrote, a read-side call sent as it
// is (no reconcile) brings the engine's stale host copy back over the
// guest's bytes, and a guest rename over such a file (sed -i) makes the
// call delete it. The test fails when the pinned engine's behaviour
// changes: then reconcileShadow may go.
func TestEngineShadowRevertsGuestChanges(t *testing.T) {
	ctx := testContext(t, 120*time.Second)
	vm := newVM(t, VMOptions{})
	rawRead := func(p string) (string, error) {
		n := uint64(1 << 20)
		off := uint64(0)
		r, err := vm.rawFsCall(ctx, protocol.GuestFilesystemCallRequest{Operation: protocol.GuestFilesystemOperationPread, Path: p, Offset: &off, Len: &n})
		if err != nil {
			return "", err
		}
		var s string
		err = decodeContent(r, func(b []byte) error { s = string(b); return nil })
		return s, err
	}
	for _, tc := range []struct{ name, path, cmd, want string }{
		{"appended", "/workspace/a", "printf more >> /workspace/a", "old"},
		{"overwritten", "/workspace/o", "printf new > /workspace/o", "old"},
		{"replaced by sed -i", "/workspace/s", "sed -i s/old/new/ /workspace/s", "ENOENT"},
	} {
		if err := vm.WriteFile(ctx, tc.path, []byte("old")); err != nil {
			t.Fatal(err)
		}
		if r, err := vm.Exec(ctx, tc.cmd, ExecOptions{}); err != nil || r.ExitCode != 0 {
			t.Fatalf("%s: %v %+v", tc.cmd, err, r)
		}
		got, err := rawRead(tc.path)
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, tc.want) || (tc.want == "old" && got != "old") {
			t.Errorf("%s: a raw read gives %q; the pinned engine gave %q", tc.name, got, tc.want)
		}
	}
}

// TestGuestChangesSurviveFileCalls: what a guest command did to a file is
// what the filesystem calls and an export see, for files a call wrote,
// files a woken VM was given, and files a node launch copied, with and
// without a process running (reconcileShadow).
func TestGuestChangesSurviveFileCalls(t *testing.T) {
	ctx := testContext(t, 240*time.Second)
	type check struct {
		path, want string // want "" means the path must not exist
		mode       uint32 // when not 0
	}
	writeOld := func(p string) func(t testing.TB, vm *VM) {
		return func(t testing.TB, vm *VM) { mustDo(t, vm.WriteFile(ctx, p, []byte("old"))) }
	}
	cases := []struct {
		name  string
		setup func(t testing.TB, vm *VM) // with filesystem calls
		cmd   string                     // the guest's change
		check []check
	}{
		{"append to a written file", writeOld("/workspace/a"), "printf more >> /workspace/a", []check{{path: "/workspace/a", want: "oldmore"}}},
		{"overwrite a written file", writeOld("/workspace/o"), "printf new > /workspace/o", []check{{path: "/workspace/o", want: "new"}}},
		{"chmod and append", writeOld("/workspace/c"), "chmod 600 /workspace/c && printf more >> /workspace/c", []check{{path: "/workspace/c", want: "oldmore", mode: 0o600}}},
		{"append in a child shell", writeOld("/workspace/k"), "sh -c 'printf more >> /workspace/k'", []check{{path: "/workspace/k", want: "oldmore"}}},
		{"sed -i", writeOld("/workspace/s"), "sed -i s/old/new/ /workspace/s", []check{{path: "/workspace/s", want: "new"}}},
		{"rename and append", writeOld("/workspace/m"), "mv /workspace/m /workspace/m2 && printf more >> /workspace/m2", []check{{path: "/workspace/m2", want: "oldmore"}, {path: "/workspace/m"}}},
		{"remove a written folder", func(t testing.TB, vm *VM) {
			mustDo(t, vm.Mkdir(ctx, "/workspace/d", false))
			mustDo(t, vm.WriteFile(ctx, "/workspace/d/f", []byte("old")))
		}, "rm -r /workspace/d", []check{{path: "/workspace/d"}, {path: "/workspace/d/f"}}},
		{"append to a large written file", func(t testing.TB, vm *VM) {
			mustDo(t, vm.WriteFile(ctx, "/workspace/big", []byte(strings.Repeat("x", 5<<20))))
		}, "printf more >> /workspace/big", []check{{path: "/workspace/big", want: strings.Repeat("x", 5<<20) + "more"}}},
		{"edit a file node ran", nil, "printf 'console.log(1)' > /workspace/n.js && node /workspace/n.js && printf 'console.log(2)' > /workspace/n.js", []check{{path: "/workspace/n.js", want: "console.log(2)"}}},
	}
	run := func(t *testing.T, vm *VM, withProcess bool) {
		if withProcess {
			p, err := vm.SpawnCommand(ctx, "sleep 120", SpawnOptions{})
			mustDo(t, err)
			t.Cleanup(func() { p.Kill(ctx) })
		}
		for _, tc := range cases {
			if tc.setup != nil {
				tc.setup(t, vm)
			}
			if r, err := vm.Exec(ctx, tc.cmd, ExecOptions{}); err != nil || r.ExitCode != 0 {
				t.Fatalf("%s: %v %+v", tc.cmd, err, r)
			}
			for _, c := range tc.check {
				ok, err := vm.Exists(ctx, c.path)
				mustDo(t, err)
				if !ok {
					if c.want != "" {
						t.Errorf("%s: %s is gone", tc.name, c.path)
					}
					continue
				}
				if c.want == "" {
					t.Errorf("%s: %s is back", tc.name, c.path)
					continue
				}
				if b, err := vm.ReadFile(ctx, c.path); err != nil || string(b) != c.want {
					t.Errorf("%s: %s reads %d bytes (%.20q), %v; the guest wrote %d (%.20q)", tc.name, c.path, len(b), b, err, len(c.want), c.want)
				}
				if c.mode != 0 {
					if fi, err := vm.Stat(ctx, c.path); err != nil || fi.RawMode&0o7777 != c.mode {
						t.Errorf("%s: %s has mode %o, %v; want %o", tc.name, c.path, fi.RawMode&0o7777, err, c.mode)
					}
				}
			}
		}
		// The guest sees the same after all those calls.
		if r, err := vm.Exec(ctx, "cat /workspace/a /workspace/s /workspace/m2", ExecOptions{}); err != nil || string(r.Stdout) != "oldmorenewoldmore" {
			t.Errorf("the guest reads %q, %v", r.Stdout, err)
		}
	}
	var image []protocol.RootFilesystemEntry
	t.Run("fresh VM", func(t *testing.T) {
		vm := newVM(t, VMOptions{})
		run(t, vm, false)
		var err error
		image, err = vm.ExportRootFilesystemFrame(ctx)
		mustDo(t, err)
	})
	t.Run("while a process runs", func(t *testing.T) {
		run(t, newVM(t, VMOptions{}), true)
	})
	t.Run("woken VM", func(t *testing.T) {
		if image == nil {
			t.Skip("no image")
		}
		vm := newVM(t, VMOptions{RootSnapshot: image})
		// Its files came as bootstrap entries, which the engine copies too.
		for _, tc := range []struct{ cmd, path, want string }{
			{"printf more >> /workspace/a", "/workspace/a", "oldmoremore"},
			{"sed -i s/new/newer/ /workspace/s", "/workspace/s", "newer"},
		} {
			if r, err := vm.Exec(ctx, tc.cmd, ExecOptions{}); err != nil || r.ExitCode != 0 {
				t.Fatalf("%s: %v %+v", tc.cmd, err, r)
			}
			if b, err := vm.ReadFile(ctx, tc.path); err != nil || string(b) != tc.want {
				t.Errorf("%s reads %q, %v; want %q", tc.path, b, err, tc.want)
			}
		}
	})
}

func mustDo(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
