package archive

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"
)

// memFS is an in-memory filesystem with real symlink semantics: paths are
// resolved component by component, following links, as a kernel would, so
// that a write through a link lands where the link points and the tests
// see it. It stands in for a VM's filesystem in the fuzz target, which must
// run millions of inputs without an engine.
type memFS struct {
	nodes map[string]*memNode
}

type memNode struct {
	mode   fs.FileMode
	data   *[]byte // shared by hard links
	target string
	mtime  time.Time
}

var errNotExist = fs.ErrNotExist

func newMemFS(dirs ...string) *memFS {
	m := &memFS{nodes: map[string]*memNode{"/": {mode: fs.ModeDir | 0o755}}}
	for _, d := range dirs {
		for p := d; p != "/"; p = path.Dir(p) {
			if m.nodes[p] == nil {
				m.nodes[p] = &memNode{mode: fs.ModeDir | 0o755}
			}
		}
	}
	return m
}

// resolve returns the canonical path of name, following symlinks in every
// component, and the final one too when follow is set.
func (m *memFS) resolve(name string, follow bool) (string, error) {
	return m.resolveN(name, follow, 0)
}

func (m *memFS) resolveN(name string, follow bool, hops int) (string, error) {
	if hops > 40 {
		return "", errors.New("too many links")
	}
	segs := strings.Split(strings.Trim(path.Clean(name), "/"), "/")
	cur := "/"
	for i, seg := range segs {
		if seg == "" {
			continue
		}
		if seg == ".." {
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, seg)
		n := m.nodes[next]
		last := i == len(segs)-1
		if n != nil && n.mode&fs.ModeSymlink != 0 && (!last || follow) {
			t := n.target
			if !strings.HasPrefix(t, "/") {
				t = path.Join(cur, t)
			}
			resolved, err := m.resolveN(t, true, hops+1)
			if err != nil {
				return "", err
			}
			next = resolved
		} else if n != nil && !n.mode.IsDir() && !last {
			return "", fmt.Errorf("%s: not a directory", next)
		} else if n == nil && !last {
			return "", fmt.Errorf("%s: %w", next, errNotExist)
		}
		cur = next
	}
	return cur, nil
}

func (m *memFS) parentDir(name string) (string, error) {
	p, err := m.resolve(name, false)
	if err != nil {
		return "", err
	}
	if d := m.nodes[path.Dir(p)]; d == nil || !d.mode.IsDir() {
		return "", fmt.Errorf("%s: parent %w", name, errNotExist)
	}
	return p, nil
}

func (m *memFS) MkdirAll(_ context.Context, name string) error {
	cur := "/"
	for _, seg := range strings.Split(strings.Trim(path.Clean(name), "/"), "/") {
		if seg == "" {
			continue
		}
		p, err := m.resolve(path.Join(cur, seg), true)
		if err != nil {
			return err
		}
		n := m.nodes[p]
		switch {
		case n == nil:
			m.nodes[p] = &memNode{mode: fs.ModeDir | 0o755}
		case !n.mode.IsDir():
			return fmt.Errorf("%s: not a directory", p)
		}
		cur = p
	}
	return nil
}

func (m *memFS) WriteFile(_ context.Context, name string, r io.Reader) (int64, error) {
	p, err := m.resolve(name, true)
	if err != nil {
		return 0, err
	}
	if d := m.nodes[path.Dir(p)]; d == nil || !d.mode.IsDir() {
		return 0, fmt.Errorf("%s: parent %w", name, errNotExist)
	}
	b, err := io.ReadAll(r)
	if n := m.nodes[p]; n != nil {
		if !n.mode.IsRegular() {
			return 0, fmt.Errorf("%s: is a directory", p)
		}
		*n.data = b
	} else {
		m.nodes[p] = &memNode{mode: 0o644, data: &b}
	}
	return int64(len(b)), err
}

func (m *memFS) Symlink(_ context.Context, target, name string) error {
	p, err := m.parentDir(name)
	if err != nil {
		return err
	}
	if m.nodes[p] != nil {
		return fmt.Errorf("%s: %w", p, fs.ErrExist)
	}
	m.nodes[p] = &memNode{mode: fs.ModeSymlink | 0o777, target: target}
	return nil
}

func (m *memFS) Link(_ context.Context, existing, name string) error {
	src, err := m.resolve(existing, false)
	if err != nil {
		return err
	}
	n := m.nodes[src]
	if n == nil || !n.mode.IsRegular() {
		return fmt.Errorf("%s: not a file", existing)
	}
	p, err := m.parentDir(name)
	if err != nil {
		return err
	}
	if m.nodes[p] != nil {
		return fmt.Errorf("%s: %w", p, fs.ErrExist)
	}
	m.nodes[p] = n
	return nil
}

func (m *memFS) node(name string, follow bool) (*memNode, error) {
	p, err := m.resolve(name, follow)
	if err != nil {
		return nil, err
	}
	n := m.nodes[p]
	if n == nil {
		return nil, fmt.Errorf("%s: %w", name, errNotExist)
	}
	return n, nil
}

func (m *memFS) Chmod(_ context.Context, name string, perm fs.FileMode) error {
	n, err := m.node(name, true)
	if err != nil {
		return err
	}
	n.mode = n.mode.Type() | perm
	return nil
}

func (m *memFS) Chtimes(_ context.Context, name string, mtime time.Time) error {
	n, err := m.node(name, true)
	if err != nil {
		return err
	}
	n.mtime = mtime
	return nil
}

func (m *memFS) Lstat(_ context.Context, name string) (Info, error) {
	n, err := m.node(name, false)
	if err != nil {
		return Info{}, err
	}
	info := Info{Mode: n.mode, ModTime: n.mtime}
	if n.data != nil {
		info.Size = int64(len(*n.data))
	}
	return info, nil
}

func (m *memFS) ReadDir(_ context.Context, name string) ([]string, error) {
	p, err := m.resolve(name, true)
	if err != nil {
		return nil, err
	}
	var names []string
	for q := range m.nodes {
		if q != "/" && path.Dir(q) == p {
			names = append(names, path.Base(q))
		}
	}
	slices.Sort(names)
	return names, nil
}

func (m *memFS) Readlink(_ context.Context, name string) (string, error) {
	n, err := m.node(name, false)
	if err != nil {
		return "", err
	}
	return n.target, nil
}

func (m *memFS) ReadFile(_ context.Context, name string, w io.Writer) (int64, error) {
	n, err := m.node(name, true)
	if err != nil {
		return 0, err
	}
	k, err := io.Copy(w, bytes.NewReader(*n.data))
	return k, err
}

// snapshot returns a printable copy of every node outside dir, to compare
// before and after an extraction into dir.
func (m *memFS) snapshot(dir string) map[string]string {
	out := map[string]string{}
	for p, n := range m.nodes {
		if p == dir || strings.HasPrefix(p, dir+"/") {
			continue
		}
		s := fmt.Sprintf("%v %q %v", n.mode, n.target, n.mtime)
		if n.data != nil {
			s += fmt.Sprintf(" %q", *n.data)
		}
		out[p] = s
	}
	return out
}
