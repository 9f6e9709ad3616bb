package durability

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"
)

// excluded are the directories whose content is not the VM's own, left out
// of the model and of every comparison: the kernel's pseudo-filesystems,
// the software (the engine's package mount, the agents installed under
// /opt), and the places the engine and the agents write on their own (an
// agent session keeps its state under the home directory).
var excluded = []string{"/dev", "/proc", "/sys", "/opt", "/tmp", "/root/.pi", "/home/user/.pi", "/home/agentos/.pi"}

// isExcluded reports whether p is one of excluded or below one.
func isExcluded(p string) bool {
	return slices.ContainsFunc(excluded, func(d string) bool { return p == d || strings.HasPrefix(p, d+"/") })
}

// entry is one entry of a tree: a directory or a file (with its bytes) or a
// symlink (with its target).
type entry struct {
	kind byte // 'd', 'f' or 'l'
	mode fs.FileMode
	data []byte // a file's bytes, a symlink's target
}

func (n entry) String() string {
	switch n.kind {
	case 'd':
		return fmt.Sprintf("dir %04o", n.mode.Perm())
	case 'l':
		return fmt.Sprintf("symlink -> %s", n.data)
	}
	sum := sha256.Sum256(n.data)
	return fmt.Sprintf("file %04o %d bytes sha256:%s", n.mode.Perm(), len(n.data), hex.EncodeToString(sum[:6]))
}

func (n entry) equal(o entry) bool {
	return n.kind == o.kind && (n.kind == 'l' || n.mode.Perm() == o.mode.Perm()) && bytes.Equal(n.data, o.data)
}

// tree is a VM's filesystem by absolute, clean path, "/" left out.
type tree map[string]entry

func (t tree) clone() tree { return maps.Clone(t) }

// readTree reads a tar of the VM's directory dir (GET
// /v1/vms/{vm}/archive?path=dir, whose names are relative to dir) into t,
// without the excluded directories' content.
func readTree(r io.Reader, dir string, t tree) error {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("durability: read the archive of %s: %w", dir, err)
		}
		p := path.Join(dir, path.Clean("/"+hdr.Name))
		if p == "/" || isExcluded(p) {
			continue
		}
		n := entry{mode: fs.FileMode(hdr.Mode).Perm()}
		switch hdr.Typeflag {
		case tar.TypeDir:
			n.kind = 'd'
		case tar.TypeSymlink:
			n.kind, n.data = 'l', []byte(hdr.Linkname)
		case tar.TypeReg:
			n.kind = 'f'
			if n.data, err = io.ReadAll(tr); err != nil {
				return fmt.Errorf("durability: read %s from the VM's archive: %w", p, err)
			}
		default:
			continue // fifos and devices are not kept by snapshots either
		}
		t[p] = n
	}
}

// The model's operations. Each returns an error when the operation is not
// one the model can predict (a missing parent, an existing target): the
// generator only makes operations that succeed, so such an error is a bug
// of the generator.

func (t tree) isDir(p string) bool { return p == "/" || t[p].kind == 'd' }

func (t tree) writeFile(p string, data []byte, mode fs.FileMode) error {
	if !t.isDir(path.Dir(p)) {
		return fmt.Errorf("model: write %s: no parent directory", p)
	}
	if n, ok := t[p]; ok {
		if n.kind != 'f' {
			return fmt.Errorf("model: write %s: a %c", p, n.kind)
		}
		mode = n.mode // a write keeps the mode of the file it replaces
	}
	t[p] = entry{kind: 'f', mode: mode, data: slices.Clone(data)}
	return nil
}

func (t tree) appendFile(p string, data []byte) error {
	n, ok := t[p]
	if !ok || n.kind != 'f' {
		return fmt.Errorf("model: append to %s: not a file", p)
	}
	n.data = append(slices.Clone(n.data), data...)
	t[p] = n
	return nil
}

func (t tree) chmod(p string, mode fs.FileMode) error {
	n, ok := t[p]
	if !ok {
		return fmt.Errorf("model: chmod %s: missing", p)
	}
	n.mode = mode
	t[p] = n
	return nil
}

// mkdirAll creates p and its missing parents.
func (t tree) mkdirAll(p string) error {
	if p == "/" {
		return nil
	}
	if n, ok := t[p]; ok {
		if n.kind != 'd' {
			return fmt.Errorf("model: mkdir %s: a %c", p, n.kind)
		}
		return nil
	}
	if err := t.mkdirAll(path.Dir(p)); err != nil {
		return err
	}
	t[p] = entry{kind: 'd', mode: 0o755}
	return nil
}

// remove removes p with everything below it.
func (t tree) remove(p string) error {
	if _, ok := t[p]; !ok {
		return fmt.Errorf("model: remove %s: missing", p)
	}
	for q := range t {
		if q == p || strings.HasPrefix(q, p+"/") {
			delete(t, q)
		}
	}
	return nil
}

// move renames from, with everything below it, to to, which must not
// exist, in an existing directory.
func (t tree) move(from, to string) error {
	if _, ok := t[from]; !ok {
		return fmt.Errorf("model: move %s: missing", from)
	}
	if _, ok := t[to]; ok {
		return fmt.Errorf("model: move to %s: exists", to)
	}
	if !t.isDir(path.Dir(to)) || to == from || strings.HasPrefix(to, from+"/") {
		return fmt.Errorf("model: move %s to %s: not a possible target", from, to)
	}
	moved := tree{}
	for q, n := range t {
		if q == from || strings.HasPrefix(q, from+"/") {
			moved[to+strings.TrimPrefix(q, from)] = n
			delete(t, q)
		}
	}
	maps.Copy(t, moved)
	return nil
}

// diff lists the paths where got differs from want, sorted, each with both
// sides ("-" for missing).
func diff(want, got tree) []string {
	var out []string
	for p, w := range want {
		g, ok := got[p]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s: want %s, the VM has nothing", p, w))
		case !w.equal(g):
			out = append(out, fmt.Sprintf("%s: want %s, the VM has %s", p, w, g))
		}
	}
	for p, g := range got {
		if _, ok := want[p]; !ok {
			out = append(out, fmt.Sprintf("%s: want nothing, the VM has %s", p, g))
		}
	}
	slices.Sort(out)
	return out
}

// String lists the tree, a line per entry, sorted by path.
func (t tree) String() string {
	var b strings.Builder
	for _, p := range slices.Sorted(maps.Keys(t)) {
		fmt.Fprintf(&b, "%s\t%s\n", p, t[p])
	}
	return b.String()
}
