package client_test

import (
	"context"
	"errors"
	"hash/crc32"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// pattern is an endless, deterministic byte source.
type pattern struct{ off int64 }

func (p *pattern) Read(b []byte) (int, error) {
	for i := range b {
		b[i] = byte((p.off + int64(i)) % 251)
	}
	p.off += int64(len(b))
	return len(b), nil
}

func patternCRC(n int64) uint32 {
	h := crc32.NewIEEE()
	_, _ = io.Copy(h, io.LimitReader(&pattern{}, n))
	return h.Sum32()
}

// TestReadFileStreams checks that ReadFile hands the body over as it
// arrives: it returns while the server still holds most of the file back,
// and reading 64 MiB allocates far less than 64 MiB.
func TestReadFileStreams(t *testing.T) {
	const size = 64 << 20
	const first = 1 << 20
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(size))
		src := &pattern{}
		if _, err := io.CopyN(w, src, first); err != nil {
			return
		}
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		buf := make([]byte, 256<<10)
		_, _ = io.CopyBuffer(w, io.LimitReader(src, size-first), buf)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	rc, err := newClient(t, srv.URL).VM("vm").ReadFile(ctx, "/big.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	h := crc32.NewIEEE()
	if _, err := io.CopyN(h, rc, first); err != nil {
		t.Fatalf("first MiB: %v", err)
	}
	// Only now may the server send the rest: had ReadFile buffered the body
	// it would never have returned.
	close(release)

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	n, err := io.Copy(h, rc)
	runtime.ReadMemStats(&after)
	if err != nil || n != size-first {
		t.Fatalf("read %d bytes: %v", n, err)
	}
	if h.Sum32() != patternCRC(size) {
		t.Fatal("content differs")
	}
	t.Logf("alloc %d KiB", (after.TotalAlloc-before.TotalAlloc)>>10)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Fatalf("reading %d MiB allocated %d MiB: the body is buffered", size>>20, alloc>>20)
	}
}

func TestReadFileCutShort(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		io.WriteString(w, string(make([]byte, 500)))
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}))
	defer srv.Close()
	rc, err := newClient(t, srv.URL).VM("vm").ReadFile(context.Background(), "/f")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if !errors.Is(err, io.ErrUnexpectedEOF) || len(b) != 500 {
		t.Fatalf("read %d bytes, err %v", len(b), err)
	}
}

func TestReadFileEarlyCloseFreesConnection(t *testing.T) {
	gone := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(gone)
		buf := make([]byte, 64<<10)
		for {
			if _, err := w.Write(buf); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	rc, err := newClient(t, srv.URL).VM("vm").ReadFile(context.Background(), "/endless")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(io.Discard, rc, 1<<20); err != nil {
		t.Fatal(err)
	}
	rc.Close()
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the server still writes after Close")
	}
}

func TestReadFileProblem(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	rec.reset(canned{status: 400, ctype: "application/problem+json", body: `{"code":"invalid_argument","detail":"/tmp is a directory; use /dirs","details":{"field":"path"}}`})
	_, err := newClient(t, srv.URL).VM("vm").ReadFile(context.Background(), "/tmp")
	var e *client.Error
	if !errors.As(err, &e) || e.Code != client.CodeInvalidArgument || e.Details["field"] != "path" {
		t.Fatalf("err %v", err)
	}
}

// TestWriteFileStreams uploads 32 MiB from a generator, with and without a
// Content-Length.
func TestWriteFileStreams(t *testing.T) {
	const size = 32 << 20
	type seen struct {
		n   int64
		crc uint32
		cl  int64
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := crc32.NewIEEE()
		n, _ := io.Copy(h, r.Body)
		got <- seen{n, h.Sum32(), r.ContentLength}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"path":"/big","size":`+strconv.FormatInt(n, 10)+`}`)
	}))
	defer srv.Close()
	c := newClient(t, srv.URL)
	want := patternCRC(size)
	for _, sized := range []bool{true, false} {
		opts := client.WriteFileOptions{}
		if sized {
			opts.Size = size
		}
		res, err := c.VM("vm").WriteFile(context.Background(), "/big", io.LimitReader(&pattern{}, size), opts)
		if err != nil {
			t.Fatal(err)
		}
		s := <-got
		if s.n != size || s.crc != want || res.Size != size {
			t.Fatalf("sized=%v: server got %d bytes (crc ok: %v), answer %+v", sized, s.n, s.crc == want, res)
		}
		if sized && s.cl != size || !sized && s.cl != -1 {
			t.Fatalf("sized=%v: Content-Length %d", sized, s.cl)
		}
	}
}

func TestWriteFileTooLarge(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		io.WriteString(w, `{"code":"payload_too_large","detail":"the file exceeds 1024 bytes","details":{"limit":1024}}`)
	}))
	defer srv.Close()
	_, err := newClient(t, srv.URL).VM("vm").WriteFile(context.Background(), "/big", io.LimitReader(&pattern{}, 4<<20), client.WriteFileOptions{Size: 4 << 20})
	var e *client.Error
	if !errors.As(err, &e) || e.Code != client.CodePayloadTooLarge || e.Details["limit"] != float64(1024) {
		t.Fatalf("err %v", err)
	}
}
