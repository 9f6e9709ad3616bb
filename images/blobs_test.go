package images

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"strings"
	"testing"
)

// TestDirBlobs: bytes put come back, a put that fails leaves no file, a
// deleted blob is gone (and deleting it again is no error), and names that
// are not the store's own are refused before any file is touched.
func TestDirBlobs(t *testing.T) {
	ctx := context.Background()
	d := DirBlobs{Dir: t.TempDir() + "/blobs"}
	data := bytes.Repeat([]byte{0, 1, 0xff}, 100000)
	name, n, err := d.Put(ctx, bytes.NewReader(data))
	if err != nil || n != int64(len(data)) {
		t.Fatalf("Put = %q, %d, %v", name, n, err)
	}
	rc, err := d.Open(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes, %v", len(got), err)
	}

	broken := errors.New("the capture failed")
	if _, _, err := d.Put(ctx, io.MultiReader(strings.NewReader("partial"), errReader{broken})); !errors.Is(err, broken) {
		t.Fatalf("Put of a failing reader: %v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := d.Put(cancelled, strings.NewReader("x")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put with an ended context: %v", err)
	}
	if es, err := os.ReadDir(d.Dir); err != nil || len(es) != 1 {
		t.Fatalf("the directory holds %v (%v), want the one blob", es, err)
	}

	if err := d.Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
	if err := d.Delete(ctx, name); err != nil {
		t.Fatalf("deleting a deleted blob: %v", err)
	}
	if _, err := d.Open(ctx, name); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open of a deleted blob: %v", err)
	}
	for _, bad := range []string{"../gateway.db", "", "x.tar", "/etc/passwd"} {
		if _, err := d.Open(ctx, bad); err == nil {
			t.Errorf("Open(%q) succeeded", bad)
		}
		if err := d.Delete(ctx, bad); err == nil {
			t.Errorf("Delete(%q) succeeded", bad)
		}
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
