package agentos

import (
	"slices"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

// TestOwnEntries: of the per-VM resource entries the engine lists for
// every VM, a VM keeps its own by rank; an uncertain rank, or entries that
// do not match the VMs known, keep none. Other entries stay.
func TestOwnEntries(t *testing.T) {
	res := func(name string, depth uint64) protocol.QueueSnapshotEntry {
		return protocol.QueueSnapshotEntry{Name: name, Category: "resource", Depth: depth}
	}
	queue := protocol.QueueSnapshotEntry{Name: "events", Category: "queue", Depth: 7}
	three := []protocol.QueueSnapshotEntry{res("fs", 10), res("procs", 1), queue, res("fs", 20), res("procs", 2), res("fs", 30), res("procs", 3)}
	for _, c := range []struct {
		name      string
		rank, vms int
		want      []uint64 // depths kept, in order
	}{
		{"first", 0, 3, []uint64{10, 1, 7}},
		{"second", 1, 3, []uint64{7, 20, 2}},
		{"third", 2, 3, []uint64{7, 30, 3}},
		{"uncertain", -1, 3, []uint64{7}},
		{"a VM the client does not know", 0, 2, []uint64{7}},
	} {
		var got []uint64
		for _, e := range ownEntries(three, c.rank, c.vms) {
			got = append(got, e.Depth)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: kept %v, want %v", c.name, got, c.want)
		}
	}
}

// TestResourcesAreTheVMsOwn: on one sidecar, each VM's snapshot shows the
// files it wrote, not another VM's, also after a VM before it went away.
func TestResourcesAreTheVMsOwn(t *testing.T) {
	s := ownSidecar(t, Options{})
	ctx := testContext(t, 2*time.Minute)
	var vms []*VM
	for range 4 {
		vm, err := s.CreateVM(ctx, VMOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { vm.Dispose(ctx) })
		vms = append(vms, vm)
	}
	if err := vms[1].Dispose(ctx); err != nil {
		t.Fatal(err)
	}
	vms = slices.Delete(vms, 1, 2)
	for i, vm := range vms {
		if err := vm.WriteFile(ctx, "/workspace/f", make([]byte, (i+1)<<20)); err != nil {
			t.Fatal(err)
		}
	}
	var sizes []uint64
	for _, vm := range vms {
		r, err := vm.Resources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var fs []uint64
		for _, e := range r.QueueSnapshots {
			if e.Category == "resource" && e.Name == "vm_filesystem_bytes" {
				fs = append(fs, e.Depth)
			}
		}
		if len(fs) != 1 {
			t.Fatalf("%s: %d filesystem entries, want its own", vm.ID(), len(fs))
		}
		sizes = append(sizes, fs[0])
	}
	for i := range sizes {
		if i > 0 && (sizes[i]-sizes[i-1] < 1<<20-4096 || sizes[i]-sizes[i-1] > 1<<20+4096) {
			t.Fatalf("the VMs' filesystem bytes %v: each should be 1 MiB more than the one before", sizes)
		}
	}
}
