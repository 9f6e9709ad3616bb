package agentos

import (
	"strings"
	"testing"
	"time"
)

// TestEngineGuestWriteOverWireFile pins an engine bug that the durability
// run found (seeds 1796640892135698367 and 1796641006080321249): when a
// guest command changes a file that a filesystem call (the files API's
// write) created, the guest sees its change, but the engine's kernel never
// gets it. The files API, exports (hibernation, snapshots, checkpoints)
// and a later append read the file as the call wrote it. A file that a
// guest command created takes later guest changes normally. The test
// fails when the pinned engine's behaviour changes: then the regression
// seeds of make durability should pass, and the caveat in
// docs/durability.md can go.
func TestEngineGuestWriteOverWireFile(t *testing.T) {
	ctx := testContext(t, 120*time.Second)
	vm := newVM(t, VMOptions{})
	for _, tc := range []struct {
		name, path, cmd string
		byWire          bool // the file was written by a filesystem call
		want            string
	}{
		{"a guest file, appended", "/workspace/g", "printf more >> /workspace/g", false, "oldmore"},
		{"a wire file, appended", "/workspace/w1", "printf more >> /workspace/w1", true, "old"},
		{"a wire file, overwritten", "/workspace/w2", "printf new > /workspace/w2", true, "old"},
		{"a wire file, chmodded and appended", "/workspace/w3", "chmod 600 /workspace/w3 && printf more >> /workspace/w3", true, "old"},
		{"a wire file, appended by a child shell", "/workspace/w4", "sh -c 'printf more >> /workspace/w4'", true, "old"},
	} {
		if tc.byWire {
			if err := vm.WriteFile(ctx, tc.path, []byte("old")); err != nil {
				t.Fatal(err)
			}
		} else if r, err := vm.Exec(ctx, "printf old > "+tc.path, ExecOptions{}); err != nil || r.ExitCode != 0 {
			t.Fatalf("create %s: %v %+v", tc.path, err, r)
		}
		if r, err := vm.Exec(ctx, tc.cmd, ExecOptions{}); err != nil || r.ExitCode != 0 {
			t.Fatalf("%s: %v %+v", tc.cmd, err, r)
		}
		// The guest's own view has the change either way.
		if r, err := vm.Exec(ctx, "cat "+tc.path, ExecOptions{}); err != nil || strings.TrimSpace(string(r.Stdout)) == "old" {
			t.Errorf("%s: the guest reads %q, %v", tc.name, r.Stdout, err)
		}
		b, err := vm.ReadFile(ctx, tc.path)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != tc.want {
			t.Errorf("%s: the files API reads %q; the pinned engine gave %q", tc.name, b, tc.want)
		}
	}
}
