package agentos

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

// Sentinel errors callers branch on with errors.Is.
var (
	// ErrClosed reports a call on a sidecar that was shut down on purpose.
	ErrClosed = errors.New("agentos: sidecar closed")
	// ErrSidecarSilent is the cause recorded when the silence watchdog fires.
	ErrSidecarSilent = errors.New("agentos: sidecar sent nothing within the silence timeout")
	// ErrVMDisposed reports a call on a VM that was disposed.
	ErrVMDisposed = errors.New("agentos: vm disposed")
	// ErrTimeout reports that a process ran past its deadline and was killed;
	// it is returned only once the sidecar confirmed the exit.
	ErrTimeout = errors.New("agentos: process deadline exceeded")
	// ErrTerminationFailed reports that a process past its deadline could not
	// be confirmed dead within the kill grace period.
	ErrTerminationFailed = errors.New("agentos: termination_failed: process did not confirm exit after SIGKILL")
	// ErrOutputOverflow reports that a consumer fell behind and a bounded
	// output buffer overflowed; output after that point was discarded.
	ErrOutputOverflow = errors.New("agentos: output buffer overflow")
	// ErrProtocol reports a frame that violates the protocol.
	ErrProtocol = errors.New("agentos: protocol violation")
	// ErrNotFound reports an unknown process, shell or session id.
	ErrNotFound = errors.New("agentos: not found")
	// ErrInvalidArgument reports a call the client refuses before it reaches
	// the sidecar, for example a path that is not absolute.
	ErrInvalidArgument = errors.New("agentos: invalid argument")
)

// SidecarExitedError is returned by every call in flight on (or made after the
// death of) a sidecar that exited without being asked to. It carries what is
// needed to diagnose the crash.
type SidecarExitedError struct {
	Pid int
	// ExitCode is the exit status, or -1 when the process was killed by a signal.
	ExitCode int
	// Signal names the signal that killed the process, if any.
	Signal string
	// Cause is what the client saw first: a lane EOF, a decode error, the
	// silence watchdog, or the process exit itself.
	Cause error
	// StderrTail is the end of the sidecar's log output.
	StderrTail string
}

func (e *SidecarExitedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "agentos: sidecar (pid %d) exited", e.Pid)
	if e.Signal != "" {
		fmt.Fprintf(&b, " by signal %s", e.Signal)
	} else {
		fmt.Fprintf(&b, " with status %d", e.ExitCode)
	}
	if e.Cause != nil {
		fmt.Fprintf(&b, ": %v", e.Cause)
	}
	if t := strings.TrimSpace(e.StderrTail); t != "" {
		if i := strings.LastIndexByte(t, '\n'); i >= 0 && len(t)-i < 400 {
			// Keep the message one readable line: the last log line is
			// usually the reason; the whole tail stays in the field.
			t = t[i+1:]
		}
		fmt.Fprintf(&b, " (last stderr: %s)", truncateString(t, 400))
	}
	return b.String()
}

func (e *SidecarExitedError) Unwrap() error { return e.Cause }

// RejectedError is the sidecar's RejectedResponse to a request.
type RejectedError struct {
	Op      string // the request that was rejected, e.g. "GuestFilesystemCallRequest"
	Code    string // e.g. "kernel_error", "execution_error"
	Message string
	Errno   string // e.g. "ENOENT" when the sidecar named it, or parsed from Message
	// EngineCode is the condition the engine named in Message, if any.
	EngineCode EngineCode
	Response   protocol.RejectedResponse
}

// EngineCode is a condition the engine names only in the text of a
// rejection: 0.2.21 has no structured code for these. Reading them out of
// the message happens in engineCodeOf, once, and nowhere else.
type EngineCode string

