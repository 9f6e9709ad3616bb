package client

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/agentos-gateway/agentos-gateway/api"
)

// Paths inside a VM always travel in the path query parameter; the gateway
// wants them absolute, without ".." or NUL.

func pathQuery(p string) url.Values { return url.Values{"path": {p}} }

// ReadFile streams a file of a VM. The body is handed over as it arrives,
// never buffered: the caller reads it and must Close it. A transfer the
// gateway cuts short reads as io.ErrUnexpectedEOF (the length is known up
// front). ctx bounds the whole read.
func (v *VMHandle) ReadFile(ctx context.Context, path string) (io.ReadCloser, error) {
	resp, err := v.c.send(ctx, request{method: http.MethodGet, path: vmPath(v.id, "files"), query: pathQuery(path), accept: "*/*"})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// HeadFile asks HEAD /files for a path's size and content type. As HEAD
// answers carry no body, an *Error from it has only the status and the code
// derived from it.
func (v *VMHandle) HeadFile(ctx context.Context, path string) (*FileHead, error) {
	resp, err := v.c.send(ctx, request{method: http.MethodHead, path: vmPath(v.id, "files"), query: pathQuery(path), accept: "*/*"})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	h := &FileHead{Size: resp.ContentLength, ContentType: resp.Header.Get("Content-Type")}
	if v := resp.Header.Get("Content-Length"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			h.Size = n
		}
	}
	if h.Size < 0 {
		h.Size = 0
	}
	if t, err := http.ParseTime(resp.Header.Get("Last-Modified")); err == nil {
		h.ModTime = t
	}
	h.IsDir = strings.HasPrefix(h.ContentType, "inode/directory")
	h.ETag = resp.Header.Get("ETag")
	return h, nil
}

// ReadRangeOptions select what ReadFileRange reads.
type ReadRangeOptions struct {
	// Offset and Length select the bytes [Offset, Offset+Length); Length 0
	// reads to the end. A negative Offset selects the last -Offset bytes
	// (Length is then ignored). Offset 0 and Length 0 read the whole file.
	Offset, Length int64
	// IfRange, an ETag from an earlier read, makes the gateway send the
	// whole file instead of the range when the file changed since.
	IfRange string
	// IfNoneMatch, an ETag from an earlier read, makes the answer
	// NotModified (and bodiless) while the file is unchanged.
	IfNoneMatch string
}

// FileRange is the answer of ReadFileRange.
type FileRange struct {
	// Body streams the bytes; the caller must Close it. It is nil when
	// NotModified.
	Body io.ReadCloser
	// Partial is set when Body holds the range asked for (206); otherwise
	// it holds the whole file.
	Partial bool
	// NotModified is set when IfNoneMatch matched (304).
	NotModified bool
	// Start and Length locate Body in the file; Size is the file's size
	// (unknown, -1, when NotModified).
	Start, Length, Size int64
	ETag                string
	ModTime             time.Time
}

// ReadFileRange reads part of a file (Range: bytes=...), with the
// conditional headers of opts. A range outside the file is an *Error with
// code range_not_satisfiable (416).
func (v *VMHandle) ReadFileRange(ctx context.Context, path string, opts ReadRangeOptions) (*FileRange, error) {
	h := http.Header{}
	switch {
	case opts.Offset < 0:
		h.Set("Range", "bytes="+strconv.FormatInt(opts.Offset, 10))
	case opts.Length > 0:
		h.Set("Range", "bytes="+strconv.FormatInt(opts.Offset, 10)+"-"+strconv.FormatInt(opts.Offset+opts.Length-1, 10))
	case opts.Offset > 0:
		h.Set("Range", "bytes="+strconv.FormatInt(opts.Offset, 10)+"-")
	}
	if opts.IfRange != "" {
		h.Set("If-Range", opts.IfRange)
	}
	if opts.IfNoneMatch != "" {
		h.Set("If-None-Match", opts.IfNoneMatch)
	}
	req, err := v.c.newRequest(ctx, request{method: http.MethodGet, path: vmPath(v.id, "files"), query: pathQuery(path), accept: "*/*", headers: h})
	if err != nil {
		return nil, err
	}
	resp, err := v.c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	out := &FileRange{ETag: resp.Header.Get("ETag"), Size: -1}
	if t, err := http.ParseTime(resp.Header.Get("Last-Modified")); err == nil {
		out.ModTime = t
	}
	switch resp.StatusCode {
	case http.StatusNotModified:
		drainClose(resp.Body)
		out.NotModified = true
		return out, nil
	case http.StatusOK:
		out.Body, out.Length, out.Size = resp.Body, resp.ContentLength, resp.ContentLength
		return out, nil
	case http.StatusPartialContent:
		start, last, size, err := parseContentRange(resp.Header.Get("Content-Range"))
		if err != nil {
			resp.Body.Close()
			return nil, fmt.Errorf("client: GET %s: %w", path, err)
		}
		out.Body, out.Partial, out.Start, out.Length, out.Size = resp.Body, true, start, last-start+1, size
		return out, nil
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, parseError(resp)
	}
	return nil, fmt.Errorf("client: GET %s: unexpected status %d", path, resp.StatusCode)
}

// parseContentRange reads the "bytes first-last/size" of a 206 answer.
func parseContentRange(v string) (first, last, size int64, err error) {
	bad := fmt.Errorf("Content-Range %q is not bytes first-last/size", v)
	rest, ok := strings.CutPrefix(v, "bytes ")
	if !ok {
		return 0, 0, 0, bad
	}
	rng, total, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, 0, 0, bad
	}
	a, b, ok := strings.Cut(rng, "-")
	if !ok {
		return 0, 0, 0, bad
	}
	nums := [3]int64{}
	for i, s := range []string{a, b, total} {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 || s[0] == '+' {
			return 0, 0, 0, bad
		}
		nums[i] = n
	}
	first, last, size = nums[0], nums[1], nums[2]
	if first > last || last >= size {
		return 0, 0, 0, bad
	}
	return first, last, size, nil
}

