package gateway

import (
	"errors"
	"fmt"
)

// Code is a stable, machine-readable error code. Each maps to one HTTP status
// in the handlers package, and nowhere else.
type Code string

// Error codes.
const (
	CodeInvalidArgument   Code = "invalid_argument"
	CodeUnauthenticated   Code = "unauthenticated"
	CodePermissionDenied  Code = "permission_denied"
	CodeNotFound          Code = "not_found"
	CodeConflict          Code = "conflict"
	CodePayloadTooLarge   Code = "payload_too_large"
	CodeResourceExhausted Code = "resource_exhausted"
	CodeInternal          Code = "internal"
	CodeUnavailable       Code = "unavailable"
	CodeDeadlineExceeded  Code = "deadline_exceeded"
	CodeUnprocessable     Code = "unprocessable"
	CodeMethodNotAllowed  Code = "method_not_allowed"
	CodeRequestTimeout    Code = "request_timeout"
	CodeHeadersTooLarge   Code = "headers_too_large"
	CodeNotImplemented    Code = "not_implemented"

	// CodePreconditionFailed: a conditional request's If-Match or
	// If-Unmodified-Since does not hold.
	CodePreconditionFailed Code = "precondition_failed"
	// CodeRangeNotSatisfiable: a Range outside the file.
	CodeRangeNotSatisfiable Code = "range_not_satisfiable"
)

// ErrShuttingDown is why the gateway refuses, or ends, what it serves once it
// has begun to shut down: event streams, attached WebSockets, requests it
// proxies to other nodes. It is one value so that a cancellation cause can
// be recognised with errors.Is by whichever package set it.
var ErrShuttingDown = Errorf(CodeUnavailable, "the gateway is shutting down")

// Error is the one error type that crosses layers: a code, a message safe to
// show the caller, and optional details (for example a VM's state).
type Error struct {
	Code    Code
	Message string
	Details map[string]any
	Err     error // the cause, kept for logs; never shown to callers
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Wrap returns an *Error with a message and a cause.
func Wrap(code Code, err error, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Err: err}
}

// WithDetail adds a detail and returns e.
func (e *Error) WithDetail(key string, v any) *Error {
	if e.Details == nil {
		e.Details = map[string]any{}
	}
	e.Details[key] = v
	return e
}

// ErrorCode returns the code of err: its *Error's, CodeInternal for any
// other error, and "" for nil.
func ErrorCode(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// ErrorMessage returns the caller-safe message of err.
func ErrorMessage(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "internal error"
}
