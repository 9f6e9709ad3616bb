package images

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/agentos"
	"github.com/agentos-gateway/agentos-gateway/archive"
)

// A hibernation disposes the engine's VM, so an image that lacks a file
// loses it for good, and nothing would say so: the engine's export once
// left out every file of a directory that a guest command had touched
// (issue 33). Before a VM is disposed its image is checked against the
// live tree as the files API lists it, a view of its own: every entry
// that two listings, one before the capture and one after, agree on must
// be in the image, of the same kind and, for a file, of the same size. An
// entry that changed between the two listings was being written while the
// capture ran (by a process, or the files API), and the image keeps what
// it read of it. A mismatch keeps the VM running.

// listed is what the check compares of one entry.
type listed struct {
	kind byte // 'd', 'l' or 'f'
	size int64
}

// listing is a VM's tree by absolute path, without the mount points'
// content.
type listing map[string]listed

// listedOf is what the check compares of an archive entry.
func listedOf(info archive.Info) listed {
	switch {
	case info.Mode.IsDir():
		return listed{kind: 'd'}
	case info.Mode&fs.ModeSymlink != 0:
		return listed{kind: 'l'}
	}
	return listed{kind: 'f', size: info.Size}
}

func (e listed) String() string {
	switch e.kind {
	case 'd':
		return "directory"
	case 'l':
		return "symlink"
	}
	return fmt.Sprintf("file of %d bytes", e.size)
}

// listTree lists the VM's tree through the engine's recursive listing,
// one call per subtree that holds no cut point, without the cut points
// and their content (the content of /opt/agentos alone is thousands of
// entries). A subtree the engine refuses to list in one call (past its
// entry or depth limits) is listed a directory at a time.
func listTree(ctx context.Context, t Tree, cut []string) (listing, error) {
	ctx, err := t.Settle(ctx) // one reconcile of the engine's shadow for the walk
	if err != nil {
		return nil, err
	}
	l := listing{}
	if err := listInto(ctx, t, "/", cut, l); err != nil {
		return nil, err
	}
	return l, nil
}

func listInto(ctx context.Context, t Tree, dir string, cut []string, l listing) error {
	holdsCut := slices.ContainsFunc(cut, func(c string) bool { return c != dir && under(c, dir) })
	if !holdsCut {
		es, err := t.ReadDirRecursive(ctx, dir, agentos.ReadDirOptions{})
		if err == nil {
			for _, e := range es {
				l[path.Clean(e.Path)] = dirEntryOf(e)
			}
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
	}
	es, err := t.ReadDir(ctx, dir)
	if err != nil {
		return err
	}
	for _, e := range es {
		p := path.Clean(e.Path)
		if slices.Contains(cut, p) {
			continue
		}
		l[p] = dirEntryOf(e)
		if e.IsDir && !e.IsSymlink {
			if err := listInto(ctx, t, p, cut, l); err != nil {
				return err
			}
		}
	}
	return nil
}

func dirEntryOf(e gateway.DirEntry) listed {
	switch {
	case e.IsSymlink:
		return listed{kind: 'l'}
	case e.IsDir:
		return listed{kind: 'd'}
	}
	return listed{kind: 'f', size: e.Size}
}

// Mismatch is an entry of the live tree that the image does not hold as
// it is.
type Mismatch struct {
	path      string
	live, img listed // img.kind 0: missing from the image
}

func (m Mismatch) String() string {
	if m.img.kind == 0 {
		return fmt.Sprintf("%s (%s) is not in the image", m.path, m.live)
	}
	return fmt.Sprintf("%s is a %s, the image has a %s", m.path, m.live, m.img)
}

// imageMismatches returns, by path, the entries that both listings agree
// on and the image does not hold as they are. An entry the listings
// disagree on, or that only one of them has, is left out: it changed
// while the capture ran.
func imageMismatches(img, before, after listing) []Mismatch {
	var out []Mismatch
	for p, b := range before {
		if a, ok := after[p]; !ok || a != b {
			continue
		}
		got, ok := img[p]
		if !ok || got.kind != b.kind || (b.kind == 'f' && got.size != b.size) {
			out = append(out, Mismatch{path: p, live: b, img: got})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out
}

// withoutSpecial drops from ms the entries that the image leaves out on
// purpose: fifos, sockets and devices, which the listing shows as files.
func withoutSpecial(ctx context.Context, t Tree, ms []Mismatch) []Mismatch {
	out := ms[:0]
	for _, m := range ms {
		if m.img.kind == 0 && m.live.kind == 'f' {
			info, err := (Source{t}).Lstat(ctx, m.path)
			if err == nil && !info.Mode.IsRegular() && !info.Mode.IsDir() && info.Mode&fs.ModeSymlink == 0 {
				continue
			}
		}
		out = append(out, m)
	}
	return out
}

// FirstMismatches are the first n of ms, for the log.
func FirstMismatches(ms []Mismatch, n int) []string {
	out := make([]string, 0, min(n, len(ms)))
	for _, m := range ms[:min(n, len(ms))] {
		out = append(out, m.String())
	}
	return out
}
