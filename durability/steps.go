package durability

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"path"
	"slices"
	"strings"
)

// Kind is a kind of step.
type Kind string

// The steps. The first group changes files through the files API, the
// second through a command the VM runs; the faults end the engine's VM
// (or the gateway, or the node) and the next call brings it back, after
// which the whole tree is compared with the model.
const (
	APIWrite   Kind = "api_write"   // PUT .../files
	APIMkdirs  Kind = "api_mkdirs"  // POST .../dirs
	APIArchive Kind = "api_archive" // PUT .../archive
	APIDelete  Kind = "api_delete"  // DELETE .../files (recursive)
	APIMove    Kind = "api_move"    // POST .../fs/move

	GuestWrite  Kind = "guest_write"  // printf > f, or head -c N /dev/zero | tr > f
	GuestAppend Kind = "guest_append" // printf >> f, sometimes after a chmod
	GuestRemove Kind = "guest_rm"     // rm -rf
	GuestMove   Kind = "guest_mv"     // mv
	GuestMkdir  Kind = "guest_mkdir"  // mkdir -p
	GuestRead   Kind = "guest_read"   // ls, cat, find, stat: changes nothing

	Hibernate   Kind = "hibernate"    // POST .../hibernate, then a waking call
	Checkpoint  Kind = "checkpoint"   // POST .../checkpoint
	KillSidecar Kind = "sidecar_kill" // SIGKILL the VM's sidecar, then POST .../wake restores the checkpoint
	Restart     Kind = "restart"      // SIGTERM the gateway (or a node) and start it again
	Drain       Kind = "drain"        // POST /v1/nodes/{node}/drain of the VM's node, then start the node again
)

// Waker is the call that wakes a hibernated VM.
type Waker string

const (
	WakeExec    Waker = "exec"
	WakeFiles   Waker = "files"
	WakeShell   Waker = "shell"
	WakeSession Waker = "session"
	WakeCall    Waker = "wake" // POST .../wake
)

var wakers = []Waker{WakeExec, WakeFiles, WakeShell, WakeSession, WakeCall}

// step is one step of a sequence, with everything it does decided when it
// is made, so that a seed gives the same steps again.
type step struct {
	kind     Kind
	path, to string
	data     []byte // the bytes a write or an append adds
	mode     fs.FileMode
	cmd      string // a guest step's command
	archive  tree   // an archive's entries, by path relative to path
	wake     Waker
}

func (s step) String() string {
	switch s.kind {
	case APIWrite:
		return fmt.Sprintf("%s %s (%d bytes)", s.kind, s.path, len(s.data))
	case APIMkdirs, APIDelete:
		return fmt.Sprintf("%s %s", s.kind, s.path)
	case APIMove:
		return fmt.Sprintf("%s %s %s", s.kind, s.path, s.to)
	case APIArchive:
		return fmt.Sprintf("%s %s (%d entries)", s.kind, s.path, len(s.archive))
	case Hibernate, Restart, Drain:
		return fmt.Sprintf("%s, woken by %s", s.kind, s.wake)
	case Checkpoint, KillSidecar:
		return string(s.kind)
	}
	cmd := s.cmd
	if len(cmd) > 120 {
		cmd = cmd[:117] + "..."
	}
	return fmt.Sprintf("%s: %s", s.kind, cmd)
}

// wakes reports whether the step ends with the VM brought back, after
// which the tree is compared.
func (s step) wakes() bool {
	return s.kind == Hibernate || s.kind == KillSidecar || s.kind == Restart || s.kind == Drain
}

