package images

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"slices"
	"strings"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// Restore merges the layers of a checkpoint into one snapshot tar, in
// a temporary file of dir that goes when the returned file is closed. The
// layers are read where the blob store keeps them (its opens seek, on disk
// and in PostgreSQL alike), so the merged image is the only local copy: a
// restore's peak disk use is the merged tree, not every layer besides.
func (s Store) Restore(ctx context.Context, layers []gateway.Checkpoint, dir string) (io.ReadSeekCloser, error) {
	opened := make([]io.ReadSeekCloser, 0, len(layers))
	defer func() {
		for _, rc := range opened {
			_ = rc.Close()
		}
	}()
	rs := make([]io.ReadSeeker, 0, len(layers))
	for _, l := range layers {
		rc, err := s.Blobs.Open(ctx, l.Image)
		if err != nil {
			return nil, fmt.Errorf("open checkpoint layer %s: %w", l.Image, err)
		}
		opened = append(opened, rc)
		rs = append(rs, rc)
	}
	out, err := os.CreateTemp(dir, "agentos-restore-*")
	if err != nil {
		return nil, err
	}
	img := &tempFile{out}
	if err := mergeLayers(out, rs); err != nil {
		img.Close()
		return nil, err
	}
	if _, err := out.Seek(0, io.SeekStart); err != nil {
		img.Close()
		return nil, err
	}
	return img, nil
}

// tempFile is a file removed when closed.
type tempFile struct{ *os.File }

func (f *tempFile) Close() error {
	err := f.File.Close()
	os.Remove(f.Name())
	return err
}

// layerEntry is where the newest version of one path is in the layers.
type layerEntry struct {
	layer  int
	hdr    *tar.Header
	offset int64
}

// mergeLayers writes into w the snapshot tar of the tree that layers, oldest
// first, describe: each path as its newest layer has it, unless a later
// layer deleted it, parents before children.
func mergeLayers(w io.Writer, layers []io.ReadSeeker) error {
	tree := map[string]layerEntry{}
	for i, r := range layers {
		cr := &countingReader{r: r}
		tr := tar.NewReader(cr)
		for {
			hdr, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return fmt.Errorf("checkpoint layer %d: %w", i, err)
			}
			if hdr.Typeflag == tar.TypeXGlobalHeader {
				var gone []string
				if err := json.Unmarshal([]byte(hdr.PAXRecords[deletedRecord]), &gone); err != nil && hdr.PAXRecords[deletedRecord] != "" {
					return fmt.Errorf("checkpoint layer %d: deleted paths: %w", i, err)
				}
				for _, g := range gone {
					g = strings.TrimPrefix(path.Clean("/"+g), "/")
					for name := range tree {
						if name == g || strings.HasPrefix(name, g+"/") {
							delete(tree, name)
						}
					}
				}
				continue
			}
			name := strings.TrimSuffix(hdr.Name, "/")
			if name == "" || path.IsAbs(name) || slices.Contains(strings.Split(name, "/"), "..") {
				return fmt.Errorf("checkpoint layer %d: entry %q outside the root", i, hdr.Name)
			}
			tree[path.Clean(name)] = layerEntry{layer: i, hdr: hdr, offset: cr.n}
		}
	}
	tw := tar.NewWriter(w)
	for _, name := range slices.Sorted(maps.Keys(tree)) {
		e := tree[name]
		hdr := *e.hdr
		if err := tw.WriteHeader(&hdr); err != nil {
			return err
		}
		if hdr.Typeflag != tar.TypeReg || hdr.Size == 0 {
			continue
		}
		r := layers[e.layer]
		if _, err := r.Seek(e.offset, io.SeekStart); err != nil {
			return err
		}
		if _, err := io.CopyN(tw, r, hdr.Size); err != nil {
			return fmt.Errorf("checkpoint layer %d: %s: %w", e.layer, name, err)
		}
	}
	return tw.Close()
}

// countingReader counts the bytes read through it: after tar.Reader.Next,
// the offset of the entry's content (the reader reads no further ahead).
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
