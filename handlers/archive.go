package handlers

import (
	"bufio"
	"compress/gzip"
	"io"
	"mime"
	"net/http"
	"path"

	"github.com/rs/zerolog"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
	"github.com/agentos-gateway/agentos-gateway/archive"
)

// Archive formats of the format query parameter.
const (
	formatTar   = "tar"
	formatTarGz = "tar.gz"
)

// queryFormat reads the format query parameter (default tar).
func queryFormat(r *http.Request) (string, error) {
	switch f := r.URL.Query().Get("format"); f {
	case "", formatTar:
		return formatTar, nil
	case formatTarGz:
		return formatTarGz, nil
	default:
		return "", gateway.Errorf(gateway.CodeInvalidArgument, "format must be tar or tar.gz, not %q", f).WithDetail("field", "format")
	}
}

// readArchive streams the tree (or file) at path as a tar archive,
// gzip-compressed with format=tar.gz. Errors found before the first byte
// reaches the client are problems; after it, the connection is aborted so
// the client sees a truncated archive rather than a complete-looking one.
func (s *Server) readArchive(w http.ResponseWriter, r *http.Request) {
	q := queryReader{r: r}
	p := q.path("path")
	if q.err != nil {
		writeError(w, r, q.err)
		return
	}
	format, err := queryFormat(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	f, ok := s.files(w, r)
	if !ok {
		return
	}
	defer f.Release()
	name := path.Base(p)
	if p == "/" {
		name = "root"
	}
	ctype := "application/x-tar"
	if format == formatTarGz {
		ctype = "application/gzip"
	}
	out := &firstWrite{w: w, header: func(h http.Header) {
		h.Set("Content-Type", ctype)
		h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name + "." + format}))
	}}
	var sink io.Writer = out
	var zw *gzip.Writer
	if format == formatTarGz {
		zw = gzip.NewWriter(out)
		sink = zw
	}
	err = f.WriteArchive(r.Context(), p, sink)
	if err == nil && zw != nil {
		err = zw.Close()
	}
	// Without an error something was written: a tar ends with a trailer.
	switch {
	case err != nil && !out.wrote:
		writeError(w, r, err)
	case err != nil:
		// The client sees a truncated archive, never a complete-looking
		// one.
		zerolog.Ctx(r.Context()).Warn().Err(err).Str("path", p).Msg("archive failed after its first bytes; aborting the response")
		panic(http.ErrAbortHandler)
	}
}

// firstWrite sets the success headers just before the first byte, so that
// an error found earlier can still be answered as a problem.
type firstWrite struct {
	w      http.ResponseWriter
	header func(http.Header)
	wrote  bool
}

func (f *firstWrite) Write(b []byte) (int, error) {
	if !f.wrote {
		f.wrote = true
		f.header(f.w.Header())
	}
	return f.w.Write(b)
}

// gzipMagic starts every gzip stream.
var gzipMagic = []byte{0x1f, 0x8b}

// writeArchive extracts a tar archive (gzip-compressed when its first bytes
// say so, or format=tar.gz, or Content-Encoding: gzip) into the directory at
// path. The extracted total is bounded by --max-file-bytes and the entry
// count by --max-archive-entries; a refused archive writes nothing.
func (s *Server) writeArchive(w http.ResponseWriter, r *http.Request) {
	q := queryReader{r: r}
	p, mkdirs := q.path("path"), q.bool("mkdirs")
	if q.err != nil {
		writeError(w, r, q.err)
		return
	}
	format, err := queryFormat(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	switch r.Header.Get("Content-Encoding") {
	case "", "identity":
	case "gzip", "x-gzip":
		format = formatTarGz
	default:
		writeError(w, r, gateway.Errorf(gateway.CodeInvalidArgument, "Content-Encoding must be gzip or none").WithDetail("field", "Content-Encoding"))
		return
	}
	f, ok := s.files(w, r)
	if !ok {
		return
	}
	defer f.Release()
	body := bufio.NewReader(r.Body)
	var tarStream io.Reader = body
	if magic, _ := body.Peek(len(gzipMagic)); format == formatTarGz || string(magic) == string(gzipMagic) {
		zr, err := gzip.NewReader(body)
		if err != nil {
			writeError(w, r, gateway.Wrap(gateway.CodeInvalidArgument, err, "the body is not a readable tar.gz archive; nothing was extracted"))
			return
		}
		defer zr.Close()
		tarStream = zr
	}
	lim := archive.Limits{MaxBytes: s.cfg.MaxFileBytes, MaxEntries: s.cfg.MaxArchiveEntries}
	st, err := f.ExtractArchive(r.Context(), p, tarStream, mkdirs, lim)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.ArchiveExtracted{Path: p, Files: st.Files, Dirs: st.Dirs, Symlinks: st.Symlinks, Bytes: st.Bytes})
}
