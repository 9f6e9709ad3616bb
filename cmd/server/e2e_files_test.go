package main

// File downloads end to end: single byte ranges (206, Content-Range), 416
// problems, ETag and Last-Modified validators (304, If-Range, If-Match),
// HEAD headers, and PUT onto a directory refused with the directory intact.

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// fileGet sends GET (or HEAD) /files with headers through the validating
// transport and returns the response with its whole body.
func (e *e2e) fileGet(method, vm, path string, header map[string]string) (*http.Response, []byte) {
	e.t.Helper()
	return e.send(method, "/v1/vms/"+vm+"/files?path="+path, testAdminKey, nil, header)
}

// TestE2EFileRanges: Range forms give 206 with the right bytes and
// headers, a range outside the file is a 416 problem, several ranges get the
// whole file, and typed clients read ranges too.
func TestE2EFileRanges(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	ctx := ctxT(t)
	c := e.admin
	vm := e.vm(c, client.CreateVMRequest{})
	const size = 10000
	content := make([]byte, size)
	for i := range content {
		content[i] = byte(i % 251)
	}
	if _, err := c.VM(vm.ID).WriteFile(ctx, "/workspace/r.bin", bytes.NewReader(content), client.WriteFileOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.VM(vm.ID).WriteFile(ctx, "/workspace/empty.bin", bytes.NewReader(nil), client.WriteFileOptions{}); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		rng        string
		first, end int // the bytes [first, end) of content
	}{
		{"bytes=0-99", 0, 100},
		{"bytes=5-5", 5, 6},
		{"bytes=9000-", 9000, size},
		{"bytes=-10", size - 10, size},
		{"bytes=9990-20000", 9990, size}, // the end is clamped to the file
		{"bytes=0-", 0, size},
		{"bytes=-20000", 0, size}, // a suffix longer than the file is all of it
	} {
		t.Run(tc.rng, func(t *testing.T) {
			e := e.sub(t)
			resp, body := e.fileGet("GET", vm.ID, "/workspace/r.bin", map[string]string{"Range": tc.rng})
			wantRange := "bytes " + strconv.Itoa(tc.first) + "-" + strconv.Itoa(tc.end-1) + "/" + strconv.Itoa(size)
			if resp.StatusCode != http.StatusPartialContent || resp.Header.Get("Content-Range") != wantRange ||
				resp.ContentLength != int64(tc.end-tc.first) || resp.Header.Get("Accept-Ranges") != "bytes" {
				t.Fatalf("%d, Content-Range %q (want %q), Content-Length %d", resp.StatusCode, resp.Header.Get("Content-Range"), wantRange, resp.ContentLength)
			}
			if !bytes.Equal(body, content[tc.first:tc.end]) {
				t.Fatalf("%d bytes, not the range's", len(body))
			}
		})
	}

	t.Run("unsatisfiable", func(t *testing.T) {
		e, ctx := e.sub(t), ctxT(t)
		for _, rng := range []string{"bytes=10000-", "bytes=20000-30000"} {
			resp, body := e.fileGet("GET", vm.ID, "/workspace/r.bin", map[string]string{"Range": rng})
			var p struct {
				Code   string `json:"code"`
				Status int    `json:"status"`
			}
			if err := json.Unmarshal(body, &p); err != nil {
				t.Fatalf("%s: %q: %v", rng, body, err)
			}
			if resp.StatusCode != http.StatusRequestedRangeNotSatisfiable || p.Code != string(client.CodeRangeNotSatisfiable) || p.Status != 416 ||
				!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") || resp.Header.Get("Content-Range") != "bytes */10000" {
				t.Fatalf("%s: %d %v %s", rng, resp.StatusCode, resp.Header, body)
			}
		}
		_, err := c.VM(vm.ID).ReadFileRange(ctx, "/workspace/r.bin", client.ReadRangeOptions{Offset: size})
		wantCode(t, err, client.CodeRangeNotSatisfiable, http.StatusRequestedRangeNotSatisfiable)
	})

	t.Run("several ranges get the whole file", func(t *testing.T) {
		e := e.sub(t)
		resp, body := e.fileGet("GET", vm.ID, "/workspace/r.bin", map[string]string{"Range": "bytes=0-1,5-6"})
		if resp.StatusCode != http.StatusOK || !bytes.Equal(body, content) {
			t.Fatalf("%d, %d bytes", resp.StatusCode, len(body))
		}
	})

	t.Run("empty file ignores Range", func(t *testing.T) {
		e := e.sub(t)
		resp, body := e.fileGet("GET", vm.ID, "/workspace/empty.bin", map[string]string{"Range": "bytes=0-10"})
		if resp.StatusCode != http.StatusOK || len(body) != 0 {
			t.Fatalf("%d, %d bytes", resp.StatusCode, len(body))
		}
	})

	t.Run("typed client", func(t *testing.T) {
		ctx := ctxT(t)
		for _, o := range []client.ReadRangeOptions{{Offset: 100, Length: 50}, {Offset: 9500}, {Offset: -7}} {
			fr, err := c.VM(vm.ID).ReadFileRange(ctx, "/workspace/r.bin", o)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(fr.Body)
			fr.Body.Close()
			if err != nil || !fr.Partial || fr.Size != size || int64(len(got)) != fr.Length || !bytes.Equal(got, content[fr.Start:fr.Start+fr.Length]) {
				t.Fatalf("%+v: %+v, %d bytes, %v", o, fr, len(got), err)
			}
		}
	})
}

