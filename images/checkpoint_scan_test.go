package images

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/agentos"
)

// TestGuestFindAgreesWithStat: the two ways a checkpoint compares a tree,
// the find the VM runs and a stat of each entry from the host, stamp an
// untouched tree alike (so that a checkpoint after a full capture copies
// nothing that did not change); after a command writes, find tells exactly
// what it wrote. A real sidecar: the case is the engine's own answers.
func TestGuestFindAgreesWithStat(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a sidecar")
	}
	if _, err := agentos.LocateEngine(); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sc, err := agentos.Start(ctx, agentos.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = sc.Close(ctx)
	})
	vm, err := sc.CreateVM(ctx, agentos.VMOptions{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := vm.Exec(ctx, "mkdir -p /workspace/src && printf one > /workspace/src/a.txt && printf keep > /workspace/src/b.txt", agentos.ExecOptions{}); err != nil {
		t.Fatal(err)
	}
	scan := newScanner(vm, nil)
	stat := manifest{}
	if err := scan.statTree(ctx, "/", stat); err != nil {
		t.Fatal(err)
	}
	found, err := scan.findAll(ctx, stat)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := slices.Sorted(maps.Keys(found)), slices.Sorted(maps.Keys(stat)); !slices.Equal(got, want) {
		t.Fatalf("find stamped %d paths, stat %d:\n%q\n%q", len(got), len(want), got, want)
	}
	if changed, deleted := diffManifests(stat, found, nil); len(changed) != 0 || len(deleted) != 0 {
		t.Fatalf("an untouched tree differs: changed %q, deleted %q", changed, deleted)
	}

	// The mtime has a millisecond's grain: a write within the same one as
	// the stat would look untouched.
	time.Sleep(5 * time.Millisecond)
	if _, err := vm.Exec(ctx, "printf two > /workspace/src/a.txt && printf new > /workspace/src/c.txt && rm /workspace/src/b.txt", agentos.ExecOptions{}); err != nil {
		t.Fatal(err)
	}
	after, err := scan.findAll(ctx, found)
	if err != nil {
		t.Fatal(err)
	}
	changed, deleted := diffManifests(found, after, nil)
	if want := []string{"/workspace/src/a.txt", "/workspace/src/c.txt"}; !slices.Equal(changed, want) {
		t.Errorf("changed %q, want %q", changed, want)
	}
	if want := []string{"/workspace/src/b.txt"}; !slices.Equal(deleted, want) {
		t.Errorf("deleted %q, want %q", deleted, want)
	}
}
