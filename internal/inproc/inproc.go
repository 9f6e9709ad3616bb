// Package inproc serves HTTP requests through an http.Handler of the same
// process, as an http.RoundTripper: a client built on it reaches the
// handler with no socket, and the handler sees the request as it would
// from the network (its middleware, authentication and limits included).
//
// The response streams: its head is returned as soon as the handler writes
// it (or flushes), and its body is a pipe the handler keeps writing into,
// so that a Server-Sent Events answer arrives event by event.
package inproc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
)

// RemoteAddr is the RemoteAddr of the requests the handler serves, unless
// Transport.RemoteAddr says otherwise.
const RemoteAddr = "127.0.0.1:0"

// ErrAbandoned ends the body of a response the client closed before the
// handler finished, as the handler sees it when it writes.
var ErrAbandoned = errors.New("inproc: the client closed the response")

// Transport serves each request through Handler on a goroutine that the
// response owns: it ends when the handler returns, and closing the body
// (or ending the request's context) cancels the handler's context and
// waits for it to return.
type Transport struct {
	Handler http.Handler
	// RemoteAddr is what the handler sees as the peer (default RemoteAddr).
	RemoteAddr string
	// TLS is the connection state the handler sees (nil: plain HTTP).
	TLS *tls.ConnectionState
	// Header is added to every request, over what it carries.
	Header http.Header
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(req.Context())
	sreq := req.Clone(isolated{ctx})
	sreq.RequestURI = req.URL.RequestURI()
	sreq.RemoteAddr = t.RemoteAddr
	if sreq.RemoteAddr == "" {
		sreq.RemoteAddr = RemoteAddr
	}
	if sreq.Host == "" {
		sreq.Host = req.URL.Host
	}
	if sreq.Body == nil {
		sreq.Body = http.NoBody
	}
	sreq.TLS = t.TLS
	if sreq.Header == nil {
		sreq.Header = http.Header{}
	}
	for k, v := range t.Header {
		sreq.Header[k] = v
	}
	sreq.Proto, sreq.ProtoMajor, sreq.ProtoMinor = "HTTP/1.1", 1, 1

	pr, pw := io.Pipe()
	w := &writer{header: http.Header{}, body: pw, headed: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// A RoundTripper closes the request's body, as the server does
		// once its handler returned.
		defer func() { _ = sreq.Body.Close() }()
		defer func() {
			// A handler that panics would take the process down on this
			// goroutine, which net/http's recovery does not cover: the
			// client gets the error instead.
			if v := recover(); v != nil {
				w.fail(fmt.Errorf("inproc: the handler panicked: %v", v))
				return
			}
			w.finish()
		}()
		t.Handler.ServeHTTP(w, sreq)
	}()

	// A handler blocked writing to a client that stopped reading must
	// return when the request ends, as it would on a closed connection.
	unwatch := context.AfterFunc(ctx, func() { _ = pr.CloseWithError(ctx.Err()) })
	stop := func() {
		unwatch()
		cancel()
		_ = pr.CloseWithError(ErrAbandoned)
		<-done
	}
	select {
	case <-w.headed:
	case <-ctx.Done():
		stop()
		return nil, fmt.Errorf("inproc: %s %s: %w", req.Method, req.URL.Path, ctx.Err())
	}
	if w.err != nil {
		stop()
		return nil, fmt.Errorf("inproc: %s %s: %w", req.Method, req.URL.Path, w.err)
	}
	resp := &http.Response{
		Status:        strconv.Itoa(w.status) + " " + http.StatusText(w.status),
		StatusCode:    w.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        w.sent,
		ContentLength: -1,
		Request:       req,
		Body:          &body{pr: pr, stop: sync.OnceFunc(stop)},
	}
	if n, err := strconv.ParseInt(w.sent.Get("Content-Length"), 10, 64); err == nil {
		resp.ContentLength = n
	}
	return resp, nil
}

// isolated is the context of the request the handler serves: the
// client's deadline and cancellation, none of its values. A request from
// the network carries none, and a client called from inside a handler of
// the same router would otherwise hand that handler's values (a router's
// routing state above all) to the request it serves.
type isolated struct{ context.Context }

func (isolated) Value(any) any { return nil }

// body is a response body that stops the handler when closed.
type body struct {
	pr   *io.PipeReader
	stop func()
}

func (b *body) Read(p []byte) (int, error) { return b.pr.Read(p) }

func (b *body) Close() error {
	b.stop()
	return nil
}

// writer is the handler's ResponseWriter. Its head is published once, on
// the first WriteHeader, Write or Flush (or when the handler returns),
// through headed; the body goes into the pipe.
type writer struct {
	header http.Header
	body   *io.PipeWriter

	once   sync.Once
	headed chan struct{}
	// Set before headed is closed, read after.
	status int
	sent   http.Header
	err    error
}

func (w *writer) Header() http.Header { return w.header }

func (w *writer) WriteHeader(status int) {
	if status >= 100 && status < 200 {
		// Interim answers (103 Early Hints) are not the response.
		return
	}
	w.publish(status, nil)
}

func (w *writer) publish(status int, err error) {
	w.once.Do(func() {
		w.status, w.sent, w.err = status, w.header.Clone(), err
		close(w.headed)
	})
}

func (w *writer) Write(p []byte) (int, error) {
	w.publish(http.StatusOK, nil)
	return w.body.Write(p)
}

// Flush publishes the head: the client may start reading a stream before
// its first byte. Each Write reaches the reader as it is made (a pipe has
// no buffer), so there is nothing else to flush.
func (w *writer) Flush() { w.publish(http.StatusOK, nil) }

// finish ends a handler that returned normally.
func (w *writer) finish() {
	w.publish(http.StatusOK, nil)
	_ = w.body.Close()
}

// fail ends a handler that panicked: before its head the round trip fails,
// after it the body ends with err.
func (w *writer) fail(err error) {
	w.publish(0, err)
	_ = w.body.CloseWithError(err)
}