// apply changes the model as the step's success does.
func (s step) apply(m tree) error {
	switch s.kind {
	case APIWrite:
		return m.writeFile(s.path, s.data, 0o644)
	case GuestWrite:
		return m.writeFile(s.path, s.data, 0o644)
	case APIMkdirs, GuestMkdir:
		return m.mkdirAll(s.path)
	case APIDelete, GuestRemove:
		return m.remove(s.path)
	case APIMove, GuestMove:
		return m.move(s.path, s.to)
	case GuestAppend:
		if s.mode != 0 {
			if err := m.chmod(s.path, s.mode); err != nil {
				return err
			}
		}
		return m.appendFile(s.path, s.data)
	case APIArchive:
		for _, rel := range slices.Sorted(maps.Keys(s.archive)) {
			n, p := s.archive[rel], path.Join(s.path, rel)
			var err error
			if n.kind == 'd' {
				err = m.mkdirAll(p)
			} else {
				err = m.writeFile(p, n.data, n.mode)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// tarOf is the step's archive as a tar stream.
func (s step) tarOf() ([]byte, error) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, rel := range slices.Sorted(maps.Keys(s.archive)) {
		n := s.archive[rel]
		hdr := &tar.Header{Name: rel, Mode: int64(n.mode.Perm()), Typeflag: tar.TypeReg, Size: int64(len(n.data))}
		if n.kind == 'd' {
			hdr.Name, hdr.Typeflag, hdr.Size = rel+"/", tar.TypeDir, 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(n.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// generator makes a sequence's steps from its seed and the model.
type generator struct {
	rng     *rand.Rand
	cluster bool // drains are possible
	faults  bool // restarts (which stop every sequence's VMs) are possible
	// checkpointed: a checkpoint was taken since the VM last came back,
	// so that a sidecar kill has something to restore.
	checkpointed bool
}

func newGenerator(seed uint64, cluster, faults bool) *generator {
	return &generator{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), cluster: cluster, faults: faults}
}

// The base directories that steps may create entries in, besides the
// workspace: the engine's own, whose files must stay whatever their
// directory goes through.
var baseDirs = []string{"/etc", "/usr/bin", "/home/agentos"}

const workspace = "/workspace"

// guestWritable reports whether the VM's own user may change p's
// directory: the base directories are root's, the workspace and the home
// directory the user's; the files API writes anywhere.
func guestWritable(p string) bool {
	return strings.HasPrefix(p, workspace+"/") || strings.HasPrefix(p, "/home/agentos/")
}

// ours reports whether p is an entry a step made, which steps may change:
// below the workspace, or named by a step (the base's own files stay, so
// that the VM's commands keep working).
func ours(p string) bool {
	return strings.HasPrefix(p, workspace+"/") || strings.HasPrefix(path.Base(p), "dur-")
}

func pick[T any](g *generator, xs []T) T { return xs[g.rng.IntN(len(xs))] }

func (g *generator) name() string {
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := []byte("dur-")
	for range 1 + g.rng.IntN(6) {
		b = append(b, letters[g.rng.IntN(len(letters))])
	}
	if g.rng.IntN(3) == 0 {
		b = append(b, ".txt"...)
	}
	return string(b)
}

// dirs are the directories steps may create entries in.
func (g *generator) dirs(m tree) []string {
	out := []string{workspace}
	for _, d := range baseDirs {
		if m.isDir(d) {
			out = append(out, d)
		}
	}
	for p, n := range m {
		if n.kind == 'd' && ours(p) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// entries are the entries steps may change, of kind ('f', 'd') or any (0).
func (g *generator) entries(m tree, kind byte) []string {
	var out []string
	for p, n := range m {
		if ours(p) && (kind == 0 || n.kind == kind) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// newPath is a path that does not exist, in an existing directory.
func (g *generator) newPath(m tree) string { return g.newPathIn(m, g.dirs(m)) }

// newGuestPath is a path that does not exist, in a directory the VM's
// user may write.
func (g *generator) newGuestPath(m tree) string {
	return g.newPathIn(m, slices.DeleteFunc(g.dirs(m), func(d string) bool { return d != workspace && !guestWritable(d+"/") }))
}

func (g *generator) newPathIn(m tree, dirs []string) string {
	for {
		p := path.Join(pick(g, dirs), g.name())
		if _, ok := m[p]; !ok {
			return p
		}
	}
}

// bytes is content for the files API: every byte value, sizes from empty
// to a few hundred KiB (and once in a while past a MiB, which the engine's
// snapshot frame does not take in one piece).
func (g *generator) bytes() []byte {
	var n int
	switch r := g.rng.IntN(100); {
	case r < 5:
		n = 0
	case r < 60:
		n = 1 + g.rng.IntN(200)
	case r < 95:
		n = 1 << 10 * (1 + g.rng.IntN(64))
	default:
		n = 1<<20 + g.rng.IntN(512<<10)
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(g.rng.Uint32())
	}
	return b
}

// text is content a guest command writes with printf: no quote, no
// backslash, no percent sign.
func (g *generator) text() string {
	const chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,:;-_=+"
	b := make([]byte, g.rng.IntN(120))
	for i := range b {
		b[i] = chars[g.rng.IntN(len(chars))]
	}
	return string(b)
}

func quote(p string) string { return "'" + p + "'" }

// weighted kinds: a step of each kind where it is possible, the file
// changes most often, the faults about one step in six.
var weights = []struct {
	kind Kind
	w    int
}{
	{APIWrite, 12}, {APIMkdirs, 4}, {APIArchive, 4}, {APIDelete, 3}, {APIMove, 3},
	{GuestWrite, 10}, {GuestAppend, 6}, {GuestRemove, 3}, {GuestMove, 3}, {GuestMkdir, 4}, {GuestRead, 8},
	{Hibernate, 8}, {Checkpoint, 3}, {KillSidecar, 3}, {Restart, 1}, {Drain, 1},
}

// next makes the next step for the model m.
func (g *generator) next(m tree) step {
	total := 0
	for _, w := range weights {
		total += w.w
	}
	for {
		r := g.rng.IntN(total)
		var kind Kind
		for _, w := range weights {
			if r -= w.w; r < 0 {
				kind = w.kind
				break
			}
		}
		if s, ok := g.make(kind, m); ok {
			switch {
			case s.kind == Checkpoint:
				g.checkpointed = true
			case s.wakes():
				g.checkpointed = false
			}
			return s
		}
	}
}

// make makes a step of kind, or reports that none is possible now.
func (g *generator) make(kind Kind, m tree) (step, bool) {
	s := step{kind: kind}
	files, all := g.entries(m, 'f'), g.entries(m, 0)
	newPath := g.newPath
	if strings.HasPrefix(string(kind), "guest_") {
		// The VM's user changes only what it may.
		files, all = slices.DeleteFunc(files, func(p string) bool { return !guestWritable(p) }),
			slices.DeleteFunc(all, func(p string) bool { return !guestWritable(p) })
		newPath = g.newGuestPath
	}
	switch kind {
	case APIWrite:
		if len(files) > 0 && g.rng.IntN(3) == 0 {
			s.path = pick(g, files) // an overwrite
		} else {
			s.path = newPath(m)
		}
		s.data = g.bytes()
	case APIMkdirs, GuestMkdir:
		s.path = newPath(m)
		if g.rng.IntN(2) == 0 {
			s.path = path.Join(s.path, g.name())
		}
		s.cmd = "mkdir -p " + quote(s.path)
	case APIArchive:
		s.path = pick(g, g.dirs(m))
		s.archive = tree{}
		sub := g.name()
		for _, rel := range []string{g.name(), sub + "/" + g.name(), sub + "/" + g.name()} {
			if _, ok := m[path.Join(s.path, rel)]; ok {
				return s, false
			}
			mode := fs.FileMode(0o644)
			if g.rng.IntN(4) == 0 {
				mode = 0o600
			}
			b := g.bytes()
			s.archive[rel] = entry{kind: 'f', mode: mode, data: b[:min(len(b), 4096)]}
		}
		if _, ok := m[path.Join(s.path, sub)]; ok {
			return s, false
		}
		s.archive[sub] = entry{kind: 'd', mode: 0o755}
	case APIDelete, GuestRemove:
		if len(all) == 0 {
			return s, false
		}
		s.path = pick(g, all)
		s.cmd = "rm -rf " + quote(s.path)
	case APIMove, GuestMove:
		if len(all) == 0 {
			return s, false
		}
		s.path = pick(g, all)
		s.to = newPath(m)
		if s.to == s.path || strings.HasPrefix(s.to, s.path+"/") {
			return s, false
		}
		s.cmd = "mv " + quote(s.path) + " " + quote(s.to)
	case GuestWrite:
		if len(files) > 0 && g.rng.IntN(3) == 0 {
			s.path = pick(g, files)
		} else {
			s.path = newPath(m)
		}
		if g.rng.IntN(5) == 0 {
			n := 1 + g.rng.IntN(300<<10)
			s.data = bytes.Repeat([]byte("q"), n)
			s.cmd = fmt.Sprintf("head -c %d /dev/zero | tr '\\0' q > %s", n, quote(s.path))
		} else {
			t := g.text()
			s.data = []byte(t)
			s.cmd = "printf '%s' " + quote(t) + " > " + quote(s.path)
		}
	case GuestAppend:
		if len(files) == 0 {
			return s, false
		}
		s.path = pick(g, files)
		t := g.text() + "\n"
		s.data = []byte(t)
		s.cmd = "printf '%s\\n' " + quote(strings.TrimSuffix(t, "\n")) + " >> " + quote(s.path)
		if g.rng.IntN(4) == 0 {
			// A mode change alone is not seen by a checkpoint's
			// comparison (see the README); with the content it is.
			s.mode = []fs.FileMode{0o600, 0o640, 0o755}[g.rng.IntN(3)]
			s.cmd = fmt.Sprintf("chmod %o %s && %s", s.mode, quote(s.path), s.cmd)
		}
	case GuestRead:
		dir := pick(g, g.dirs(m))
		switch g.rng.IntN(5) {
		case 0:
			s.cmd = "ls -la " + quote(dir)
		case 1:
			s.cmd = "find " + quote(workspace) + " -type f"
		case 2:
			s.cmd = "stat " + quote(dir)
		case 3:
			if len(files) == 0 {
				return s, false
			}
			s.cmd = "cat " + quote(pick(g, files)) + " | wc -c"
		default:
			s.cmd = "ls -la /usr/bin /etc | wc -l"
		}
	case Hibernate, Restart:
		if kind == Restart && !g.faults {
			return s, false
		}
		s.wake = pick(g, wakers)
	case Drain:
		if !g.cluster {
			return s, false
		}
		s.wake = pick(g, wakers)
	case Checkpoint:
	case KillSidecar:
		if !g.checkpointed {
			return s, false
		}
	}
	return s, true
}