// The engine conditions the client acts on.
const (
	// EngineExecutionConflict: a launch met another launch of the VM.
	EngineExecutionConflict EngineCode = "ERR_AGENTOS_VM_EXECUTION_CONFLICT"
	// EngineTeardownDeadline: a VM's disposal outran the engine's deadline.
	EngineTeardownDeadline EngineCode = "ERR_AGENTOS_VM_TEARDOWN_DEADLINE"
	// EngineBridgeCallTimeout: a call between the engine's host and a
	// guest runtime got no answer within the engine's 30 s, measured when a
	// sidecar stalls (an idle shell's stdin wait, see the README): the call
	// may or may not have taken effect, and the request was not at fault.
	EngineBridgeCallTimeout EngineCode = "ERR_AGENTOS_BRIDGE_CALL_TIMEOUT"
	// EngineCommandNotFound: the program of a launch is not in the guest's
	// PATH ("command not found on native sidecar path: foo").
	EngineCommandNotFound EngineCode = "command_not_found"
)

// engineCodeRE finds the engine's ERR_AGENTOS_* codes in a message.
var engineCodeRE = regexp.MustCompile(`\bERR_AGENTOS_[A-Z0-9_]+\b`)

// engineCodeOf reads the condition a rejection's message names.
func engineCodeOf(message string) EngineCode {
	if strings.HasPrefix(message, "command not found") {
		return EngineCommandNotFound
	}
	return EngineCode(engineCodeRE.FindString(message))
}

// HasEngineCode reports whether err is a rejection in which the engine named
// the condition code.
func HasEngineCode(err error, code EngineCode) bool {
	var rej *RejectedError
	return errors.As(err, &rej) && rej.EngineCode == code
}

// commandFaults are the beginnings of the engine's refusals of a launch
// that blame the command line itself (measured on 0.2.21, where they come
// with the code invalid_state and no errno, like the refusals that follow a
// stall of the engine's, so the wording is all that tells them apart).
var commandFaults = []string{
	"unsupported python option: ",
	"argument expected for the ",
}

// CommandFault returns the reason the engine gave for refusing a launch
// when the reason is the command line's fault, in the engine's words
// ("unsupported python option: --help"), and "" otherwise.
func (e *RejectedError) CommandFault() string {
	for _, p := range commandFaults {
		if strings.HasPrefix(e.Message, p) {
			return truncateString(e.Message, 200)
		}
	}
	return ""
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("agentos: sidecar rejected %s: %s: %s", e.Op, e.Code, e.Message)
}

// Is lets errors.Is(err, ErrNotFound) match a rejection for a missing file or
// process.
func (e *RejectedError) Is(target error) bool {
	return target == ErrNotFound && (e.Errno == "ENOENT" || e.Errno == "ESRCH")
}

func newRejectedError(op string, r protocol.RejectedResponse) *RejectedError {
	e := &RejectedError{Op: op, Code: r.Code, Message: r.Message, EngineCode: engineCodeOf(r.Message), Response: r}
	if r.Errno != nil {
		e.Errno = *r.Errno
	} else if i := strings.IndexByte(r.Message, ':'); i > 1 && isErrnoName(r.Message[:i]) {
		e.Errno = r.Message[:i]
	} else if e.EngineCode == EngineCommandNotFound {
		// The engine says so of a program missing from the guest's PATH,
		// without an errno: it is the ENOENT of execve.
		e.Errno = "ENOENT"
	}
	return e
}

func isErrnoName(s string) bool {
	if len(s) < 3 || s[0] != 'E' {
		return false
	}
	for _, c := range s {
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}

// ACPError is an AcpErrorResponse: the agent layer refused or failed a call.
type ACPError struct {
	Code    string // e.g. "invalid_state", "session_storage_unavailable"
	Message string
}

func (e *ACPError) Error() string { return fmt.Sprintf("agentos: acp %s: %s", e.Code, e.Message) }

// LaunchError reports that the sidecar refused to launch a process: the
// process never ran, which is different from a process that exited non-zero.
type LaunchError struct {
	Command string
	Err     error
}

func (e *LaunchError) Error() string {
	return fmt.Sprintf("agentos: launch of %q rejected: %v", e.Command, e.Err)
}
func (e *LaunchError) Unwrap() error { return e.Err }

func truncateString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
