package agentos

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

// FileChunkSize is the size of each PREAD/PWRITE a transfer is split into.
// Measured on 0.2.21: one write of 12 MiB or more makes the sidecar exit and
// a read of 8 MiB or more is rejected, so no single request comes near either.
const FileChunkSize = 4 << 20

// FileInfo is a guest file's metadata.
type FileInfo struct {
	Path       string      `json:"path"`
	Mode       fs.FileMode `json:"-"`
	RawMode    uint32      `json:"mode"`
	Size       int64       `json:"size"`
	IsDir      bool        `json:"isDirectory"`
	IsSymlink  bool        `json:"isSymbolicLink"`
	ModTime    time.Time   `json:"mtime"`
	AccessTime time.Time   `json:"atime"`
	ChangeTime time.Time   `json:"ctime"`
	BirthTime  time.Time   `json:"birthtime"`
	Ino        uint64      `json:"ino"`
	Nlink      uint64      `json:"nlink"`
	UID        uint32      `json:"uid"`
	GID        uint32      `json:"gid"`
}

// CheckPath validates a guest path: absolute, no NUL byte, and no ".." that
// would climb above the root. It returns the cleaned path.
func CheckPath(p string) (string, error) {
	if p == "" || !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("%w: path %q is not absolute", ErrInvalidArgument, p)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("%w: path contains a NUL byte", ErrInvalidArgument)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return "", fmt.Errorf("%w: path %q contains ..", ErrInvalidArgument, p)
		}
	}
	return path.Clean(p), nil
}

// fsCall sends a filesystem call. One that makes the pinned engine sync
// its shadow into the kernel first has the shadow reconciled (shadow.go).
func (vm *VM) fsCall(ctx context.Context, req protocol.GuestFilesystemCallRequest) (protocol.GuestFilesystemResultResponse, error) {
	p, err := CheckPath(req.Path)
	if err != nil {
		return protocol.GuestFilesystemResultResponse{}, err
	}
	req.Path = p
	if syncsShadow(req.Operation) {
		if err := vm.reconcileShadow(ctx); err != nil {
			return protocol.GuestFilesystemResultResponse{}, err
		}
	}
	vm.shadow.mu.RLock()
	defer vm.shadow.mu.RUnlock()
	r, err := vm.rawFsCall(ctx, req)
	if err == nil {
		vm.shadow.noteCopied(req)
	}
	return r, err
}

// rawFsCall sends a filesystem call as it is.
func (vm *VM) rawFsCall(ctx context.Context, req protocol.GuestFilesystemCallRequest) (protocol.GuestFilesystemResultResponse, error) {
	p, err := CheckPath(req.Path)
	if err != nil {
		return protocol.GuestFilesystemResultResponse{}, err
	}
	req.Path = p
	resp, err := vm.call(ctx, req)
	if err != nil {
		return protocol.GuestFilesystemResultResponse{}, fmt.Errorf("agentos: %s %s: %w", req.Operation, req.Path, err)
	}
	r, ok := resp.(protocol.GuestFilesystemResultResponse)
	if !ok {
		return r, unexpected("GuestFilesystemCallRequest", resp)
	}
	return r, nil
}

// decodeContent decodes a read's content and passes it to use. Base64 is
// decoded into a pooled buffer, valid only during use; text is passed
// without a copy.
func decodeContent(r protocol.GuestFilesystemResultResponse, use func([]byte) error) error {
	if r.Content == nil {
		return use(nil)
	}
	if r.Encoding == nil || *r.Encoding != protocol.RootFilesystemEntryEncodingBase64 {
		return use(bytesView(*r.Content))
	}
	buf := transferBuffers.get(base64.StdEncoding.DecodedLen(len(*r.Content)))
	defer transferBuffers.put(buf)
	n, err := base64.StdEncoding.Decode(*buf, bytesView(*r.Content))
	if err != nil {
		return fmt.Errorf("%w: base64 file content: %v", ErrProtocol, err)
	}
	return use((*buf)[:n])
}

