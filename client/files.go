package client

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Paths inside a VM always travel in the path query parameter; the gateway
// wants them absolute, without ".." or NUL.

func pathQuery(p string) url.Values { return url.Values{"path": {p}} }

// ReadFile streams a file of a VM. The body is handed over as it arrives,
// never buffered: the caller reads it and must Close it. A transfer the
// gateway cuts short reads as io.ErrUnexpectedEOF (the length is known up
// front). ctx bounds the whole read.
func (c *Client) ReadFile(ctx context.Context, vm, path string) (io.ReadCloser, error) {
	resp, err := c.send(ctx, request{method: http.MethodGet, path: vmPath(vm, "files"), query: pathQuery(path), accept: "*/*"})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// StatFileHead asks HEAD /files for a path's size and content type. As HEAD
// answers carry no body, an *Error from it has only the status and the code
// derived from it.
func (c *Client) StatFileHead(ctx context.Context, vm, path string) (*FileHead, error) {
	resp, err := c.send(ctx, request{method: http.MethodHead, path: vmPath(vm, "files"), query: pathQuery(path), accept: "*/*"})
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
	return h, nil
}

// nonClosing hides a caller's Close: the HTTP client closes request bodies,
// and WriteFile must not close the caller's reader.
type nonClosing struct{ io.Reader }

// WriteFile streams r into a file of a VM (PUT /files). r is read to its end
// and not closed. See WriteFileOptions for Content-Length.
func (c *Client) WriteFile(ctx context.Context, vm, path string, r io.Reader, opts WriteFileOptions) (*WriteResult, error) {
	q := pathQuery(path)
	if opts.Mkdirs {
		q.Set("mkdirs", "true")
	}
	body := r
	switch r.(type) {
	case *bytes.Reader, *bytes.Buffer, *strings.Reader:
		// net/http learns their length (and can rewind them) by itself.
	case nil:
		body = http.NoBody
	default:
		body = nonClosing{r}
	}
	resp, err := c.send(ctx, request{method: http.MethodPut, path: vmPath(vm, "files"), query: q, body: body,
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
// recursive).
func (c *Client) DeleteFile(ctx context.Context, vm, path string, recursive bool) error {
	q := pathQuery(path)
	if recursive {
		q.Set("recursive", "true")
	}
	_, err := c.do(ctx, http.MethodDelete, vmPath(vm, "files"), q, nil, nil, nil)
	return err
}

// ListDir lists a directory; recursive descends at most maxDepth levels
// (0: the gateway's default).
func (c *Client) ListDir(ctx context.Context, vm, path string, recursive bool, maxDepth int) (*List[DirEntry], error) {
	q := pathQuery(path)
	if recursive {
		q.Set("recursive", "true")
	}
	if maxDepth > 0 {
		q.Set("maxDepth", strconv.Itoa(maxDepth))
	}
	var out List[DirEntry]
	if _, err := c.do(ctx, http.MethodGet, vmPath(vm, "dirs"), q, nil, &out, nil); err != nil {
		return nil, err
	}
	return &out, nil
}

// Mkdir creates a directory and its missing parents.
func (c *Client) Mkdir(ctx context.Context, vm, path string) error {
	_, err := c.do(ctx, http.MethodPost, vmPath(vm, "dirs"), nil, map[string]string{"path": path}, nil, nil)
	return err
}

// Move renames a file or directory.
func (c *Client) Move(ctx context.Context, vm, from, to string) error {
	_, err := c.do(ctx, http.MethodPost, vmPath(vm, "fs", "move"), nil, map[string]string{"from": from, "to": to}, nil, nil)
	return err
}

// Stat returns a path's metadata.
func (c *Client) Stat(ctx context.Context, vm, path string) (*FileStat, error) {
	var out FileStat
	if _, err := c.do(ctx, http.MethodGet, vmPath(vm, "fs", "stat"), pathQuery(path), nil, &out, nil); err != nil {
		return nil, err
	}
	return &out, nil
}
