package archive

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
)

// Write streams root as a tar archive to w. A directory becomes its tree
// with names relative to it (directories included, each before its
// content); a single file or symlink becomes one entry named after it.
// Modes (permission bits, setuid, setgid and sticky too) and modification
// times are kept and symlinks stay
// symlinks; fifos, devices and sockets are left out, since a tar of them
// could not be extracted again by Extract. Memory is bounded by one
// directory's listing per level of depth, whatever the files' sizes.
//
// The tar trailer is written only when every entry was; an error leaves a
// truncated archive behind, which tar readers report as such.
func Write(ctx context.Context, w io.Writer, src Source, root string) error {
	info, err := src.Lstat(ctx, root)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	if info.Mode.IsDir() {
		err = writeDir(ctx, tw, src, root, "")
	} else {
		err = writeEntry(ctx, tw, src, root, path.Base(root), info)
	}
	if err != nil {
		return err
	}
	return tw.Close()
}

func writeDir(ctx context.Context, tw *tar.Writer, src Source, dir, rel string) error {
	names, err := src.ReadDir(ctx, dir)
	if err != nil {
		return err
	}
	// Sorted, so that the same tree always gives the same archive.
	slices.Sort(names)
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		p, r := path.Join(dir, name), path.Join(rel, name)
		info, err := src.Lstat(ctx, p)
		if err != nil {
			return err
		}
		if err := writeEntry(ctx, tw, src, p, r, info); err != nil {
			return err
		}
		if info.Mode.IsDir() {
			if err := writeDir(ctx, tw, src, p, r); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeEntry writes the header of one entry and, for a regular file, its
// bytes.
func writeEntry(ctx context.Context, tw *tar.Writer, src Source, p, rel string, info Info) error {
	hdr := &tar.Header{Name: rel, Mode: UnixPerm(info.Mode), ModTime: info.ModTime, Uid: info.UID, Gid: info.GID, Format: tar.FormatPAX}
	switch {
	case info.Mode.IsDir():
		hdr.Typeflag, hdr.Name = tar.TypeDir, rel+"/"
	case info.Mode&fs.ModeSymlink != 0:
		target, err := src.Readlink(ctx, p)
		if err != nil {
			return err
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
	case info.Mode.IsRegular():
		hdr.Typeflag, hdr.Size = tar.TypeReg, info.Size
	default:
		return nil
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("archive: header of %s: %w", rel, err)
	}
	if hdr.Typeflag != tar.TypeReg {
		return nil
	}
	n, err := src.ReadFile(ctx, p, tw)
	if err != nil {
		return err
	}
	if n != info.Size {
		return fmt.Errorf("archive: %s changed while it was read (%d bytes, then %d)", rel, info.Size, n)
	}
	return nil
}