// TestE2EFileValidators: ETag and Last-Modified on GET and HEAD;
// If-None-Match and If-Modified-Since give 304, If-Range sends the range
// only while the file is unchanged, If-Match that fails is a 412 problem,
// and rewriting the file changes the ETag.
func TestE2EFileValidators(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	ctx := ctxT(t)
	c := e.admin
	vm := e.vm(c, client.CreateVMRequest{})
	const p = "/workspace/v.txt"
	if _, err := c.VM(vm.ID).WriteFile(ctx, p, strings.NewReader("version one\n"), client.WriteFileOptions{}); err != nil {
		t.Fatal(err)
	}
	resp, body := e.fileGet("GET", vm.ID, p, nil)
	etag, lastMod := resp.Header.Get("ETag"), resp.Header.Get("Last-Modified")
	if resp.StatusCode != 200 || string(body) != "version one\n" || !strings.HasPrefix(etag, `"`) || lastMod == "" || resp.Header.Get("Accept-Ranges") != "bytes" {
		t.Fatalf("GET: %d %v", resp.StatusCode, resp.Header)
	}

	t.Run("HEAD", func(t *testing.T) {
		e, ctx := e.sub(t), ctxT(t)
		resp, _ := e.fileGet("HEAD", vm.ID, p, nil)
		if resp.StatusCode != 200 || resp.Header.Get("ETag") != etag || resp.Header.Get("Last-Modified") != lastMod ||
			resp.Header.Get("Content-Length") != "12" || resp.Header.Get("Accept-Ranges") != "bytes" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
			t.Fatalf("HEAD: %d %v", resp.StatusCode, resp.Header)
		}
		resp, _ = e.fileGet("HEAD", vm.ID, p, map[string]string{"Range": "bytes=0-3"})
		if resp.StatusCode != http.StatusPartialContent || resp.Header.Get("Content-Range") != "bytes 0-3/12" {
			t.Fatalf("HEAD with Range: %d %v", resp.StatusCode, resp.Header)
		}
		h, err := c.VM(vm.ID).HeadFile(ctx, p)
		if err != nil || h.ETag != etag || h.Size != 12 {
			t.Fatalf("StatFileHead: %+v %v", h, err)
		}
	})

	for _, tc := range []struct {
		name   string
		header map[string]string
		status int
		body   string
	}{
		{"If-None-Match", map[string]string{"If-None-Match": etag}, http.StatusNotModified, ""},
		{"If-None-Match among others", map[string]string{"If-None-Match": `"other", ` + etag}, http.StatusNotModified, ""},
		{"If-None-Match stale", map[string]string{"If-None-Match": `"other"`}, http.StatusOK, "version one\n"},
		{"If-Modified-Since", map[string]string{"If-Modified-Since": lastMod}, http.StatusNotModified, ""},
		{"If-Modified-Since long ago", map[string]string{"If-Modified-Since": "Mon, 02 Jan 2006 15:04:05 GMT"}, http.StatusOK, "version one\n"},
		{"If-Range matching", map[string]string{"Range": "bytes=0-6", "If-Range": etag}, http.StatusPartialContent, "version"},
		{"If-Range stale", map[string]string{"Range": "bytes=0-6", "If-Range": `"other"`}, http.StatusOK, "version one\n"},
		{"If-Match", map[string]string{"If-Match": etag}, http.StatusOK, "version one\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := e.sub(t)
			resp, body := e.fileGet("GET", vm.ID, p, tc.header)
			if resp.StatusCode != tc.status || string(body) != tc.body {
				t.Fatalf("%d %q, want %d %q", resp.StatusCode, body, tc.status, tc.body)
			}
			if tc.status == http.StatusNotModified && resp.Header.Get("ETag") != etag {
				t.Fatalf("304 without the ETag: %v", resp.Header)
			}
		})
	}
	t.Run("If-Match failing", func(t *testing.T) {
		e := e.sub(t)
		err := e.raw("GET", "/v1/vms/"+vm.ID+"/files?path="+p, testAdminKey, nil, map[string]string{"If-Match": `"other"`})
		wantCode(t, err, client.CodePreconditionFailed, http.StatusPreconditionFailed)
	})

	t.Run("a rewrite changes the ETag", func(t *testing.T) {
		ctx := ctxT(t)
		if _, err := c.VM(vm.ID).WriteFile(ctx, p, strings.NewReader("version two, longer\n"), client.WriteFileOptions{}); err != nil {
			t.Fatal(err)
		}
		fr, err := c.VM(vm.ID).ReadFileRange(ctx, p, client.ReadRangeOptions{IfNoneMatch: etag})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(fr.Body)
		fr.Body.Close()
		if fr.NotModified || string(got) != "version two, longer\n" || fr.ETag == etag || fr.ETag == "" {
			t.Fatalf("%+v %q", fr, got)
		}
		fr, err = c.VM(vm.ID).ReadFileRange(ctx, p, client.ReadRangeOptions{IfNoneMatch: fr.ETag})
		if err != nil || !fr.NotModified || fr.Body != nil {
			t.Fatalf("%+v %v", fr, err)
		}
		// If-Range with the old ETag sends the whole new file.
		fr, err = c.VM(vm.ID).ReadFileRange(ctx, p, client.ReadRangeOptions{Offset: 0, Length: 4, IfRange: etag})
		if err != nil {
			t.Fatal(err)
		}
		got, _ = io.ReadAll(fr.Body)
		fr.Body.Close()
		if fr.Partial || string(got) != "version two, longer\n" {
			t.Fatalf("%+v %q", fr, got)
		}
	})
}

