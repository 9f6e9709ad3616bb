package images

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/agentos-gateway/agentos-gateway/agentos"
)

// PutDatabase puts the files of the SQLite database at path, which its VM
// has closed, into the blob store as one tar (packDatabase): a VM's agent
// sessions, which hibernate with it.
func (s Store) PutDatabase(ctx context.Context, path string) (string, error) {
	name, _, err := Put(ctx, s.Blobs, func(w io.Writer) error { return packDatabase(path, w) })
	return name, err
}

// RestoreDatabase writes a stored session database into a new file of dir,
// for a woken VM to take on, and returns the file's path.
func (s Store) RestoreDatabase(ctx context.Context, name, dir string) (string, error) {
	rc, err := s.Blobs.Open(ctx, name)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	return unpackDatabase(rc, dir)
}

// A session database travels as a tar of its files: the database as "db",
// and its write-ahead log as "db-wal" when SQLite left one.
const (
	dbEntry    = "db"
	dbWALEntry = "db-wal"
)

// packDatabase writes the database at path, and its write-ahead log if
// there is one, as a tar into w.
func packDatabase(path string, w io.Writer) error {
	tw := tar.NewWriter(w)
	for entry, file := range map[string]string{dbEntry: path, dbWALEntry: path + "-wal"} {
		f, err := os.Open(file)
		if errors.Is(err, fs.ErrNotExist) && entry == dbWALEntry {
			continue
		}
		if err != nil {
			return err
		}
		err = func() error {
			defer f.Close()
			st, err := f.Stat()
			if err != nil {
				return err
			}
			if err := tw.WriteHeader(&tar.Header{Name: entry, Mode: 0o600, Size: st.Size(), Typeflag: tar.TypeReg}); err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			return err
		}()
		if err != nil {
			return err
		}
	}
	return tw.Close()
}

// unpackDatabase writes a database packDatabase wrote into a new file of
// dir (and its write-ahead log beside it), and returns the file's path.
func unpackDatabase(r io.Reader, dir string) (_ string, err error) {
	f, err := os.CreateTemp(dir, "agentos-vm-*.db")
	if err != nil {
		return "", err
	}
	path := f.Name()
	f.Close()
	defer func() {
		if err != nil {
			for _, file := range agentos.DatabaseFiles(path) {
				_ = os.Remove(file)
			}
		}
	}()
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return path, nil
		}
		if err != nil {
			return "", err
		}
		var dst string
		switch hdr.Name {
		case dbEntry:
			dst = path
		case dbWALEntry:
			dst = path + "-wal"
		default:
			return "", fmt.Errorf("images: unexpected %q in a stored session database", hdr.Name)
		}
		if err := writeFile(dst, tr); err != nil {
			return "", err
		}
	}
}

// writeFile writes r into the file name, created or truncated.
func writeFile(name string, r io.Reader) error {
	f, err := os.OpenFile(name, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
