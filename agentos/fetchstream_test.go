package agentos

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// guestHTTP serves /big (300000 bytes, more than one FetchChunkSize), /head
// (headers with repeated names) and /hang (a head, then nothing), and
// echoes the request's headers and body length at /echo.
const guestHTTP = `require('http').createServer((q, s) => {
  if (q.url === '/big') { s.writeHead(200, {'content-type': 'text/plain'}); s.end('x'.repeat(300000)); return; }
  if (q.url === '/hang') { s.writeHead(200, {'content-type': 'text/event-stream'}); s.write('data: 1\n\n'); return; }
  let n = 0; q.on('data', d => n += d.length);
  q.on('end', () => { s.setHeader('set-cookie', ['a=1', 'b=2']); s.writeHead(201); s.end(JSON.stringify({h: q.headers, n})); });
}).listen(8090, () => console.log('ready'))`

func TestFetchStream(t *testing.T) {
	vm := newVM(t, VMOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	p, err := vm.Spawn(ctx, []string{"node", "-e", guestHTTP}, SpawnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if o, err := p.Next(ctx); err != nil || !strings.Contains(string(o.Data), "ready") {
		t.Fatalf("guest server: %q %v", o.Data, err)
	}

	t.Run("head, repeated headers and body", func(t *testing.T) {
		st, err := vm.FetchStream(ctx, FetchRequest{Port: 8090, Method: http.MethodPost, Path: "/echo",
			Header: http.Header{"X-Multi": {"a", "b"}, "Cookie": {"c=1", "d=2"}}, Body: []byte("hello")})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		b, err := io.ReadAll(st)
		if err != nil || st.Status != 201 || len(st.Header.Values("Set-Cookie")) != 2 {
			t.Fatalf("status %d, header %v, %v", st.Status, st.Header, err)
		}
		if s := string(b); !strings.Contains(s, `"x-multi":"a, b"`) || !strings.Contains(s, `"cookie":"c=1; d=2"`) || !strings.Contains(s, `"n":5`) {
			t.Errorf("the guest saw %s", s)
		}
	})

	t.Run("a body of several chunks, read in small pieces", func(t *testing.T) {
		st, err := vm.FetchStream(ctx, FetchRequest{Port: 8090, Path: "/big"})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		var n int
		buf := make([]byte, 1000)
		for {
			k, err := st.Read(buf)
			n += k
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if n != 300000 {
			t.Errorf("read %d bytes, want 300000", n)
		}
	})

	t.Run("closed early, the stream is cancelled", func(t *testing.T) {
		st, err := vm.FetchStream(ctx, FetchRequest{Port: 8090, Path: "/hang"})
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		if k, err := st.Read(buf); err != nil || !strings.HasPrefix(string(buf[:k]), "data: 1") {
			t.Fatalf("first read %q %v", buf[:k], err)
		}
		if err := st.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if _, err := st.Read(buf); !errors.Is(err, ErrClosed) {
			t.Errorf("Read after Close: %v", err)
		}
		// The sidecar forgot the stream: reading it by id fails.
		if _, _, err := st.next(64); err == nil {
			t.Error("the cancelled stream still reads")
		}
	})

	t.Run("a read waiting for the guest ends with its context", func(t *testing.T) {
		rctx, rcancel := context.WithCancel(ctx)
		st, err := vm.FetchStream(rctx, FetchRequest{Port: 8090, Path: "/hang"})
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		if _, err := st.Read(buf); err != nil {
			t.Fatal(err)
		}
		rcancel()
		if _, err := st.Read(buf); !errors.Is(err, context.Canceled) {
			t.Errorf("Read after cancel: %v", err)
		}
		if err := st.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})

	t.Run("no listener", func(t *testing.T) {
		_, err := vm.FetchStream(ctx, FetchRequest{Port: 8091})
		var rej *RejectedError
		if !errors.As(err, &rej) || rej.Code != "execution_error" {
			t.Errorf("FetchStream to a closed port: %v", err)
		}
	})
}