// encodeContent chooses UTF-8 text when the bytes are valid UTF-8 (a third
// smaller on the wire than base64) and base64 otherwise: sendContent's rule,
// for a content the caller keeps, so it is copied out of the pooled buffer.
func encodeContent(data []byte) (content string, enc *protocol.RootFilesystemEntryEncoding) {
	_ = sendContent(data, func(c string, e *protocol.RootFilesystemEntryEncoding) error {
		content, enc = strings.Clone(c), e
		return nil
	})
	return content, enc
}

// sendContent is encodeContent for file chunks, without copies: it calls
// send with the content, a view of data or of a pooled buffer, valid only
// during send (which encodes it into its request frame).
func sendContent(data []byte, send func(content string, enc *protocol.RootFilesystemEntryEncoding) error) error {
	if utf8.Valid(data) {
		return send(stringView(data), nil)
	}
	return sendBase64(data, send)
}

// sendBase64 is sendContent's base64 half.
func sendBase64(data []byte, send func(content string, enc *protocol.RootFilesystemEntryEncoding) error) error {
	buf := transferBuffers.get(base64.StdEncoding.EncodedLen(len(data)))
	defer transferBuffers.put(buf)
	base64.StdEncoding.Encode(*buf, data)
	enc := protocol.RootFilesystemEntryEncodingBase64
	return send(stringView(*buf), &enc)
}

