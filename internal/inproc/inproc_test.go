package inproc

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wait bounds a test's wait for a channel.
func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func TestRoundTrip(t *testing.T) {
	tests := []struct {
		name       string
		handler    http.HandlerFunc
		method     string
		body       string
		wantStatus int
		wantBody   string
		wantHeader map[string]string
	}{
		{
			name: "a JSON answer with its status and headers",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, `{"ok":true}`)
			},
			method: http.MethodGet, wantStatus: http.StatusCreated, wantBody: `{"ok":true}`,
			wantHeader: map[string]string{"Content-Type": "application/json"},
		},
		{
			name: "the request as the handler sees it",
			handler: func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				_, _ = io.WriteString(w, r.Method+" "+r.RequestURI+" "+r.Host+" "+r.RemoteAddr+" "+r.Header.Get("Authorization")+" "+string(b))
			},
			method: http.MethodPost, body: "data", wantStatus: http.StatusOK,
			wantBody: "POST /v1/vms?limit=2 gw.example 127.0.0.1:0 Bearer k data",
		},
		{
			name:    "a handler that writes nothing is 200 with an empty body",
			handler: func(w http.ResponseWriter, r *http.Request) {},
			method:  http.MethodDelete, wantStatus: http.StatusOK,
		},
		{
			name: "an interim answer is not the response",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusEarlyHints)
				w.WriteHeader(http.StatusNoContent)
			},
			method: http.MethodGet, wantStatus: http.StatusNoContent,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hc := &http.Client{Transport: &Transport{Handler: tt.handler}}
			req, err := http.NewRequestWithContext(t.Context(), tt.method, "http://gw.example/v1/vms?limit=2", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer k")
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.wantStatus || string(got) != tt.wantBody {
				t.Errorf("got %d %q, want %d %q", resp.StatusCode, got, tt.wantStatus, tt.wantBody)
			}
			for k, v := range tt.wantHeader {
				if resp.Header.Get(k) != v {
					t.Errorf("header %s = %q, want %q", k, resp.Header.Get(k), v)
				}
			}
		})
	}
}

// TestStreams proves the head and each write reach the client while the
// handler still runs, and that closing the body ends the handler.
func TestStreams(t *testing.T) {
	next, returned := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(returned)
		w.Header().Set("Content-Type", "text/event-stream")
		w.(http.Flusher).Flush()
		for {
			select {
			case <-next:
			case <-r.Context().Done():
				return
			}
			if _, err := io.WriteString(w, "data: x\n\n"); err != nil {
				return
			}
		}
	})
	resp, err := (&http.Client{Transport: &Transport{Handler: h}}).Get("http://gw/events")
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("head %v", resp.Header)
	}
	for range 2 {
		go func() { next <- struct{}{} }()
		buf := make([]byte, len("data: x\n\n"))
		if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "data: x\n\n" {
			t.Fatalf("read %q, %v", buf, err)
		}
	}
	_ = resp.Body.Close()
	wait(t, returned, "the handler to return after Close")
}

// TestEnds covers the ways a round trip ends early: its context, a client
// that stops reading, a handler that panics.
func TestEnds(t *testing.T) {
	tests := []struct {
		name string
		// run makes the round trip and returns its error.
		run func(t *testing.T, hc *http.Client) error
		// handler blocks until its context ends, unless it panics.
		panics bool
		// headFirst writes the head before blocking.
		headFirst bool
	}{
		{
			name: "the context ends before the head",
			run: func(t *testing.T, hc *http.Client) error {
				ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://gw/", nil)
				_, err := hc.Do(req)
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("err = %v, want the deadline", err)
				}
				return err
			},
		},
		{
			name:      "the context ends while the handler writes to a client that does not read",
			headFirst: true,
			run: func(t *testing.T, hc *http.Client) error {
				ctx, cancel := context.WithCancel(t.Context())
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://gw/", nil)
				resp, err := hc.Do(req)
				if err != nil {
					cancel()
					return err
				}
				cancel()
				_, err = io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if err == nil {
					t.Error("the body ended cleanly, want the context's error")
				}
				return nil
			},
		},
		{
			name:   "a handler panics",
			panics: true,
			run: func(t *testing.T, hc *http.Client) error {
				_, err := hc.Get("http://gw/")
				if err == nil || !strings.Contains(err.Error(), "panicked") {
					t.Errorf("err = %v, want the panic", err)
				}
				return err
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			returned := make(chan struct{})
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				defer close(returned)
				if tt.panics {
					panic("boom")
				}
				if tt.headFirst {
					w.(http.Flusher).Flush()
					for {
						// Blocks on the pipe once the client stops reading.
						if _, err := w.Write(make([]byte, 1024)); err != nil {
							return
						}
					}
				}
				<-r.Context().Done()
			})
			_ = tt.run(t, &http.Client{Transport: &Transport{Handler: h}})
			wait(t, returned, "the handler to return")
		})
	}
}

type ctxKey struct{}

// TestIsolated: the handler gets the client's cancellation but none of its
// context's values, as a request from the network would.
func TestIsolated(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.Context().Value(ctxKey{}); v != nil {
			t.Errorf("the handler sees the client's value %v", v)
		}
		<-r.Context().Done()
	})
	ctx, cancel := context.WithCancel(context.WithValue(t.Context(), ctxKey{}, "outer"))
	time.AfterFunc(50*time.Millisecond, cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://gw/", nil)
	if _, err := (&http.Client{Transport: &Transport{Handler: h}}).Do(req); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want the cancellation", err)
	}
}

// closeTracker is a request body that says whether it was closed.
type closeTracker struct {
	io.Reader
	closed chan struct{}
}

func (c *closeTracker) Close() error {
	close(c.closed)
	return nil
}

// TestClosesRequestBody: the request's body is closed once the handler
// returned, as the RoundTripper contract asks, even if the handler did not
// read it.
func TestClosesRequestBody(t *testing.T) {
	body := &closeTracker{Reader: strings.NewReader("unread"), closed: make(chan struct{})}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusAccepted) })
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://gw/", body)
	resp, err := (&http.Client{Transport: &Transport{Handler: h}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	wait(t, body.closed, "the request body to be closed")
}