// ArchiveOptions tune DownloadArchive and UploadArchive.
type ArchiveOptions struct {
	// Gzip selects tar.gz rather than tar.
	Gzip bool
	// Mkdirs (uploads) creates the target directory and its parents.
	Mkdirs bool
	// Size (uploads), when > 0, is sent as Content-Length; see
	// WriteFileOptions.
	Size int64
}

// ArchiveResult is the answer of UploadArchive: what the archive held.
type ArchiveResult = api.ArchiveExtracted

func archiveQuery(path string, opts ArchiveOptions) url.Values {
	q := pathQuery(path)
	if opts.Gzip {
		q.Set("format", "tar.gz")
	}
	if opts.Mkdirs {
		q.Set("mkdirs", "true")
	}
	return q
}

// DownloadArchive streams the directory (or file) at path as a tar (or,
// with opts.Gzip, tar.gz) archive. The body is handed over as it arrives;
// the caller reads it and must Close it. An archive the gateway cuts short
// reads as an error, never as a complete archive.
func (v *VMHandle) DownloadArchive(ctx context.Context, path string, opts ArchiveOptions) (io.ReadCloser, error) {
	opts.Mkdirs = false
	resp, err := v.c.send(ctx, request{method: http.MethodGet, path: vmPath(v.id, "archive"), query: archiveQuery(path, opts), accept: "*/*"})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// UploadArchive streams the tar (or, with opts.Gzip, tar.gz) archive r into
// the directory at path, all or nothing. r is read to its end and not
// closed.
func (v *VMHandle) UploadArchive(ctx context.Context, path string, r io.Reader, opts ArchiveOptions) (*ArchiveResult, error) {
	ctype := "application/x-tar"
	if opts.Gzip {
		ctype = "application/gzip"
	}
	resp, err := v.c.send(ctx, request{method: http.MethodPut, path: vmPath(v.id, "archive"), query: archiveQuery(path, opts), body: uploadBody(r),
		size: opts.Size, ctype: ctype, accept: "application/json"})
	if err != nil {
		return nil, err
	}
	defer drainClose(resp.Body)
	var out ArchiveResult
	if err := decodeJSONBody(resp, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// nonClosing hides a caller's Close: the HTTP client closes request bodies,
// and WriteFile must not close the caller's reader.
type nonClosing struct{ io.Reader }

// uploadBody is the request body that streams r without closing it. The
// readers net/http knows keep their type: it learns their length and can
// rewind them (so such an upload may be retried).
func uploadBody(r io.Reader) io.Reader {
	switch r.(type) {
	case *bytes.Reader, *bytes.Buffer, *strings.Reader:
		return r
	case nil:
		return http.NoBody
	}
	return nonClosing{r}
}

// WriteFile streams r into a file of a VM (PUT /files). r is read to its end
// and not closed. See WriteFileOptions for Content-Length.
func (v *VMHandle) WriteFile(ctx context.Context, path string, r io.Reader, opts WriteFileOptions) (*WriteResult, error) {
	q := pathQuery(path)
	if opts.Mkdirs {
		q.Set("mkdirs", "true")
	}
	resp, err := v.c.send(ctx, request{method: http.MethodPut, path: vmPath(v.id, "files"), query: q, body: uploadBody(r),
		size: opts.Size, ctype: "application/octet-stream", accept: "application/json"})
	if err != nil {
		return nil, err
	}
	defer drainClose(resp.Body)
	var out WriteResult
	if err := decodeJSONBody(resp, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteFile removes a file, or a directory (with its content when
// opts.Recursive).
func (v *VMHandle) DeleteFile(ctx context.Context, path string, opts DeleteFileOptions) error {
	q := pathQuery(path)
	if opts.Recursive {
		q.Set("recursive", "true")
	}
	_, err := v.c.do(ctx, http.MethodDelete, vmPath(v.id, "files"), q, nil, nil, nil)
	return err
}

// ListDir lists a directory, and its subdirectories with opts.Recursive.
func (v *VMHandle) ListDir(ctx context.Context, path string, opts ListDirOptions) ([]DirEntry, error) {
	q := pathQuery(path)
	if opts.Recursive {
		q.Set("recursive", "true")
	}
	if opts.MaxDepth > 0 {
		q.Set("maxDepth", strconv.Itoa(opts.MaxDepth))
	}
	l, err := get[List[DirEntry]](ctx, v.c, vmPath(v.id, "dirs"), q)
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// Mkdir creates a directory and its missing parents.
func (v *VMHandle) Mkdir(ctx context.Context, path string) error {
	_, err := v.c.do(ctx, http.MethodPost, vmPath(v.id, "dirs"), nil, map[string]string{"path": path}, nil, nil)
	return err
}

// Move renames a file or directory.
func (v *VMHandle) Move(ctx context.Context, from, to string) error {
	_, err := v.c.do(ctx, http.MethodPost, vmPath(v.id, "fs", "move"), nil, map[string]string{"from": from, "to": to}, nil, nil)
	return err
}

// Stat returns a path's metadata.
func (v *VMHandle) Stat(ctx context.Context, path string) (*FileStat, error) {
	return get[FileStat](ctx, v.c, vmPath(v.id, "fs", "stat"), pathQuery(path))
}
