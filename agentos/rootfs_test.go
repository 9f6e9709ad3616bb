package agentos

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

// TestSnapshotFrameLimit measures what one snapshot frame of the pinned
// engine carries (SnapshotFrameBytes): an export whose response frame stays
// under 8 MiB is sent, one over it is refused by the engine itself, and
// ExportRootFilesystemFrame refuses both a tree near the limit and one over
// it as ErrSnapshotTooLarge. The way back, a VM created from a snapshot
// lower of 10 MiB, holds the tree.
func TestSnapshotFrameLimit(t *testing.T) {
	ctx := testContext(t, 180*time.Second)
	vm := newVM(t, VMOptions{Limits: map[string]any{"resources": map[string]any{"maxFilesystemBytes": 1 << 30}}})
	write := func(n int) {
		t.Helper()
		if _, err := vm.WriteFileFrom(ctx, "/workspace/big.txt", strings.NewReader(strings.Repeat("a", n))); err != nil {
			t.Fatal(err)
		}
	}
	// The base tree's frame is about 200 KB: a file of 7.5 MiB keeps the
	// frame under 8 MiB, one of 8 MiB takes it over.
	write(SnapshotFrameBytes - 512<<10)
	if _, err := vm.ExportRootFilesystem(ctx, 1<<40); err != nil {
		t.Fatalf("a frame under the limit: %v", err)
	}
	if _, err := vm.ExportRootFilesystemFrame(ctx); !errors.Is(err, ErrSnapshotTooLarge) {
		t.Fatalf("ExportRootFilesystemFrame near the limit: %v, want ErrSnapshotTooLarge", err)
	}
	write(SnapshotFrameBytes)
	_, err := vm.ExportRootFilesystem(ctx, 1<<40)
	var rej *RejectedError
	if !errors.As(err, &rej) || !isResponseLimit(rej) {
		t.Fatalf("a frame over the limit: %v, want the engine's %s", err, engineResponseLimit)
	}
	if _, err := vm.ExportRootFilesystemFrame(ctx); !errors.Is(err, ErrSnapshotTooLarge) {
		t.Fatalf("ExportRootFilesystemFrame over the limit: %v, want ErrSnapshotTooLarge", err)
	}

	write(1 << 20)
	es, err := vm.ExportRootFilesystemFrame(ctx)
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte{0, 1, 2, 0xff}, 10<<20/4)
	content, enc := EncodeContent(big[:7<<20]) // base64: 9.3 MiB on the wire
	mode := uint32(0o100600)
	es = append(es, protocol.RootFilesystemEntry{Path: "/workspace/big.bin", Kind: protocol.RootFilesystemEntryKindFile, Mode: &mode, Content: &content, Encoding: enc})
	vm2, err := sharedSidecar(t).CreateVM(ctx, VMOptions{RootSnapshot: es})
	if err != nil {
		t.Fatal(err)
	}
	defer vm2.Dispose(ctx)
	got, err := vm2.ReadFile(ctx, "/workspace/big.bin")
	if err != nil || !bytes.Equal(got, big[:7<<20]) {
		t.Fatalf("the 7 MiB file of the snapshot lower: %d bytes, %v", len(got), err)
	}
	if st, err := vm2.Lstat(ctx, "/workspace/big.bin"); err != nil || st.RawMode != mode {
		t.Fatalf("mode %o, %v; want %o", st.RawMode, err, mode)
	}
	if got, err := vm2.ReadFile(ctx, "/workspace/big.txt"); err != nil || len(got) != 1<<20 {
		t.Fatalf("the exported file: %d bytes, %v", len(got), err)
	}
}
