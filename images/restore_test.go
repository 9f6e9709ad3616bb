package images

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// restoreFixture stores, in a real blob directory, the layers of a
// checkpoint of a VM holding size bytes: a full layer, then one that
// rewrote 1 MiB of it.
func restoreFixture(t testing.TB, size int) (Store, []gateway.Checkpoint) {
	t.Helper()
	blobs := DirBlobs{Dir: t.TempDir()}
	big := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	changed := bytes.Repeat([]byte("z"), 1<<20)
	var layers []gateway.Checkpoint
	for _, l := range [][]byte{
		testLayer(t, nil, testEntry{name: "workspace/"}, testEntry{name: "workspace/big.bin", content: string(big)},
			testEntry{name: "workspace/small.txt", content: "old"}),
		testLayer(t, nil, testEntry{name: "workspace/small.txt", content: string(changed)}),
	} {
		name, _, err := blobs.Put(context.Background(), bytes.NewReader(l))
		if err != nil {
			t.Fatal(err)
		}
		layers = append(layers, gateway.Checkpoint{Image: name})
	}
	return Store{Blobs: blobs}, layers
}

// dirBytes is the size of the files in dir.
func dirBytes(dir string) int64 {
	var n int64
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if fi, err := e.Info(); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// peakDisk runs fn while sampling the bytes in dir, and returns their most.
func peakDisk(dir string, fn func()) int64 {
	var peak atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			peak.Store(max(peak.Load(), dirBytes(dir)))
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	})
	fn()
	close(stop)
	wg.Wait()
	return max(peak.Load(), dirBytes(dir))
}

// TestRestoreReadsLayersInPlace: a restore merges the layers where the
// image store keeps them: the only file it writes is the merged image, which
// holds each path's newest version, and which goes when closed.
func TestRestoreReadsLayersInPlace(t *testing.T) {
	const size = 8 << 20
	s, layers := restoreFixture(t, size)
	dir := t.TempDir()
	var img io.ReadSeekCloser
	peak := peakDisk(dir, func() {
		var err error
		img, err = s.Restore(context.Background(), layers, dir)
		if err != nil {
			t.Fatal(err)
		}
	})
	merged := dirBytes(dir)
	if peak > merged {
		t.Fatalf("the restore used %d bytes of local disk at its peak, past the merged image's %d: it copied layers", peak, merged)
	}
	b, err := io.ReadAll(img)
	if err != nil {
		t.Fatal(err)
	}
	got := readTar(t, b)
	if len(got) != 3 || got[0] != "workspace/" || len(got[1]) != len("workspace/big.bin=")+size || got[2] != "workspace/small.txt="+string(bytes.Repeat([]byte("z"), 1<<20)) {
		t.Fatalf("merged image: %d entries, %.40q", len(got), got)
	}
	if err := img.Close(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("left behind: %v", ents)
	}
}

// BenchmarkRestorePeakDisk: the local disk a restore of a 100 MiB VM's
// checkpoint (a full layer and a 1 MiB one) uses at its peak, against the
// merged image's size.
func BenchmarkRestorePeakDisk(b *testing.B) {
	s, layers := restoreFixture(b, 100<<20)
	var peak, merged int64
	for b.Loop() {
		dir := b.TempDir()
		p := peakDisk(dir, func() {
			img, err := s.Restore(context.Background(), layers, dir)
			if err != nil {
				b.Fatal(err)
			}
			merged = dirBytes(dir)
			img.Close()
		})
		peak = max(peak, p)
		_ = os.RemoveAll(filepath.Clean(dir))
	}
	b.ReportMetric(float64(peak)/(1<<20), "peak-MiB")
	b.ReportMetric(float64(peak)/float64(merged), "peak/merged")
}
