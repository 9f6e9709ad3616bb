package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
)

// Code is one of the gateway's stable error codes. Branch on it, never on
// an error's text.
type Code = gateway.Code

// The gateway's error codes.
const (
	CodeInvalidArgument   = gateway.CodeInvalidArgument
	CodeUnauthenticated   = gateway.CodeUnauthenticated
	CodePermissionDenied  = gateway.CodePermissionDenied
	CodeNotFound          = gateway.CodeNotFound
	CodeConflict          = gateway.CodeConflict
	CodePayloadTooLarge   = gateway.CodePayloadTooLarge
	CodeUnprocessable     = gateway.CodeUnprocessable
	CodeResourceExhausted = gateway.CodeResourceExhausted
	CodeInternal          = gateway.CodeInternal
	CodeUnavailable       = gateway.CodeUnavailable
	CodeDeadlineExceeded  = gateway.CodeDeadlineExceeded
	CodeMethodNotAllowed  = gateway.CodeMethodNotAllowed
	CodeRequestTimeout    = gateway.CodeRequestTimeout
	CodeHeadersTooLarge   = gateway.CodeHeadersTooLarge
	CodeNotImplemented    = gateway.CodeNotImplemented

	// Conditional and range requests of file downloads.
	CodePreconditionFailed  = gateway.CodePreconditionFailed
	CodeRangeNotSatisfiable = gateway.CodeRangeNotSatisfiable
)

// Error is an answer of the gateway outside 2xx (an RFC 9457 problem), or the
// final "error" event of a stream (then Status is 0).
type Error struct {
	// Status is the HTTP status (0 for a stream's error event).
	Status int
	// Code is the gateway's stable code, such as CodeNotFound. When the
	// body was not a problem, it is derived from the status.
	Code   Code
	Title  string
	Detail string
	// Details holds extra facts, for example a VM's "state" on conflict or
	// the "field" an invalid_argument is about.
	Details map[string]any
	// Type and Instance are the problem's URIs.
	Type     string
	Instance string
	// RequestID is the gateway's id of the request (problem or X-Request-ID).
	RequestID string
	// RetryAfter is the Retry-After header, when the gateway sent one.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	msg := e.Detail
	if msg == "" {
		msg = e.Title
	}
	var b strings.Builder
	b.WriteString("agentos-gateway: ")
	if e.Status != 0 {
		b.WriteString(strconv.Itoa(e.Status))
		b.WriteByte(' ')
	}
	b.WriteString(string(e.Code))
	if msg != "" {
		b.WriteString(": ")
		b.WriteString(msg)
	}
	if e.RequestID != "" {
		b.WriteString(" (request ")
		b.WriteString(e.RequestID)
		b.WriteByte(')')
	}
	return b.String()
}

// IsCode reports whether err is, or wraps, an *Error with the given code.
func IsCode(err error, code Code) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// CodeOf returns the code of err's *Error, or "" when it has none.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// codeForStatus is the gateway's code for a status, for answers that carry
// no problem (HEAD, proxies, a server that is not the gateway).
func codeForStatus(status int) Code {
	switch status {
	case http.StatusBadRequest:
		return CodeInvalidArgument
	case http.StatusMethodNotAllowed:
		return CodeMethodNotAllowed
	case http.StatusRequestTimeout:
		return CodeRequestTimeout
	case http.StatusRequestHeaderFieldsTooLarge:
		return CodeHeadersTooLarge
	case http.StatusNotImplemented:
		return CodeNotImplemented
	case http.StatusUnauthorized:
		return CodeUnauthenticated
	case http.StatusForbidden:
		return CodePermissionDenied
	case http.StatusNotFound, http.StatusGone:
		return CodeNotFound
	case http.StatusConflict:
		return CodeConflict
	case http.StatusPreconditionFailed:
		return CodePreconditionFailed
	case http.StatusRequestedRangeNotSatisfiable:
		return CodeRangeNotSatisfiable
	case http.StatusRequestEntityTooLarge:
		return CodePayloadTooLarge
	case http.StatusUnprocessableEntity:
		return CodeUnprocessable
	case http.StatusTooManyRequests:
		return CodeResourceExhausted
	case http.StatusBadGateway, http.StatusServiceUnavailable:
		return CodeUnavailable
	case http.StatusGatewayTimeout:
		return CodeDeadlineExceeded
	}
	if status >= 500 {
		return CodeInternal
	}
	if status >= 400 {
		return CodeInvalidArgument
	}
	// A 1xx/3xx the HTTP client did not follow.
	return CodeInternal
}

// maxErrorBody bounds how much of an error body is read.
const maxErrorBody = 64 << 10

// parseError turns a non-2xx answer into an *Error. It never fails: a body
// that is not a problem falls back to the status (and a snippet of the body
// as the detail).
func parseError(resp *http.Response) *Error {
	e := &Error{
		Status:    resp.StatusCode,
		Title:     http.StatusText(resp.StatusCode),
		RequestID: resp.Header.Get("X-Request-ID"),
	}
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		if s, err := strconv.Atoi(strings.TrimSpace(ra)); err == nil && s >= 0 {
			e.RetryAfter = time.Duration(s) * time.Second
		} else if t, err := http.ParseTime(ra); err == nil {
			e.RetryAfter = max(0, time.Until(t))
		}
	}
	var body []byte
	if resp.Body != nil {
		body, _ = io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	var p api.Problem
	if (mt == "application/problem+json" || mt == "application/json" || strings.HasSuffix(mt, "+json")) &&
		json.Unmarshal(body, &p) == nil && (p.Code != "" || p.Title != "" || p.Detail != "") {
		e.Code, e.Detail, e.Details, e.Type, e.Instance = p.Code, p.Detail, p.Details, p.Type, p.Instance
		if p.Title != "" {
			e.Title = p.Title
		}
		if p.RequestID != "" {
			e.RequestID = p.RequestID
		}
	} else {
		e.Detail = snippet(body)
	}
	if e.Code == "" {
		e.Code = codeForStatus(resp.StatusCode)
	}
	return e
}

// snippet is a short, printable rendering of a foreign error body.
func snippet(b []byte) string {
	const n = 512
	s := strings.TrimSpace(string(b))
	if !utf8.ValidString(s) {
		return fmt.Sprintf("(%d bytes of binary body)", len(b))
	}
	if len(s) > n {
		cut := n
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}
