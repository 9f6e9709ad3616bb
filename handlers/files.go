package handlers

import (
	"errors"
	"fmt"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"

	"github.com/rs/zerolog"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
	"github.com/agentos-gateway/agentos-gateway/vms"
)

// queryPath reads and checks the path query parameter: absolute, no NUL, no
// "..", normalised.
func queryPath(r *http.Request, name string) (string, error) {
	raw := r.URL.Query().Get(name)
	if raw == "" {
		return "", gateway.Errorf(gateway.CodeInvalidArgument, "query parameter %s is required", name).WithDetail("field", name)
	}
	p, err := vms.CheckPath(raw)
	if err != nil {
		return "", gateway.Errorf(gateway.CodeInvalidArgument, "%s: path must be absolute, without .. or NUL", name).WithDetail("field", name)
	}
	return p, nil
}

// queryReader reads query parameters in order and keeps the first problem,
// so a handler checks once.
type queryReader struct {
	r   *http.Request
	err error
}

func (q *queryReader) path(name string) string {
	if q.err != nil {
		return ""
	}
	p, err := queryPath(q.r, name)
	q.err = err
	return p
}

func (q *queryReader) bool(name string) bool {
	if q.err != nil {
		return false
	}
	b, err := queryBool(q.r, name)
	q.err = err
	return b
}

func (q *queryReader) int(name string, def, lo, hi int) int {
	if q.err != nil {
		return 0
	}
	n, err := queryInt(q.r, name, def, lo, hi)
	q.err = err
	return n
}

func (s *Server) files(w http.ResponseWriter, r *http.Request) (*vms.Files, bool) {
	f, err := s.vms.Files(r.Context(), principalFrom(r.Context()).tenant.ID, pathParam(r, "vm"))
	if err != nil {
		writeError(w, r, err)
		return nil, false
	}
	return f, true
}

// fileAt resolves the path query parameter and the VM's filesystem, or
// answers the problem and reports false.
func (s *Server) fileAt(w http.ResponseWriter, r *http.Request) (string, *vms.Files, bool) {
	p, err := queryPath(r, "path")
	if err != nil {
		writeError(w, r, err)
		return "", nil, false
	}
	f, ok := s.files(w, r)
	return p, f, ok
}

func contentType(p string) string {
	if t := mime.TypeByExtension(path.Ext(p)); t != "" {
		return t
	}
	return "application/octet-stream"
}

// readFile streams a file's bytes, or the ranges of them a Range header
// asks for, through http.ServeContent over a reader that fetches lazily with
// PREAD calls: only what is sent is read, in bounded memory. Errors found
// before the first byte are problems; the size is known up front, so a
// transfer cut short afterwards shows as a short body to the client.
func (s *Server) readFile(w http.ResponseWriter, r *http.Request) {
	p, f, ok := s.fileAt(w, r)
	if !ok {
		return
	}
	defer f.Release()
	info, err := f.Stat(r.Context(), p)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if info.IsDir {
		writeError(w, r, gateway.Errorf(gateway.CodeInvalidArgument, "%s is a directory; use /dirs or /archive", p).WithDetail("field", "path"))
		return
	}
	s.serveFile(w, r, f, p, info)
}

// statFileHead answers HEAD: a file's headers as GET sends them (through the
// same conditional and range handling), or a directory's type.
func (s *Server) statFileHead(w http.ResponseWriter, r *http.Request) {
	p, f, ok := s.fileAt(w, r)
	if !ok {
		return
	}
	defer f.Release()
	info, err := f.Stat(r.Context(), p)
	if err != nil {
		w.WriteHeader(statusOf[gateway.ErrorCode(err)])
		return
	}
	if !info.IsDir {
		s.serveFile(w, r, f, p, info)
		return
	}
	w.Header().Set("Content-Type", "inode/directory")
	w.Header().Set("Content-Length", strconv.FormatInt(info.Size, 10))
	w.Header().Set("Last-Modified", info.ModTime.UTC().Format(http.TimeFormat))
	w.WriteHeader(http.StatusOK)
}

// serveFile answers GET or HEAD of a regular file with http.ServeContent,
// which handles Range (one range: 206 with Content-Range), If-Range,
// If-None-Match, If-Modified-Since, If-Match and If-Unmodified-Since against
// the ETag and Last-Modified set here.
func (s *Server) serveFile(w http.ResponseWriter, r *http.Request, f *vms.Files, p string, info vms.FileInfo) {
	if strings.Contains(r.Header.Get("Range"), ",") {
		// Several ranges get the whole file (200), as RFC 9110 allows:
		// ServeContent would answer multipart/byteranges from a goroutine
		// of its own, reading the VM after this handler released it.
		r.Header.Del("Range")
	}
	w.Header().Set("Content-Type", contentType(p))
	w.Header().Set("ETag", fileETag(info))
	body := f.NewReader(r.Context(), p, info.Size)
	pw := &problemWriter{ResponseWriter: w, r: r}
	http.ServeContent(pw, r, p, info.ModTime, body)
	if err := body.Err(); err != nil {
		// Headers are gone; abort the response so the client sees a
		// truncated transfer rather than a complete-looking one.
		zerolog.Ctx(r.Context()).Warn().Err(err).Str("path", p).Msg("file read failed after the headers; aborting the response")
		panic(http.ErrAbortHandler)
	}
}

