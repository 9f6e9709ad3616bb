package main

import (
	"errors"
	"net"
	"net/url"
	"strings"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// usageError is a command line the command cannot run: a missing
// argument, a malformed flag value. It exits with 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg + " (see --help)" }

// describe turns err into the one sentence printed on stderr: the three
// failures a user meets first (a refused key, an unknown resource, an
// unreachable gateway) in words that say what to do, anything else as the
// command's context followed by the gateway's own detail.
func describe(err error, gatewayURL string) string {
	if ce, ok := errors.AsType[*client.Error](err); ok {
		// The commands wrap errors as "what: %w", so what precedes the
		// client's own text is the command's context.
		context := strings.TrimSuffix(err.Error(), ce.Error())
		detail := ce.Detail
		if detail == "" {
			detail = ce.Title
		}
		switch ce.Code {
		case client.CodeUnauthenticated:
			return "the gateway at " + gatewayURL + " refused the API key (set --key or AGENTOS_API_KEY, or run agentos login)"
		case client.CodePermissionDenied:
			return context + "permission denied: " + detail
		case client.CodeNotFound:
			return context + detail
		}
		return context + detail + " (" + string(ce.Code) + ")"
	}
	if isUnreachable(err) {
		return "cannot reach the gateway at " + gatewayURL + ": " + netReason(err)
	}
	return err.Error()
}

// isUnreachable reports whether err is a failure to connect, rather than
// an answer of the gateway.
func isUnreachable(err error) bool {
	if _, ok := errors.AsType[*net.OpError](err); ok {
		return true
	}
	if _, ok := errors.AsType[*net.DNSError](err); ok {
		return true
	}
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return ue.Timeout()
	}
	return false
}

// netReason is the heart of a connection failure, such as "connection
// refused" or "no such host", without the addresses around it.
func netReason(err error) string {
	if de, ok := errors.AsType[*net.DNSError](err); ok {
		return "cannot resolve " + de.Name + ": " + de.Err
	}
	if oe, ok := errors.AsType[*net.OpError](err); ok && oe.Err != nil {
		msg := oe.Err.Error()
		// A syscall error reads "connect: connection refused".
		if _, after, ok := strings.Cut(msg, ": "); ok {
			return after
		}
		return msg
	}
	if ue, ok := errors.AsType[*url.Error](err); ok && ue.Timeout() {
		return "the connection timed out"
	}
	return err.Error()
}
