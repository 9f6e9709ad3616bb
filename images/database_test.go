package images

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestDatabaseRoundTrip: a session database packed at hibernation comes back
// byte for byte at the wake, with its write-ahead log when SQLite left one,
// and a stored tar holding anything else is refused and leaves no file.
func TestDatabaseRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		wal  []byte // nil: no write-ahead log
	}{
		{"with a write-ahead log", []byte("wal frames")},
		{"database alone", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := filepath.Join(t.TempDir(), "agentos-vm-1.db")
			db := bytes.Repeat([]byte("page"), 4096)
			if err := os.WriteFile(src, db, 0o600); err != nil {
				t.Fatal(err)
			}
			if tc.wal != nil {
				if err := os.WriteFile(src+"-wal", tc.wal, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			var packed bytes.Buffer
			if err := packDatabase(src, &packed); err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			got, err := unpackDatabase(&packed, dir)
			if err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(got); err != nil || !bytes.Equal(b, db) {
				t.Fatalf("the database came back as %d bytes, %v", len(b), err)
			}
			b, err := os.ReadFile(got + "-wal")
			switch {
			case tc.wal == nil && !os.IsNotExist(err):
				t.Fatalf("a write-ahead log appeared: %q %v", b, err)
			case tc.wal != nil && (err != nil || !bytes.Equal(b, tc.wal)):
				t.Fatalf("the write-ahead log came back as %q, %v", b, err)
			}
		})
	}
	t.Run("unexpected entry", func(t *testing.T) {
		var packed bytes.Buffer
		tw := tar.NewWriter(&packed)
		_ = tw.WriteHeader(&tar.Header{Name: "../escape", Mode: 0o600, Size: 1, Typeflag: tar.TypeReg})
		_, _ = tw.Write([]byte("x"))
		_ = tw.Close()
		dir := t.TempDir()
		if _, err := unpackDatabase(&packed, dir); err == nil {
			t.Fatal("a stored database with an unexpected entry was taken")
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Fatalf("files left behind: %v", entries)
		}
	})
}