// fileETag is a strong validator derived from the file's metadata (inode,
// size and modification time in milliseconds): reading the content to hash
// it would cost a full read per request. A rewrite of the same size within
// the same millisecond keeps the tag; that is the price of not hashing.
func fileETag(info vms.FileInfo) string {
	return fmt.Sprintf(`"%x-%x-%x"`, info.Ino, info.Size, info.ModTime.UnixMilli())
}

// problemWriter turns the plain-text errors http.ServeContent writes (416,
// 412) into the gateway's problem documents, keeping the headers it set
// for them (Content-Range: bytes */size on 416).
type problemWriter struct {
	http.ResponseWriter
	r      *http.Request
	failed bool
}

func (w *problemWriter) WriteHeader(status int) {
	if status < http.StatusBadRequest || w.failed {
		w.ResponseWriter.WriteHeader(status)
		return
	}
	w.failed = true
	var err error
	switch status {
	case http.StatusRequestedRangeNotSatisfiable:
		err = gateway.Errorf(gateway.CodeRangeNotSatisfiable, "the Range is outside the file").WithDetail("field", "Range")
	case http.StatusPreconditionFailed:
		err = gateway.Errorf(gateway.CodePreconditionFailed, "the file does not match If-Match or If-Unmodified-Since")
	default:
		err = gateway.Errorf(gateway.CodeInternal, "the file could not be served")
	}
	w.Header().Del("X-Content-Type-Options")
	writeError(w.ResponseWriter, w.r, err)
}

func (w *problemWriter) Write(b []byte) (int, error) {
	if w.failed {
		// The plain-text message ServeContent writes after its status.
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

// writeFile streams the body into the file; the size limit is enforced while
// streaming and nothing is left behind when it is exceeded.
func (s *Server) writeFile(w http.ResponseWriter, r *http.Request) {
	q := queryReader{r: r}
	p, mkdirs := q.path("path"), q.bool("mkdirs")
	if q.err != nil {
		writeError(w, r, q.err)
		return
	}
	if r.ContentLength > s.cfg.MaxFileBytes {
		writeError(w, r, gateway.Errorf(gateway.CodePayloadTooLarge, "the file exceeds %d bytes", s.cfg.MaxFileBytes).WithDetail("limit", s.cfg.MaxFileBytes))
		return
	}
	f, ok := s.files(w, r)
	if !ok {
		return
	}
	defer f.Release()
	n, err := f.WriteFrom(r.Context(), p, http.MaxBytesReader(w, r.Body, s.cfg.MaxFileBytes), mkdirs)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			err = gateway.Errorf(gateway.CodePayloadTooLarge, "the file exceeds %d bytes", s.cfg.MaxFileBytes).WithDetail("limit", s.cfg.MaxFileBytes)
		}
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.FileWritten{Path: p, Size: n})
}

func (s *Server) deleteFile(w http.ResponseWriter, r *http.Request) {
	q := queryReader{r: r}
	p, recursive := q.path("path"), q.bool("recursive")
	if q.err != nil {
		writeError(w, r, q.err)
		return
	}
	if p == "/" {
		writeError(w, r, gateway.Errorf(gateway.CodeInvalidArgument, "refusing to delete /").WithDetail("field", "path"))
		return
	}
	f, ok := s.files(w, r)
	if !ok {
		return
	}
	defer f.Release()
	if err := f.Remove(r.Context(), p, recursive); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) listDir(w http.ResponseWriter, r *http.Request) {
	q := queryReader{r: r}
	p, recursive, maxDepth := q.path("path"), q.bool("recursive"), q.int("maxDepth", 0, 0, 64)
	if q.err != nil {
		writeError(w, r, q.err)
		return
	}
	f, ok := s.files(w, r)
	if !ok {
		return
	}
	defer f.Release()
	entries, err := f.List(r.Context(), p, recursive, maxDepth)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.List[gateway.DirEntry]{Items: entries})
}

func (s *Server) mkdir(w http.ResponseWriter, r *http.Request) {
	var req api.MkdirRequest
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		writeError(w, r, err)
		return
	}
	p, err := vms.CheckPath(req.Path)
	if err != nil {
		writeError(w, r, gateway.Errorf(gateway.CodeInvalidArgument, "path must be absolute, without .. or NUL").WithDetail("field", "path"))
		return
	}
	f, ok := s.files(w, r)
	if !ok {
		return
	}
	defer f.Release()
	if err := f.Mkdir(r.Context(), p); err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, api.DirCreated{Path: p})
}

func (s *Server) move(w http.ResponseWriter, r *http.Request) {
	var req api.MoveRequest
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		writeError(w, r, err)
		return
	}
	from, err1 := vms.CheckPath(req.From)
	to, err2 := vms.CheckPath(req.To)
	if err1 != nil || err2 != nil {
		writeError(w, r, gateway.Errorf(gateway.CodeInvalidArgument, "from and to must be absolute paths without .. or NUL"))
		return
	}
	f, ok := s.files(w, r)
	if !ok {
		return
	}
	defer f.Release()
	if err := f.Move(r.Context(), from, to); err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.Moved{From: from, To: to})
}

func (s *Server) stat(w http.ResponseWriter, r *http.Request) {
	p, f, ok := s.fileAt(w, r)
	if !ok {
		return
	}
	defer f.Release()
	info, err := f.Stat(r.Context(), p)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.Stat{Path: p, Size: info.Size, Mode: info.RawMode, IsDir: info.IsDir, IsSymlink: info.IsSymlink,
		ModTime: info.ModTime.UTC(), Uid: info.UID, Gid: info.GID})
}