// ReadFile reads a whole file into memory. Large files should be streamed
// with ReadFileTo.
func (vm *VM) ReadFile(ctx context.Context, p string) ([]byte, error) {
	var b bytes.Buffer
	if _, err := vm.ReadFileTo(ctx, p, &b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// ReadFileTo streams a file to w in FileChunkSize pieces and returns the
// number of bytes written. Memory use is bounded by one chunk whatever the
// file's size; a file smaller than a chunk costs one request.
func (vm *VM) ReadFileTo(ctx context.Context, p string, w io.Writer) (int64, error) {
	ctx, err := vm.Settle(ctx) // once for all of its chunks
	if err != nil {
		return 0, err
	}
	var off int64
	for {
		n := uint64(FileChunkSize)
		o := uint64(off)
		r, err := vm.fsCall(ctx, protocol.GuestFilesystemCallRequest{Operation: protocol.GuestFilesystemOperationPread, Path: p, Offset: &o, Len: &n})
		if err != nil {
			return off, err
		}
		var got int
		err = decodeContent(r, func(data []byte) error {
			got = len(data)
			if len(data) == 0 {
				return nil
			}
			k, err := w.Write(data)
			off += int64(k)
			return err
		})
		if err != nil {
			return off, err
		}
		if got < FileChunkSize {
			return off, nil
		}
	}
}

// WriteFile writes data to a file, creating or truncating it.
func (vm *VM) WriteFile(ctx context.Context, p string, data []byte) error {
	if len(data) <= FileChunkSize {
		return sendContent(data, func(content string, enc *protocol.RootFilesystemEntryEncoding) error {
			_, err := vm.fsCall(ctx, protocol.GuestFilesystemCallRequest{Operation: protocol.GuestFilesystemOperationWriteFile, Path: p, Content: &content, Encoding: enc})
			return err
		})
	}
	_, err := vm.WriteFileFrom(ctx, p, bytes.NewReader(data))
	return err
}

// WriteFileFrom streams r into a file in FileChunkSize pieces: the first
// chunk creates (or truncates) the file, each further one is written at its
// offset. It returns the number of bytes written. A failure leaves a partial
// file behind; callers that need all-or-nothing write to a temporary name
// and Move it.
func (vm *VM) WriteFileFrom(ctx context.Context, p string, r io.Reader) (int64, error) {
	ctx, err := vm.Settle(ctx) // once for all of its chunks
	if err != nil {
		return 0, err
	}
	// The first chunk is small, so that a small file (an archive's usual
	// entry) does not cost a whole chunk's buffer; the buffer grows to
	// FileChunkSize (a pooled one) once a file fills it.
	buf := make([]byte, min(firstChunkSize, FileChunkSize))
	var off int64
	for {
		n, rerr := io.ReadFull(r, buf)
		if rerr != nil && !errors.Is(rerr, io.EOF) && !errors.Is(rerr, io.ErrUnexpectedEOF) {
			return off, rerr
		}
		if n > 0 || off == 0 {
			req := protocol.GuestFilesystemCallRequest{Operation: protocol.GuestFilesystemOperationWriteFile, Path: p}
			encode := sendContent
			if off > 0 {
				encode = sendBase64
				o := uint64(off)
				req.Operation, req.Offset = protocol.GuestFilesystemOperationPwrite, &o
			}
			err := encode(buf[:n], func(content string, enc *protocol.RootFilesystemEntryEncoding) error {
				req.Content, req.Encoding = &content, enc
				_, err := vm.fsCall(ctx, req)
				return err
			})
			if err != nil {
				return off, err
			}
			off += int64(n)
		}
		if rerr != nil {
			return off, nil
		}
		if len(buf) < FileChunkSize {
			chunk := transferBuffers.get(FileChunkSize)
			defer transferBuffers.put(chunk)
			buf = *chunk
		}
	}
}

// firstChunkSize is the size of the first chunk WriteFileFrom reads.
const firstChunkSize = 64 << 10

// Mkdir creates a directory; with parents it acts as mkdir -p.
func (vm *VM) Mkdir(ctx context.Context, p string, parents bool) error {
	op := protocol.GuestFilesystemOperationCreateDir
	if parents {
		op = protocol.GuestFilesystemOperationMkdir
	}
	_, err := vm.fsCall(ctx, protocol.GuestFilesystemCallRequest{Operation: op, Path: p, Recursive: parents})
	return err
}

// ReadDir lists a directory.
func (vm *VM) ReadDir(ctx context.Context, p string) ([]gateway.DirEntry, error) {
	// The engine's READ_DIR leaves every entry's size 0; its recursive
	// listing, held to depth 0, gives the same entries with their sizes,
	// and the same errors, in one call.
	depth := uint32(0)
	r, err := vm.fsCall(ctx, protocol.GuestFilesystemCallRequest{Operation: protocol.GuestFilesystemOperationReadDirRecursive, Path: p, MaxDepth: &depth})
	if err != nil {
		return nil, err
	}
	return dirEntries(r), nil
}

// ReadDirOptions configure ReadDirRecursive.
type ReadDirOptions struct {
	// MaxDepth limits recursion (0: unlimited; 1: the directory itself).
	MaxDepth int
	// Exclude lists path.Match patterns matched against each entry's name
	// and its path; a matching directory is pruned with everything below it.
	Exclude []string
}

// ReadDirRecursive lists a directory tree, flattened.
func (vm *VM) ReadDirRecursive(ctx context.Context, p string, o ReadDirOptions) ([]gateway.DirEntry, error) {
	for _, pat := range o.Exclude {
		if _, err := path.Match(pat, ""); err != nil {
			return nil, fmt.Errorf("%w: exclude pattern %q: %v", ErrInvalidArgument, pat, err)
		}
	}
	req := protocol.GuestFilesystemCallRequest{Operation: protocol.GuestFilesystemOperationReadDirRecursive, Path: p}
	if o.MaxDepth > 0 {
		d := uint32(o.MaxDepth)
		req.MaxDepth = &d
	}
	r, err := vm.fsCall(ctx, req)
	if err != nil {
		return nil, err
	}
	all := dirEntries(r)
	if len(o.Exclude) == 0 {
		return all, nil
	}
	var pruned []string
	out := all[:0]
	for _, e := range all {
		if underAny(e.Path, pruned) {
			continue
		}
		if excluded(e, o.Exclude) {
			if e.IsDir {
				pruned = append(pruned, e.Path+"/")
			}
			continue
		}
		out = append(out, e)
	}
	return out, nil
}

func excluded(e gateway.DirEntry, patterns []string) bool {
	for _, pat := range patterns {
		if ok, _ := path.Match(pat, e.Name); ok {
			return true
		}
		if ok, _ := path.Match(pat, e.Path); ok {
			return true
		}
	}
	return false
}

func underAny(p string, prefixes []string) bool {
	for _, pre := range prefixes {
		if strings.HasPrefix(p, pre) {
			return true
		}
	}
	return false
}

func dirEntries(r protocol.GuestFilesystemResultResponse) []gateway.DirEntry {
	if r.Entries == nil {
		return []gateway.DirEntry{}
	}
	out := make([]gateway.DirEntry, len(*r.Entries))
	for i, e := range *r.Entries {
		out[i] = gateway.DirEntry{Name: e.Name, Path: e.Path, IsDir: e.IsDirectory, IsSymlink: e.IsSymbolicLink, Size: int64(e.Size)}
	}
	return out
}

// Stat returns a file's metadata, following symlinks.
func (vm *VM) Stat(ctx context.Context, p string) (FileInfo, error) {
	return vm.stat(ctx, p, protocol.GuestFilesystemOperationStat)
}

// Lstat returns a file's metadata without following a final symlink.
func (vm *VM) Lstat(ctx context.Context, p string) (FileInfo, error) {
	return vm.stat(ctx, p, protocol.GuestFilesystemOperationLstat)
}

func (vm *VM) stat(ctx context.Context, p string, op protocol.GuestFilesystemOperation) (FileInfo, error) {
	r, err := vm.fsCall(ctx, protocol.GuestFilesystemCallRequest{Operation: op, Path: p})
	if err != nil {
		return FileInfo{}, err
	}
	if r.Stat == nil {
		return FileInfo{}, fmt.Errorf("%w: stat of %s without stat", ErrProtocol, p)
	}
	s := r.Stat
	ms := func(v uint64) time.Time { return time.UnixMilli(int64(v)).UTC() }
	mode := fs.FileMode(s.Mode & 0o777)
	switch {
	case s.IsDirectory:
		mode |= fs.ModeDir
	case s.IsSymbolicLink:
		mode |= fs.ModeSymlink
	}
	return FileInfo{
		Path: r.Path, Mode: mode, RawMode: s.Mode, Size: int64(s.Size), IsDir: s.IsDirectory, IsSymlink: s.IsSymbolicLink,
		ModTime: ms(s.MtimeMs), AccessTime: ms(s.AtimeMs), ChangeTime: ms(s.CtimeMs), BirthTime: ms(s.BirthtimeMs),
		Ino: s.Ino, Nlink: s.Nlink, UID: s.UID, GID: s.GID,
	}, nil
}

// Exists reports whether a path exists.
func (vm *VM) Exists(ctx context.Context, p string) (bool, error) {
	r, err := vm.fsCall(ctx, protocol.GuestFilesystemCallRequest{Operation: protocol.GuestFilesystemOperationExists, Path: p})
	if err != nil {
		return false, err
	}
	return r.Exists != nil && *r.Exists, nil
}

// Move renames a file or directory tree.
func (vm *VM) Move(ctx context.Context, from, to string) error {
	dst, err := CheckPath(to)
	if err != nil {
		return err
	}
	_, err = vm.fsCall(ctx, protocol.GuestFilesystemCallRequest{Operation: protocol.GuestFilesystemOperationMove, Path: from, DestinationPath: &dst, Recursive: true})
	return err
}

// Remove deletes a file, or a directory (with recursive, its whole tree).
func (vm *VM) Remove(ctx context.Context, p string, recursive bool) error {
	_, err := vm.fsCall(ctx, protocol.GuestFilesystemCallRequest{Operation: protocol.GuestFilesystemOperationRemove, Path: p, Recursive: recursive})
	return err
}

// Symlink creates a symbolic link at p pointing to target.
func (vm *VM) Symlink(ctx context.Context, target, p string) error {
	_, err := vm.fsCall(ctx, protocol.GuestFilesystemCallRequest{Operation: protocol.GuestFilesystemOperationSymlink, Path: p, Target: &target})
	return err
}

// Readlink returns the target of a symbolic link.
func (vm *VM) Readlink(ctx context.Context, p string) (string, error) {
	r, err := vm.fsCall(ctx, protocol.GuestFilesystemCallRequest{Operation: protocol.GuestFilesystemOperationReadLink, Path: p})
	if err != nil {
		return "", err
	}
	if r.Target != nil {
		return *r.Target, nil
	}
	if r.Content != nil {
		return *r.Content, nil
	}
	return "", fmt.Errorf("%w: readlink of %s without target", ErrProtocol, p)
}

// Chmod changes a file's permission bits.
func (vm *VM) Chmod(ctx context.Context, p string, mode fs.FileMode) error {
	m := uint32(mode.Perm())
	_, err := vm.fsCall(ctx, protocol.GuestFilesystemCallRequest{Operation: protocol.GuestFilesystemOperationChmod, Path: p, Mode: &m})
	return err
}

// ExportRootFilesystem returns every entry of the VM's root filesystem,
// refused by the sidecar when the snapshot would exceed maxBytes.
func (vm *VM) ExportRootFilesystem(ctx context.Context, maxBytes uint64) ([]protocol.RootFilesystemEntry, error) {
	resp, err := vm.call(ctx, protocol.SnapshotRootFilesystemRequest{MaxBytes: maxBytes})
	if err != nil {
		return nil, fmt.Errorf("agentos: export root filesystem: %w", err)
	}
	r, ok := resp.(protocol.RootFilesystemSnapshotResponse)
	if !ok {
		return nil, unexpected("SnapshotRootFilesystemRequest", resp)
	}
	return r.Entries, nil
}

// ReadAt reads up to len(p) bytes of a file at off with PREAD calls of at
// most FileChunkSize each. Like io.ReaderAt it returns io.EOF when fewer
// than len(p) bytes were read because the file ends.
func (vm *VM) ReadAt(ctx context.Context, name string, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("%w: negative offset", ErrInvalidArgument)
	}
	var n int
	for n < len(p) {
		want := min(len(p)-n, FileChunkSize)
		o, l := uint64(off)+uint64(n), uint64(want)
		r, err := vm.fsCall(ctx, protocol.GuestFilesystemCallRequest{Operation: protocol.GuestFilesystemOperationPread, Path: name, Offset: &o, Len: &l})
		if err != nil {
			return n, err
		}
		var got int
		err = decodeContent(r, func(data []byte) error {
			got = len(data)
			if len(data) > want {
				return fmt.Errorf("%w: pread of %d bytes returned %d", ErrProtocol, want, len(data))
			}
			n += copy(p[n:], data)
			return nil
		})
		if err != nil {
			return n, err
		}
		if got < want {
			return n, io.EOF
		}
	}
	return n, nil
}

// Utimes sets a file's access and modification times (millisecond
// precision, which is what the engine keeps).
func (vm *VM) Utimes(ctx context.Context, p string, atime, mtime time.Time) error {
	a, m := uint64(max(atime.UnixMilli(), 0)), uint64(max(mtime.UnixMilli(), 0))
	_, err := vm.fsCall(ctx, protocol.GuestFilesystemCallRequest{Operation: protocol.GuestFilesystemOperationUtimes, Path: p, AtimeMs: &a, MtimeMs: &m})
	return err
}

// Link creates a hard link at p to the existing file target.
func (vm *VM) Link(ctx context.Context, target, p string) error {
	// The engine's LINK takes the existing file as the path and the new
	// name as the destination, like link(2)'s argument order.
	dst, err := CheckPath(p)
	if err != nil {
		return err
	}
	_, err = vm.fsCall(ctx, protocol.GuestFilesystemCallRequest{Operation: protocol.GuestFilesystemOperationLink, Path: target, DestinationPath: &dst})
	return err
}
