package images

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sync"
)

// Blobs holds the bytes of images and snapshots, each under the name Put
// chose. What Open returns seeks: a VM created from a snapshot or an
// image reads its bytes once, and a restore reads its layers where they
// are. DirBlobs and LargeObjectBlobs implement it; an object store is
// the next.
type Blobs interface {
	Put(ctx context.Context, r io.Reader) (name string, size int64, err error)
	Open(ctx context.Context, name string) (io.ReadSeekCloser, error)
	Delete(ctx context.Context, name string) error
}

// Put streams what write writes into blobs, through a pipe the store
// reads: this function owns the writer's goroutine and waits for it, also
// when the store stops reading first. When write fails, the store's error
// is the one write ended the stream with.
func Put(ctx context.Context, blobs Blobs, write func(w io.Writer) error) (name string, size int64, err error) {
	pr, pw := io.Pipe()
	var wg sync.WaitGroup
	wg.Go(func() { pw.CloseWithError(write(pw)) })
	name, size, err = blobs.Put(ctx, pr)
	pr.CloseWithError(errors.New("images: the blob store stopped reading"))
	wg.Wait()
	return name, size, err
}

// DirBlobs keeps blobs as files of a directory: the gateway's
// data directory with a SQLite store, which only one node uses.
type DirBlobs struct {
	Dir string
}

// blobName is the shape of the names DirBlobs gives.
var blobName = regexp.MustCompile(`^[0-9a-f]{32}\.tar$`)

// Put writes r to a new file, under a temporary name until it is complete.
func (d DirBlobs) Put(ctx context.Context, r io.Reader) (string, int64, error) {
	if err := os.MkdirAll(d.Dir, 0o700); err != nil {
		return "", 0, fmt.Errorf("images: %w", err)
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	name := hex.EncodeToString(b[:]) + ".tar"
	tmp, err := os.CreateTemp(d.Dir, ".put-*")
	if err != nil {
		return "", 0, fmt.Errorf("images: %w", err)
	}
	defer os.Remove(tmp.Name())
	n, err := io.Copy(tmp, contextReader{ctx, r})
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", 0, fmt.Errorf("images: write blob: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(d.Dir, name)); err != nil {
		return "", 0, fmt.Errorf("images: %w", err)
	}
	return name, n, nil
}

// Open opens a blob for reading.
func (d DirBlobs) Open(_ context.Context, name string) (io.ReadSeekCloser, error) {
	if !blobName.MatchString(name) {
		return nil, fmt.Errorf("images: blob name %q is not one of this store's", name)
	}
	f, err := os.Open(filepath.Join(d.Dir, name))
	if err != nil {
		return nil, err
	}
	return f, nil
}

// Delete removes a blob; one that is gone is no error.
func (d DirBlobs) Delete(_ context.Context, name string) error {
	if !blobName.MatchString(name) {
		return fmt.Errorf("images: blob name %q is not one of this store's", name)
	}
	if err := os.Remove(filepath.Join(d.Dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("images: %w", err)
	}
	return nil
}

// contextReader stops a copy once ctx ends.
type contextReader struct {
	ctx context.Context
	r   io.Reader
}

func (c contextReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// LargeObjects is what LargeObjectBlobs needs of the store: PostgreSQL's
// large objects (store.DB).
type LargeObjects interface {
	PutLargeObject(ctx context.Context, r io.Reader) (string, int64, error)
	OpenLargeObject(ctx context.Context, name string) (io.ReadSeekCloser, error)
	DeleteLargeObject(ctx context.Context, name string) error
}

// LargeObjectBlobs keeps blobs as PostgreSQL large objects, which
// every node sharing the store reads.
type LargeObjectBlobs struct {
	DB LargeObjects
}

// Put stores r as a new large object.
func (l LargeObjectBlobs) Put(ctx context.Context, r io.Reader) (string, int64, error) {
	return l.DB.PutLargeObject(ctx, r)
}

// Open reads a large object.
func (l LargeObjectBlobs) Open(ctx context.Context, name string) (io.ReadSeekCloser, error) {
	return l.DB.OpenLargeObject(ctx, name)
}

// Delete removes a large object.
func (l LargeObjectBlobs) Delete(ctx context.Context, name string) error {
	return l.DB.DeleteLargeObject(ctx, name)
}
