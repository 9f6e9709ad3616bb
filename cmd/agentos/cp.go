package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentos-gateway/agentos-gateway/archive"
	"github.com/agentos-gateway/agentos-gateway/client"
)

func (a *app) cpCommand() *cobra.Command {
	var recursive bool
	cmd := &cobra.Command{
		Use:   "cp [-r] SRC DST",
		Short: "Copy files between this machine and a VM",
		Long: `cp copies a file, or with -r a directory, between this machine and a VM: one of
SRC and DST is VM:/absolute/path, the other a local path.

As with cp, a DST that is an existing directory receives SRC under its own
name; otherwise DST is the copy's name. Directories travel as tar archives
(symlinks stay symlinks, modes and modification times are kept) and an upload
lands whole or not at all. Progress shows on stderr when it is a terminal.`,
		Example: `  agentos cp ./notes.txt vm_123:/workspace/
  agentos cp vm_123:/workspace/out.json .
  agentos cp -r ./project vm_123:/workspace/project
  agentos cp -r vm_123:/workspace/project ./project-copy`,
		Args: args(2, "a source and a destination"),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.cp(cmd.Context(), argv[0], argv[1], recursive)
		},
	}
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "copy directories")
	return cmd
}

// splitRemote splits "VM:/path" into the VM's id and the path. A local path
// may hold a colon after a slash ("./a:b") but never starts with an id and
// a colon followed by an absolute path.
func splitRemote(arg string) (vm, p string, remote bool) {
	vm, p, ok := strings.Cut(arg, ":")
	if !ok || vm == "" || strings.ContainsAny(vm, `/\`) || !strings.HasPrefix(p, "/") {
		return "", "", false
	}
	return vm, p, true
}

func (a *app) cp(ctx context.Context, src, dst string, recursive bool) error {
	srcVM, srcPath, srcRemote := splitRemote(src)
	dstVM, dstPath, dstRemote := splitRemote(dst)
	switch {
	case srcRemote && dstRemote:
		return usageError{msg: "cp copies between this machine and a VM: one side must be a local path"}
	case !srcRemote && !dstRemote:
		return usageError{msg: "cp needs one side as VM:/absolute/path"}
	}
	c, _, err := a.client()
	if err != nil {
		return err
	}
	if srcRemote {
		return a.download(ctx, c.VM(srcVM), srcPath, dst, recursive)
	}
	return a.upload(ctx, src, c.VM(dstVM), dstPath, recursive)
}

// remoteStat describes a VM's path, nil when it does not exist. A VM that
// does not exist is an error.
func remoteStat(ctx context.Context, vm *client.VMHandle, p string) (*client.FileStat, error) {
	st, err := vm.Stat(ctx, p)
	if err == nil {
		return st, nil
	}
	if !client.IsCode(err, client.CodeNotFound) {
		return nil, err
	}
	// not_found is about the path or about the VM: ask about the VM.
	if _, verr := vm.Get(ctx); verr != nil {
		return nil, verr
	}
	return nil, nil
}

func (a *app) download(ctx context.Context, vm *client.VMHandle, p, local string, recursive bool) error {
	what := fmt.Sprintf("copy %s:%s", vm.ID(), p)
	st, err := remoteStat(ctx, vm, p)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if st == nil {
		return fmt.Errorf("%s: no such file or directory", what)
	}
	target := local
	if lst, err := os.Stat(local); err == nil && lst.IsDir() {
		target = filepath.Join(local, path.Base(p))
	} else if strings.HasSuffix(local, string(filepath.Separator)) {
		return fmt.Errorf("%s: the directory %s does not exist", what, local)
	}
	if !st.IsDir {
		return a.downloadFile(ctx, vm, p, target, st.Size, what)
	}
	if !recursive {
		return fmt.Errorf("%s: it is a directory (use cp -r)", what)
	}
	if err := os.MkdirAll(target, 0o755); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	root, err := os.OpenRoot(target)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer root.Close()
	body, err := vm.DownloadArchive(ctx, p, client.ArchiveOptions{})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer body.Close()
	prog := a.startProgress(what, -1)
	_, err = archive.Extract(ctx, prog.reader(body), rootSink{root}, ".", archive.Limits{})
	prog.finish()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

func (a *app) downloadFile(ctx context.Context, vm *client.VMHandle, p, target string, size int64, what string) error {
	body, err := vm.ReadFile(ctx, p)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer body.Close()
	f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	prog := a.startProgress(what, size)
	_, err = io.Copy(f, prog.reader(body))
	prog.finish()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

func (a *app) upload(ctx context.Context, local string, vm *client.VMHandle, p string, recursive bool) error {
	what := fmt.Sprintf("copy %s to %s:%s", local, vm.ID(), p)
	lst, err := os.Stat(local)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if lst.IsDir() && !recursive {
		return fmt.Errorf("%s: it is a directory (use cp -r)", what)
	}
	rst, err := remoteStat(ctx, vm, p)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	target := p
	switch {
	case rst != nil && rst.IsDir:
		target = path.Join(p, filepath.Base(filepath.Clean(local)))
	case rst == nil && strings.HasSuffix(p, "/"):
		return fmt.Errorf("%s: the directory %s does not exist in the VM", what, p)
	}
	if !lst.IsDir() {
		f, err := os.Open(local)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		defer f.Close()
		prog := a.startProgress(what, lst.Size())
		_, err = vm.WriteFile(ctx, target, prog.reader(f), client.WriteFileOptions{Size: lst.Size()})
		prog.finish()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
	abs, err := filepath.Abs(local)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	// The archive is written as it is sent: a pipe, so that a tree of any
	// size takes no more memory than a buffer.
	pr, pw := io.Pipe()
	var wg sync.WaitGroup
	wg.Go(func() { pw.CloseWithError(archive.Write(ctx, pw, localSource{}, abs)) })
	prog := a.startProgress(what, -1)
	_, err = vm.UploadArchive(ctx, target, prog.reader(pr), client.ArchiveOptions{Mkdirs: true})
	prog.finish()
	// An upload refused early leaves the writer blocked on the pipe.
	pr.CloseWithError(errors.New("the upload ended"))
	wg.Wait()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// localSource is this machine's filesystem as an archive.Source.
type localSource struct{}

func (localSource) Lstat(_ context.Context, name string) (archive.Info, error) {
	fi, err := os.Lstat(name)
	if err != nil {
		return archive.Info{}, err
	}
	return archive.Info{Mode: fi.Mode(), Size: fi.Size(), ModTime: fi.ModTime()}, nil
}

func (localSource) ReadDir(_ context.Context, name string) ([]string, error) {
	entries, err := os.ReadDir(name)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names, nil
}

func (localSource) Readlink(_ context.Context, name string) (string, error) { return os.Readlink(name) }

func (localSource) ReadFile(_ context.Context, name string, w io.Writer) (int64, error) {
	f, err := os.Open(name)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return io.Copy(w, f)
}

// rootSink is a local directory as an archive.Sink. Every name resolves
// through an os.Root, so that nothing (a symlink that was there before
// either) leads the extraction outside the directory.
type rootSink struct{ r *os.Root }

func (s rootSink) MkdirAll(_ context.Context, name string) error { return s.r.MkdirAll(name, 0o755) }

func (s rootSink) WriteFile(_ context.Context, name string, r io.Reader) (int64, error) {
	s.replace(name)
	f, err := s.r.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return n, err
}

func (s rootSink) Symlink(_ context.Context, target, name string) error {
	s.replace(name)
	return s.r.Symlink(target, name)
}

func (s rootSink) Link(_ context.Context, existing, name string) error {
	s.replace(name)
	return s.r.Link(existing, name)
}

func (s rootSink) Chmod(_ context.Context, name string, perm fs.FileMode) error {
	return s.r.Chmod(name, perm)
}

func (s rootSink) Chtimes(_ context.Context, name string, mtime time.Time) error {
	return s.r.Chtimes(name, mtime, mtime)
}

// replace removes a symlink at name, which a copy replaces rather than
// writes through.
func (s rootSink) replace(name string) {
	if fi, err := s.r.Lstat(name); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		_ = s.r.Remove(name)
	}
}

// progress shows a transfer's bytes on stderr while it runs, when stderr is
// a terminal; otherwise it does nothing.
type progress struct {
	a     *app
	label string
	total int64
	n     atomic.Int64
	stop  chan struct{}
	done  chan struct{}
}

func (a *app) startProgress(label string, total int64) *progress {
	p := &progress{a: a, label: label, total: total}
	if !isTerminal(a.stderr) {
		return p
	}
	p.stop, p.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(p.done)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				p.print()
				fmt.Fprintln(a.stderr)
				return
			case <-t.C:
				p.print()
			}
		}
	}()
	return p
}

func (p *progress) print() {
	s := "\r" + p.label + ": " + humanBytes(p.n.Load())
	if p.total >= 0 {
		s += " / " + humanBytes(p.total)
	}
	fmt.Fprint(p.a.stderr, s+"\x1b[K")
}

func (p *progress) finish() {
	if p.stop != nil {
		close(p.stop)
		<-p.done
	}
}

// reader counts what passes through r.
func (p *progress) reader(r io.Reader) io.Reader { return &countingReader{r: r, n: &p.n} }

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n.Add(int64(n))
	return n, err
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
