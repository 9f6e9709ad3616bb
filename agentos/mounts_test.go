package agentos

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

func memoryMount(p string) protocol.MountDescriptor {
	return protocol.MountDescriptor{GuestPath: p, Plugin: protocol.MountPluginDescriptor{ID: "memory", Config: "{}"}}
}

// TestConcurrentMountsAllStay: ConfigureVmRequest replaces the whole
// configuration, so mounts added at once must each see the others.
func TestConcurrentMountsAllStay(t *testing.T) {
	vm := newVM(t, VMOptions{})
	ctx := testContext(t, 60*time.Second)
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Go(func() { errs[i] = vm.Mount(ctx, memoryMount(fmt.Sprintf("/mnt/m%d", i))) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	mounted, err := vm.Mounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range errs {
		p := fmt.Sprintf("/mnt/m%d", i)
		if !slices.ContainsFunc(mounted, func(m protocol.MountInfo) bool { return m.Path == p && m.Kind == "memory" }) {
			t.Errorf("%s is not mounted: %+v", p, mounted)
		}
	}
	if len(vm.MountDescriptors()) != len(errs) {
		t.Errorf("descriptors %+v", vm.MountDescriptors())
	}
	if err := vm.Mount(ctx, memoryMount("/mnt/m0")); !errors.Is(err, ErrMounted) {
		t.Errorf("mount twice: %v", err)
	}
}

// TestLinkedSoftwareSurvivesReconfigure: a package linked into a running VM
// is linked itself (not the last default package) and stays linked when a
// mount resends the configuration.
func TestLinkedSoftwareSurvivesReconfigure(t *testing.T) {
	vm := newVM(t, VMOptions{})
	ctx := testContext(t, 60*time.Second)
	names := func() []string {
		t.Helper()
		sw, err := vm.Software(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range sw {
			out = append(out, p.PackageName)
		}
		return out
	}
	sed, err := vm.LinkSoftware(ctx, "@agentos-software/sed")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range sed.ProjectedCommands {
		if c.Name != "sed" {
			t.Errorf("linking sed projected %+v", sed.ProjectedCommands)
		}
	}
	if _, err := vm.LinkSoftware(ctx, "@agentos-software/codex-cli"); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(names(), "codex-cli") {
		t.Fatalf("codex-cli not linked: %v", names())
	}
	if err := vm.Mount(ctx, memoryMount("/mnt/after")); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(names(), "codex-cli") {
		t.Errorf("codex-cli gone after a mount: %v", names())
	}
	if err := vm.Unmount(ctx, "/mnt/after"); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(names(), "codex-cli") {
		t.Errorf("codex-cli gone after an unmount: %v", names())
	}
}

// TestMountLimit: a VM takes MaxMounts mounts and refuses one more, which
// its configuration does not keep.
func TestMountLimit(t *testing.T) {
	vm := newVM(t, VMOptions{})
	ctx := testContext(t, 120*time.Second)
	for i := range MaxMounts {
		if err := vm.Mount(ctx, memoryMount(fmt.Sprintf("/mnt/m%d", i))); err != nil {
			t.Fatalf("mount %d: %v", i, err)
		}
	}
	if err := vm.Mount(ctx, memoryMount("/mnt/one-more")); !errors.Is(err, ErrTooManyMounts) {
		t.Fatalf("mount %d: %v", MaxMounts+1, err)
	}
	if n := len(vm.MountDescriptors()); n != MaxMounts {
		t.Fatalf("%d mounts kept", n)
	}
}