// TestE2EWriteFileOntoDirectory: PUT /files onto a directory is 409 and the
// directory keeps its content.
func TestE2EWriteFileOntoDirectory(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	ctx := ctxT(t)
	c := e.admin
	vm := e.vm(c, client.CreateVMRequest{})
	if _, err := c.VM(vm.ID).WriteFile(ctx, "/workspace/d/inner.txt", strings.NewReader("inside"), client.WriteFileOptions{Mkdirs: true}); err != nil {
		t.Fatal(err)
	}
	for _, mkdirs := range []bool{false, true} {
		_, err := c.VM(vm.ID).WriteFile(ctx, "/workspace/d", strings.NewReader("not a directory"), client.WriteFileOptions{Mkdirs: mkdirs})
		wantCode(t, err, client.CodeConflict, http.StatusConflict)
	}
	st, err := c.VM(vm.ID).Stat(ctx, "/workspace/d")
	if err != nil || !st.IsDir {
		t.Fatalf("the directory: %+v %v", st, err)
	}
	l, err := c.VM(vm.ID).ListDir(ctx, "/workspace", client.ListDirOptions{Recursive: false, MaxDepth: 0})
	if err != nil {
		t.Fatal(err)
	}
	if names := entryNames(l, false); !sameSet(names, []string{"d"}) {
		t.Fatalf("/workspace holds %v (an upload's temporary file left behind?)", names)
	}
	if out := e.exec(c, vm.ID, "cat /workspace/d/inner.txt"); out != "inside" {
		t.Fatalf("the directory's file reads %q", out)
	}
}

// TestE2EWriteFileMissingDirectory: a file PUT follows the archive upload's
// rule for a missing directory: 404 unless mkdirs=true, and nothing is
// written; a directory that is a file is 409.
func TestE2EWriteFileMissingDirectory(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	ctx := ctxT(t)
	vm := e.admin.VM(e.vm(e.admin, client.CreateVMRequest{}).ID)
	_, err := vm.WriteFile(ctx, "/workspace/new/sub/f.txt", strings.NewReader("x"), client.WriteFileOptions{})
	wantCode(t, err, client.CodeNotFound, http.StatusNotFound)
	if _, err := vm.Stat(ctx, "/workspace/new"); !client.IsCode(err, client.CodeNotFound) {
		t.Fatalf("a refused PUT left /workspace/new behind: %v", err)
	}
	_, err = vm.UploadArchive(ctx, "/workspace/new", bytes.NewReader(tarOf(t, "f.txt", "x")), client.ArchiveOptions{})
	wantCode(t, err, client.CodeNotFound, http.StatusNotFound)
	if _, err := vm.WriteFile(ctx, "/workspace/plain", strings.NewReader("x"), client.WriteFileOptions{}); err != nil {
		t.Fatalf("a PUT into an existing directory: %v", err)
	}
	_, err = vm.WriteFile(ctx, "/workspace/plain/f.txt", strings.NewReader("x"), client.WriteFileOptions{})
	wantCode(t, err, client.CodeConflict, http.StatusConflict)
	if _, err := vm.WriteFile(ctx, "/workspace/new/sub/f.txt", strings.NewReader("x"), client.WriteFileOptions{Mkdirs: true}); err != nil {
		t.Fatalf("with mkdirs=true: %v", err)
	}
	if out := e.exec(e.admin, vm.ID(), "cat /workspace/new/sub/f.txt"); out != "x" {
		t.Fatalf("the file reads %q", out)
	}
}
