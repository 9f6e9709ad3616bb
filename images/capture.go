package images

import (
	"context"
	"errors"
	"io"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// Captured is a root filesystem captured into the blob store, with what the
// check against the live tree found (verify.go).
type Captured struct {
	Image
	// Mismatches are the entries of the live tree the image does not hold
	// as they are; with some, the image must not replace the VM.
	Mismatches []Mismatch
	// ShadowUnchecked says that the tree exceeds one export frame, past
	// which the engine's stale host copies cannot be checked (agentos
	// shadow.go), and may undo a guest's edits.
	ShadowUnchecked bool
}

// Capture writes t's root filesystem into the blob store as one image and
// checks the image against the live tree, listed before and after. An image
// with mismatches is stored all the same: the caller decides whether it
// keeps it (Discard) or not. A capture that fails stores nothing.
func (s Store) Capture(ctx context.Context, t Tree) (Captured, error) {
	cut := cutPoints(t)
	skips := t.ShadowSkips()
	before, err := listTree(ctx, t, cut)
	if err != nil {
		return Captured{}, s.engineError(err, "list the VM's files")
	}
	out := Captured{ShadowUnchecked: t.ShadowSkips() > skips}
	seen := listing{}
	name, size, err := Put(ctx, s.Blobs, func(w io.Writer) error {
		_, err := s.writeRoot(ctx, t, w, seen)
		return err
	})
	if err != nil {
		var ge *gateway.Error
		if errors.As(err, &ge) {
			return Captured{}, err
		}
		return Captured{}, gateway.Wrap(gateway.CodeUnavailable, err, "the VM's image could not be stored")
	}
	after, err := listTree(ctx, t, cut)
	if err != nil {
		s.Discard(name)
		return Captured{}, s.engineError(err, "list the VM's files")
	}
	out.Image = Image{Name: name, Bytes: size}
	out.Mismatches = withoutSpecial(ctx, t, imageMismatches(seen, before, after))
	return out, nil
}
