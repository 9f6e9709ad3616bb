package watch

import (
	"path"
	"slices"
	"strings"
	"time"

	"github.com/agentos-gateway/agentos-gateway/vms"
)

// Kind is the type of a watched entry.
type Kind string

// The kinds of entries.
const (
	KindFile      Kind = "file"
	KindDirectory Kind = "directory"
	KindSymlink   Kind = "symlink"
)

// Source says how a change was found.
type Source string

// The sources of changes.
const (
	// SourceAPI is a change made through the gateway's files API, reported
	// as it succeeded.
	SourceAPI Source = "api"
	// SourceScan is a change found by comparing two scans of the tree: one
	// a guest process made.
	SourceScan Source = "scan"
)

// Event is one change of a watched tree.
type Event struct {
	Op vms.FileOp
	// Path is the entry that changed; for a rename, its new name, and From
	// its old one.
	Path   string
	From   string
	Kind   Kind
	Source Source
	Time   time.Time
}

// entry is what a scan knows of one path: its type, its size, and its
// modification time once a stat told it (zero until then).
type entry struct {
	kind  Kind
	size  int64
	mtime time.Time
}

// snapshot is a scanned tree, by path.
type snapshot map[string]entry

// diff returns the changes that turn old into cur, in an order a client can
// apply: deletions deepest first, then creations shallowest first, then
// modifications. A directory is never "modified" (its own mtime moves with
// every child, which the child's event says); a change of type is a delete
// and a create; a file is modified when its size changed or when both
// snapshots know its mtime and they differ.
func diff(old, cur snapshot) []Event {
	var dels, creates, mods []Event
	for p, o := range old {
		c, ok := cur[p]
		switch {
		case !ok:
			dels = append(dels, Event{Op: vms.FileDeleted, Path: p, Kind: o.kind})
		case c.kind != o.kind:
			dels = append(dels, Event{Op: vms.FileDeleted, Path: p, Kind: o.kind})
			creates = append(creates, Event{Op: vms.FileCreated, Path: p, Kind: c.kind})
		case c.kind == KindDirectory:
		case c.size != o.size, !c.mtime.IsZero() && !o.mtime.IsZero() && !c.mtime.Equal(o.mtime):
			mods = append(mods, Event{Op: vms.FileModified, Path: p, Kind: c.kind})
		}
	}
	for p, c := range cur {
		if _, ok := old[p]; !ok {
			creates = append(creates, Event{Op: vms.FileCreated, Path: p, Kind: c.kind})
		}
	}
	byDepth := func(deepFirst bool) func(a, b Event) int {
		return func(a, b Event) int {
			da, db := strings.Count(a.Path, "/"), strings.Count(b.Path, "/")
			if da != db {
				if deepFirst {
					return db - da
				}
				return da - db
			}
			return strings.Compare(a.Path, b.Path)
		}
	}
	slices.SortFunc(dels, byDepth(true))
	slices.SortFunc(creates, byDepth(false))
	slices.SortFunc(mods, byDepth(false))
	return slices.Concat(dels, creates, mods)
}

// under reports whether p is root or inside it.
func under(p, root string) bool {
	return p == root || root == "/" || strings.HasPrefix(p, strings.TrimSuffix(root, "/")+"/")
}

// within reports whether a change of p concerns a watch of root: p is root
// or below it, and for a watch that is not recursive, root's direct child.
func within(p, root string, recursive bool) bool {
	if p == "" || !under(p, root) {
		return false
	}
	return recursive || p == root || path.Dir(p) == path.Clean(root)
}

// pending is a change the log already has, which a later scan will find
// too: the scan's matching events are dropped so that no change is told
// twice. gen is the scan generation it was recorded in.
type pending struct {
	ev  Event
	gen uint64
}

// covers reports whether the scanned event ev is the same change as p (or
// a part of it: the deletion of a deleted directory's children, the
// entries of a renamed tree).
func (p pending) covers(ev Event) bool {
	switch p.ev.Op {
	case vms.FileCreated, vms.FileModified:
		return (ev.Op == vms.FileCreated || ev.Op == vms.FileModified) && ev.Path == p.ev.Path
	case vms.FileDeleted:
		return ev.Op == vms.FileDeleted && under(ev.Path, p.ev.Path)
	case vms.FileRenamed:
		return ev.Op == vms.FileDeleted && under(ev.Path, p.ev.From) ||
			(ev.Op == vms.FileCreated || ev.Op == vms.FileModified) && under(ev.Path, p.ev.Path)
	}
	return false
}
