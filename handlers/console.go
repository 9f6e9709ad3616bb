package handlers

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"regexp"
	"strings"

	"github.com/go-chi/chi/v5"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// consoleCSP allows the console nothing from another origin. Scripts come
// only from the gateway's own files (no inline script). Styles also allow
// inline style elements: xterm.js writes its theme, and CodeMirror its
// themes, into style elements it creates at run time.
const consoleCSP = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
	"object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// consoleHost is a Host header that may be named in the CSP as it is.
var consoleHost = regexp.MustCompile(`^[A-Za-z0-9.-]+(:[0-9]+)?$|^\[[0-9A-Fa-f:.]+\](:[0-9]+)?$`)

// consoleFile is one file of the console, kept in memory with its
// gzip-compressed form.
type consoleFile struct {
	data  []byte
	gz    []byte
	ctype string
	etag  string
}

// consoleFiles is the built console (web.Dist), loaded once: index.html
// and the content-hashed assets by name.
type consoleFiles struct {
	index  *consoleFile
	assets map[string]*consoleFile
}

// loadConsole reads the console's files from dist. A nil dist serves no
// console (the routes answer 404).
func loadConsole(dist fs.FS) (*consoleFiles, error) {
	c := &consoleFiles{assets: map[string]*consoleFile{}}
	if dist == nil {
		return c, nil
	}
	err := fs.WalkDir(dist, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(dist, p)
		if err != nil {
			return err
		}
		f, err := newConsoleFile(p, data)
		if err != nil {
			return err
		}
		switch {
		case p == "index.html":
			c.index = f
		case path.Dir(p) == "assets":
			c.assets[path.Base(p)] = f
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load the console: %w", err)
	}
	return c, nil
}

func newConsoleFile(name string, data []byte) (*consoleFile, error) {
	ctype := mime.TypeByExtension(path.Ext(name))
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(data); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	return &consoleFile{data: data, gz: buf.Bytes(), ctype: ctype, etag: `"` + hex.EncodeToString(sum[:16]) + `"`}, nil
}

// consoleIndex serves the console's page, never cached (its assets' names
// change with every build).
func (s *Server) consoleIndex(w http.ResponseWriter, r *http.Request) {
	if s.console.index == nil {
		writeError(w, r, gateway.Errorf(gateway.CodeNotFound, "this gateway was built without its web console"))
		return
	}
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("Content-Security-Policy", cspFor(r))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "no-referrer")
	serveConsoleFile(w, r, s.console.index)
}

// consoleAsset serves a content-hashed asset, cached for a year: its name
// changes whenever its content does.
func (s *Server) consoleAsset(w http.ResponseWriter, r *http.Request) {
	f := s.console.assets[chi.URLParam(r, "asset")]
	if f == nil {
		writeError(w, r, gateway.Errorf(gateway.CodeNotFound, "no console asset %q", chi.URLParam(r, "asset")))
		return
	}
	w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	serveConsoleFile(w, r, f)
}

// consoleFallback answers a request no route matched: a browser asking for
// a page outside /v1 gets the console (which routes by the URL's fragment),
// everything else the usual 404 problem.
func (s *Server) consoleFallback(w http.ResponseWriter, r *http.Request) {
	if s.console.index != nil && (r.Method == http.MethodGet || r.Method == http.MethodHead) &&
		r.URL.Path != "/v1" && !strings.HasPrefix(r.URL.Path, "/v1/") && acceptsHTML(r) {
		s.consoleIndex(w, r)
		return
	}
	writeError(w, r, gateway.Errorf(gateway.CodeNotFound, "no route %s %s", r.Method, r.URL.Path))
}

func acceptsHTML(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		if strings.Contains(v, "text/html") {
			return true
		}
	}
	return false
}

// cspFor is the console's Content-Security-Policy: its own origin only,
// with the WebSocket forms of that origin named too, for browsers whose
// 'self' does not cover ws: and wss:.
func cspFor(r *http.Request) string {
	connect := "connect-src 'self'"
	if consoleHost.MatchString(r.Host) {
		connect += " ws://" + r.Host + " wss://" + r.Host
	}
	return consoleCSP + "; " + connect
}

// serveConsoleFile writes f, gzip-compressed when the client takes it, or
// 304 when the client's copy is current.
func serveConsoleFile(w http.ResponseWriter, r *http.Request, f *consoleFile) {
	h := w.Header()
	h.Set("ETag", f.etag)
	h.Set("Vary", "Accept-Encoding")
	if match := r.Header.Get("If-None-Match"); match != "" && etagMatches(match, f.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", f.ctype)
	body := f.data
	if acceptsGzip(r) {
		h.Set("Content-Encoding", "gzip")
		body = f.gz
	}
	h.Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}

func etagMatches(header, etag string) bool {
	for _, v := range strings.Split(header, ",") {
		v = strings.TrimPrefix(strings.TrimSpace(v), "W/")
		if v == "*" || v == etag {
			return true
		}
	}
	return false
}

// acceptsGzip reports whether Accept-Encoding takes gzip (with a q above 0).
func acceptsGzip(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept-Encoding") {
		for _, part := range strings.Split(v, ",") {
			coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
			if !strings.EqualFold(strings.TrimSpace(coding), "gzip") {
				continue
			}
			q := strings.ReplaceAll(strings.TrimSpace(params), " ", "")
			return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
		}
	}
	return false
}
