package images

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/agentos"
	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

type tarEntry struct {
	name, link string
	typ        byte
	mode       int64
	body       []byte
}

func tarOf(t *testing.T, es []tarEntry) *bytes.Reader {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link, Size: int64(len(e.body)), Uid: 1000, Gid: 1000}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(e.body); e.typ == tar.TypeReg && err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return bytes.NewReader(buf.Bytes())
}

// TestReadRoot: a snapshot's directories and symlinks always travel in the
// create frame, files while their content fits it, the others are deferred
// (as empty placeholders while the frame has room for their entry), and
// the frame never passes agentos.SnapshotFrameBytes.
func TestReadRoot(t *testing.T) {
	small := make([]tarEntry, 0, 3000)
	small = append(small, tarEntry{name: "many/", typ: tar.TypeDir, mode: 0o755})
	for i := range 3000 {
		small = append(small, tarEntry{name: fmt.Sprintf("many/f%04d", i), typ: tar.TypeReg, mode: 0o644, body: bytes.Repeat([]byte{byte(i), 0xff}, 2048)})
	}
	tests := []struct {
		name         string
		entries      []tarEntry
		wantDeferred []string
		minDeferred  int
	}{
		{"kinds", []tarEntry{
			{name: "workspace/", typ: tar.TypeDir, mode: 0o750},
			{name: "workspace/text", typ: tar.TypeReg, mode: 0o640, body: []byte("a \"quoted\" \\ line\x01\n")},
			{name: "workspace/empty", typ: tar.TypeReg, mode: 0o600},
			{name: "workspace/bin", typ: tar.TypeReg, mode: 0o755, body: []byte{0, 0xff, 0xfe}},
			{name: "workspace/link", typ: tar.TypeSymlink, link: "../etc", mode: 0o777},
			{name: "workspace/big", typ: tar.TypeReg, mode: 0o644, body: bytes.Repeat([]byte("x"), agentos.SnapshotFrameBytes)},
			// A name past the tar header's 100 bytes: its header is two.
			{name: "workspace/" + strings.Repeat("long-", 30) + "big", typ: tar.TypeReg, mode: 0o600, body: bytes.Repeat([]byte{0, 'y'}, agentos.SnapshotFrameBytes/2)},
		}, []string{"/workspace/big", "/workspace/" + strings.Repeat("long-", 30) + "big"}, 2},
		{"more than a frame of small files", small, nil, 100},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stored := tarOf(t, tc.entries)
			root, err := readRoot(stored)
			if err != nil {
				t.Fatal(err)
			}
			bodies := map[string][]byte{}
			for _, te := range tc.entries {
				bodies["/"+strings.TrimSuffix(te.name, "/")] = te.body
			}
			deferred := map[string]bool{}
			for _, d := range root.deferred {
				deferred[d.name] = true
				// Where the restore reads the file: its bytes, as stored.
				got := make([]byte, d.size)
				if _, err := stored.ReadAt(got, d.offset); err != nil || !bytes.Equal(got, bodies[d.name]) {
					t.Errorf("%s: %d bytes at offset %d are not its content (%v)", d.name, d.size, d.offset, err)
				}
			}
			for _, d := range tc.wantDeferred {
				if !deferred[d] {
					t.Errorf("%s is not deferred", d)
				}
			}
			if len(root.deferred) < tc.minDeferred {
				t.Errorf("%d files deferred, want at least %d", len(root.deferred), tc.minDeferred)
			}
			inFrame := map[string]protocol.RootFilesystemEntry{}
			size := 0
			for _, e := range root.Entries {
				inFrame[e.Path] = e
				size += 128 + len(e.Path)
				if e.Content != nil {
					size += jsonCost(*e.Content)
				}
				if e.Kind == protocol.RootFilesystemEntryKindFile && e.Content == nil && !deferred[e.Path] {
					t.Errorf("%s travels without content and is not deferred", e.Path)
				}
			}
			if size > agentos.SnapshotFrameBytes {
				t.Errorf("the frame holds %d bytes, over %d", size, agentos.SnapshotFrameBytes)
			}
			for _, te := range tc.entries {
				p := "/" + strings.TrimSuffix(te.name, "/")
				e, ok := inFrame[p]
				if !ok && !deferred[p] {
					t.Fatalf("%s is neither in the frame nor deferred", p)
				}
				if !ok {
					continue
				}
				if *e.Mode&0o7777 != uint32(te.mode) || *e.UID != 1000 {
					t.Errorf("%s: mode %o uid %d", p, *e.Mode, *e.UID)
				}
				if te.typ == tar.TypeSymlink && (e.Target == nil || *e.Target != te.link) {
					t.Errorf("%s: target %v", p, e.Target)
				}
				if e.Content != nil {
					got, err := agentos.DecodeContent(e)
					if err != nil || !bytes.Equal(got, te.body) {
						t.Errorf("%s: content %q, %v", p, got, err)
					}
				}
			}
		})
	}
}

// TestReadRootRefusesEntriesOutsideRoot: a stored snapshot whose names climb
// out of the root is not read (the gateway writes none such).
func TestReadRootRefusesEntriesOutsideRoot(t *testing.T) {
	for _, name := range []string{"../etc/passwd", "/abs", "a/../../b"} {
		_, err := readRoot(tarOf(t, []tarEntry{{name: name, typ: tar.TypeReg, mode: 0o644, body: []byte("x")}}))
		if gateway.ErrorCode(err) != gateway.CodeInternal {
			t.Errorf("%q: %v, want an internal error", name, err)
		}
	}
}

// TestStoredFile: a deferred file reads exactly its size from where the
// stored bytes are, and stored bytes that end before it does are an error
// rather than a shorter file.
func TestStoredFile(t *testing.T) {
	tests := []struct {
		name    string
		stored  string
		size    int64
		want    string
		wantErr bool
	}{
		{"the file's bytes", "abc", 3, "abc", false},
		{"followed by the next entry", "abcdef", 3, "abc", false},
		{"empty", "def", 0, "", false},
		{"cut short", "ab", 3, "ab", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := io.ReadAll(&storedFile{r: strings.NewReader(tc.stored), name: "/f", left: tc.size})
			if string(got) != tc.want {
				t.Errorf("read %q, want %q", got, tc.want)
			}
			if tc.wantErr != (err != nil) || (err != nil && gateway.ErrorCode(err) != gateway.CodeInternal) {
				t.Errorf("err = %v, want an internal error: %v", err, tc.wantErr)
			}
		})
	}
}
