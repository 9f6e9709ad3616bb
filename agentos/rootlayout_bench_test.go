package agentos

import (
	"testing"
	"time"
)

// BenchmarkStatRootLayout is a stat of /workspace in a fresh VM laid out
// each way a VM's tree can be (rootLayout): the engine's base layer alone
// (the reference: the engine's own cost), the base's 221 entries in the
// VM's own layer (splitRootSnapshot, issue 33's first fix), and over the
// base (overBase, the default). The engine walks the upper layer's entries
// before each read of the guest's filesystem, so the ratios to "engine"
// are what each layout costs every file call, command and hibernation.
// Measured on the 2-core machine: 12 ms, 90 ms, 18 ms.
//
//	go test -run '^$' -bench StatRootLayout ./agentos/
func BenchmarkStatRootLayout(b *testing.B) {
	ctx := testContext(b, 10*time.Minute)
	s := sharedSidecar(b)
	base, err := s.baseRoot(ctx)
	if err != nil {
		b.Fatal(err)
	}
	own := ownLayer(base)
	over, _ := rootLayout(base, base)
	for _, c := range []struct {
		name string
		root *vmRootFSJSON
	}{{"engine", nil}, {"own-layer", &own}, {"over-base", &over}} {
		b.Run(c.name, func(b *testing.B) {
			vm, err := s.createVM(ctx, VMOptions{}, c.root)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = vm.Dispose(testContext(b, 30*time.Second)) })
			if c.root != nil {
				b.ReportMetric(float64(len(c.root.BootstrapEntries)), "entries")
			}
			for b.Loop() {
				if _, err := vm.Stat(ctx, "/workspace"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
