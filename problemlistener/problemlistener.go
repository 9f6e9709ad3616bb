// Package problemlistener makes the few answers net/http writes by itself,
// before any handler runs, problem+json documents like every other error of
// the gateway. It does so on the wire, in a net.Listener, because net/http
// offers no hook for them: a client that parses the gateway's errors then
// never meets text/plain.
package problemlistener

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"syscall"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
)

// Wrap wraps a listener so that the few answers net/http writes by itself,
// before any handler runs (431 for oversized headers, 400 for a request
// without Host or with a NUL in a header, 501 for an unknown transfer
// coding), are problem+json documents like every other error of the
// gateway instead of text/plain.
//
// net/http writes each of those answers to the connection in one write, as
// a status line followed by exactly plainErrorHeaders and a text body, and
// then closes the connection; no response of a handler has that shape (they
// all carry a Date header). Only writes of that exact shape are rewritten.
func Wrap(ln net.Listener) net.Listener { return problemListener{ln} }

type problemListener struct{ net.Listener }

func (l problemListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &problemConn{Conn: c}, nil
}

// plainErrorHeaders are the headers net/http's own error answers carry.
const plainErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// codeOfStatus names the gateway's code for the statuses net/http answers
// by itself.
var codeOfStatus = map[int]gateway.Code{
	http.StatusBadRequest:                  gateway.CodeInvalidArgument,
	http.StatusRequestHeaderFieldsTooLarge: gateway.CodeHeadersTooLarge,
	http.StatusNotImplemented:              gateway.CodeNotImplemented,
}

// plainErrorDetail explains the answers that come without a reason.
var plainErrorDetail = map[int]string{
	http.StatusBadRequest:                  "the request could not be read: its request line or headers are malformed",
	http.StatusRequestHeaderFieldsTooLarge: "the request headers are larger than the gateway accepts",
	http.StatusNotImplemented:              "the request uses a transfer coding the gateway does not know",
}

// problemConn is a connection whose plain-text error answers from net/http
// are rewritten.
type problemConn struct{ net.Conn }

// CloseWrite keeps the half-close net/http uses after a 431.
func (c *problemConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// SyscallConn exposes the socket, for the event streams' hang-up watch.
func (c *problemConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return sc.SyscallConn()
}

func (c *problemConn) Write(b []byte) (int, error) {
	if doc, ok := rewritePlainError(b); ok {
		if _, err := c.Conn.Write(doc); err != nil {
			return 0, err
		}
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// rewritePlainError turns one of net/http's plain-text error answers into a
// problem+json answer with the same status, and reports false for anything
// else.
func rewritePlainError(b []byte) ([]byte, bool) {
	const proto = "HTTP/1.1 "
	if !bytes.HasPrefix(b, []byte(proto)) || len(b) < len(proto)+3 {
		return nil, false
	}
	head, body, ok := bytes.Cut(b, []byte(plainErrorHeaders))
	if !ok || bytes.IndexByte(head, '\n') >= 0 {
		return nil, false
	}
	status, err := strconv.Atoi(string(head[len(proto) : len(proto)+3]))
	if err != nil {
		return nil, false
	}
	code, ok := codeOfStatus[status]
	if !ok {
		return nil, false
	}
	// The body repeats the status line, sometimes with a reason after a
	// colon ("400 Bad Request: missing required Host header").
	detail := plainErrorDetail[status]
	if _, reason, ok := bytes.Cut(body, []byte(": ")); ok {
		detail = "the request could not be read: " + string(reason)
	}
	doc, _ := json.Marshal(api.Problem{
		Type: api.ProblemType + string(code), Title: http.StatusText(status), Status: status, Detail: detail, Code: code,
	})
	var out bytes.Buffer
	out.WriteString(proto + strconv.Itoa(status) + " " + http.StatusText(status) + "\r\n")
	out.WriteString("Content-Type: application/problem+json\r\nCache-Control: no-store\r\nConnection: close\r\n")
	out.WriteString("Content-Length: " + strconv.Itoa(len(doc)+1) + "\r\n\r\n")
	out.Write(doc)
	out.WriteByte('\n')
	return out.Bytes(), true
}
