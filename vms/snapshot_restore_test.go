package vms_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"io/fs"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/archive"
	"github.com/agentos-gateway/agentos-gateway/images"
	"github.com/agentos-gateway/agentos-gateway/snapshots"
	"github.com/agentos-gateway/agentos-gateway/vms"
)

// countingSource is the gateway's snapshot source (the SQLite store's
// records, the bytes in a directory) with a count of how often the vms
// service opens a snapshot's bytes and how many of them it reads.
type countingSource struct {
	src   vms.SnapshotSource
	opens atomic.Int64
	read  atomic.Int64
}

func (c *countingSource) OpenSnapshot(ctx context.Context, tenantID, id string) (io.ReadSeekCloser, error) {
	rs, err := c.src.OpenSnapshot(ctx, tenantID, id)
	if err != nil {
		return nil, err
	}
	c.opens.Add(1)
	return countingReader{rs, &c.read}, nil
}

type countingReader struct {
	io.ReadSeekCloser
	read *atomic.Int64
}

func (r countingReader) Read(p []byte) (int, error) {
	n, err := r.ReadSeekCloser.Read(p)
	r.read.Add(int64(n))
	return n, err
}

// TestCreateFromSnapshotReadsItOnce: a VM created from a snapshot with
// files too large for the create frame gets them byte for byte, with their
// modes, next to the small ones, and its create opens the stored bytes
// once and reads each of them once. The only byte read twice is the last
// of each large file, which the tar reader reads when it skips the file,
// to notice a snapshot that ends within it.
func TestCreateFromSnapshotReadsItOnce(t *testing.T) {
	tenant := gateway.Tenant{ID: "t1", Name: "t1"}
	src := &countingSource{}
	e := newEnv(t, vms.Config{Snapshots: src}, tenant)
	blobs := images.DirBlobs{Dir: t.TempDir()}
	src.src = snapshots.NewSource(e.db, blobs)
	snaps := snapshots.New(snapshots.Config{Log: zerolog.Nop(), NodeID: "n1"}, e.db, blobs, e.svc)
	ctx := context.Background()

	// Two files whose base64 passes what is left of a create frame once the
	// default tree is in it, each with NULs in it and a mode of its own.
	large := func() []byte {
		b := make([]byte, 6<<20)
		_, _ = rand.Read(b)
		b[0], b[len(b)-1] = 0, 0
		return b
	}
	files := []struct {
		name string
		mode fs.FileMode
		body []byte
	}{
		{"big-a.bin", 0o750, large()},
		{"small.txt", 0o644, []byte("small\x00text\n")},
		{"big-b.bin", 0o600, large()},
		{"empty", 0o640, nil},
	}
	var tree bytes.Buffer
	tw := tar.NewWriter(&tree)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Typeflag: tar.TypeReg, Mode: int64(f.mode), Size: int64(len(f.body))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(f.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	vm, err := e.svc.Create(ctx, tenant, gateway.VMSpec{})
	if err != nil {
		t.Fatal(err)
	}
	fsys, err := e.svc.Files(ctx, tenant.ID, vm.ID)
	if err != nil {
		t.Fatal(err)
	}
	_, err = fsys.ExtractArchive(ctx, "/workspace/tree", &tree, true, archive.Limits{})
	fsys.Release()
	if err != nil {
		t.Fatal(err)
	}
	snap, err := snaps.Create(ctx, tenant, vm.ID)
	if err != nil {
		t.Fatal(err)
	}

	restored, err := e.svc.Create(ctx, tenant, gateway.VMSpec{FromSnapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	if n := src.opens.Load(); n != 1 {
		t.Errorf("the create opened the snapshot's bytes %d times, want once", n)
	}
	const largeFiles = 2
	if n := src.read.Load(); n > snap.Bytes+largeFiles {
		t.Errorf("the create read %d bytes of a snapshot of %d, want each once", n, snap.Bytes)
	}
	fsys, err = e.svc.Files(ctx, tenant.ID, restored.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer fsys.Release()
	for _, f := range files {
		p := "/workspace/tree/" + f.name
		var got bytes.Buffer
		if _, err := fsys.ReadTo(ctx, p, &got); err != nil || !bytes.Equal(got.Bytes(), f.body) {
			t.Errorf("%s: %d bytes restored of %d (%v)", p, got.Len(), len(f.body), err)
		}
		info, err := fsys.Stat(ctx, p)
		if err != nil || info.Mode.Perm() != f.mode {
			t.Errorf("%s: mode %v (%v), want %v", p, info.Mode.Perm(), err, f.mode)
		}
	}
}
