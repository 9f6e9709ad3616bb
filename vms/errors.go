package vms

import (
	"context"
	"errors"
	"strings"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/agentos"
	"github.com/agentos-gateway/agentos-gateway/vmspec"
)

// ErrVMEnded is the cause of the conflict a VM that ended (disposed or lost)
// answers every call with: errors.Is(err, ErrVMEnded) tells it from other
// conflicts.
var ErrVMEnded = errors.New("vms: the VM has ended")

// EngineError turns an error of the agentos client into the gateway's error
// type, so the HTTP layer maps one type to statuses in one place. Messages
// are the gateway's own: the engine's text (which may hold host paths and
// its internal names) stays in the cause, for the logs.
func EngineError(err error, what string) error {
	if err == nil {
		return nil
	}
	var ge *gateway.Error
	if errors.As(err, &ge) {
		return err
	}
	var (
		exited *agentos.SidecarExitedError
		launch *agentos.LaunchError
		rej    *agentos.RejectedError
		acp    *agentos.ACPError
	)
	switch {
	case errors.Is(err, agentos.ErrInvalidArgument):
		// The client's own refusals, worded by this code base.
		return gateway.Wrap(gateway.CodeInvalidArgument, err, "%s: %s", what, stripPrefix(err))
	case errors.Is(err, agentos.ErrTimeout):
		return gateway.Wrap(gateway.CodeDeadlineExceeded, err, "%s: deadline exceeded; the process was killed", what)
	case errors.Is(err, agentos.ErrTerminationFailed):
		return gateway.Wrap(gateway.CodeInternal, err, "%s: termination_failed: the process did not confirm its exit after SIGKILL", what).WithDetail("reason", "termination_failed")
	case errors.As(err, &exited), errors.Is(err, agentos.ErrClosed):
		return gateway.Wrap(gateway.CodeUnavailable, err, "%s: the sidecar hosting this VM is gone", what)
	case errors.Is(err, agentos.ErrVMDisposed):
		return gateway.Wrap(gateway.CodeConflict, err, "%s: the VM was disposed", what).WithDetail("state", gateway.VMDisposed)
	case agentos.HasEngineCode(err, agentos.EngineBridgeCallTimeout):
		// Checked before a launch's refusal: a launch that timed out inside
		// the engine is a stall, not a bad command.
		return gateway.Wrap(gateway.CodeUnavailable, err, "%s: the engine did not answer in time (its sidecar is busy or stalled); retry", what).WithDetail("reason", "engine_timeout")
	case agentos.IsLaunchConflict(err):
		return gateway.Wrap(gateway.CodeUnavailable, err, "%s: the VM stayed busy starting other processes; retry", what)
	case errors.As(err, &launch) && !errors.As(launch.Err, &rej):
		// A launch the engine failed without refusing it (its answer never
		// came, or was not a refusal) says nothing against the command.
		return gateway.Wrap(gateway.CodeUnavailable, err, "%s: the VM could not start %q: the engine did not start it; retry", what, launch.Command)
	// Past the case above, a launch's error holds the engine's refusal,
	// and rej is it.
	case errors.As(err, &launch) && rej.CommandFault() != "":
		// A refusal that names what is wrong with the command line: the
		// caller must change it, and retrying would not help.
		return gateway.Wrap(gateway.CodeInvalidArgument, err, "%s: the VM could not start %q: %s", what, launch.Command, rej.CommandFault()).
			WithDetail("reason", "command_refused")
	case errors.As(err, &launch) && rej.Errno == "":
		// Measured on 0.2.21: a launch refused with no errno comes after
		// the engine stalled for its 30 s bridge timeout, not from a bad
		// command (those carry ENOENT or EACCES): the caller should retry,
		// not fix the request. The exec and spawn paths tried it twice
		// already (launching).
		return gateway.Wrap(gateway.CodeUnavailable, err, "%s: the VM could not start %q: the engine refused to start it without saying why (its sidecar may be busy or stalled); retry", what, launch.Command).
			WithDetail("reason", "engine_refused")
	case errors.As(err, &launch):
		return gateway.Wrap(gateway.CodeInvalidArgument, err, "%s: the VM could not start %q: %s", what, launch.Command, launchReason(rej.Errno))
	case errors.Is(err, agentos.ErrOutputOverflow):
		return gateway.Wrap(gateway.CodeResourceExhausted, err, "%s: output buffer overflow", what)
	case errors.As(err, &acp):
		return gateway.Wrap(gateway.CodeConflict, err, "%s: the agent refused the request (%s)", what, acp.Code).WithDetail("agentCode", acp.Code)
	case errors.As(err, &rej):
		e := gateway.Wrap(errnoCode(rej.Errno), err, "%s: %s", what, errnoWords(rej.Errno))
		if rej.Errno != "" {
			e = e.WithDetail("errno", rej.Errno)
		}
		return e
	case errors.Is(err, agentos.ErrNotFound):
		return gateway.Wrap(gateway.CodeNotFound, err, "%s: not found", what)
	case errors.Is(err, context.DeadlineExceeded):
		return gateway.Wrap(gateway.CodeDeadlineExceeded, err, "%s: deadline exceeded", what)
	case errors.Is(err, context.Canceled):
		return gateway.Wrap(gateway.CodeUnavailable, err, "%s: cancelled", what)
	}
	return gateway.Wrap(gateway.CodeInternal, err, "%s failed", what)
}

// createError maps a failed VM creation. With limits given, the engine's
// refusal of the create request is theirs: the gateway checks their shape,
// but some limits must not exceed others, and some small values leave the VM
// no room to boot, which only the engine knows. That is the caller's fault,
// not an internal error; the limits the engine named are listed in the
// documented spelling, and details.field names one the caller gave.
func createError(err error, limits map[string]any) error {
	var rej *agentos.RejectedError
	if len(limits) == 0 || !errors.As(err, &rej) || rej.Op != "CreateVMRequest" {
		return EngineError(err, "create vm")
	}
	e := gateway.Wrap(gateway.CodeInvalidArgument, err, "create vm: the engine refused the limits given")
	names := vmspec.RefusedLimits(rej.Message)
	if len(names) == 0 {
		e.Message += ": values this small leave the VM no room to start"
		return e.WithDetail("field", "limits")
	}
	e.Message += " (" + strings.Join(names, ", ") + "): some limits must not exceed others, see the documentation of limits"
	field := names[0]
	for _, n := range names {
		parts := strings.SplitN(n, ".", 3)
		if section, ok := limits[parts[1]].(map[string]any); ok {
			if _, given := section[parts[2]]; given {
				field = n
				break
			}
		}
	}
	return e.WithDetail("field", field)
}

func errnoCode(errno string) gateway.Code {
	switch errno {
	case "ENOENT", "ESRCH":
		return gateway.CodeNotFound
	case "EEXIST", "ENOTEMPTY", "EBUSY":
		return gateway.CodeConflict
	case "ENOTDIR", "EISDIR", "EINVAL", "ENAMETOOLONG", "ELOOP":
		return gateway.CodeInvalidArgument
	case "EACCES", "EPERM", "EROFS":
		return gateway.CodePermissionDenied
	case "ENOSPC", "EFBIG", "EMFILE", "ENFILE":
		return gateway.CodeResourceExhausted
	}
	return gateway.CodeInternal
}

// errnoWords says what an errno the engine reported means, in the
// gateway's words.
func errnoWords(errno string) string {
	switch errno {
	case "ENOENT":
		return "no such file or directory"
	case "ESRCH":
		return "no such process"
	case "EEXIST":
		return "it already exists"
	case "ENOTEMPTY":
		return "the directory is not empty"
	case "EBUSY":
		return "it is busy"
	case "ENOTDIR":
		return "a part of the path is not a directory"
	case "EISDIR":
		return "it is a directory"
	case "EINVAL":
		return "the engine refused the arguments"
	case "ENAMETOOLONG":
		return "the name is too long"
	case "ELOOP":
		return "too many levels of symbolic links"
	case "EACCES", "EPERM":
		return "permission denied"
	case "EROFS":
		return "the file system is read-only"
	case "ENOSPC":
		return "no space left in the VM"
	case "EFBIG":
		return "the file is too large"
	case "EMFILE", "ENFILE":
		return "too many open files"
	case "":
		return "the engine refused the request"
	}
	return "the engine refused the request (" + errno + ")"
}

// launchReason says why a process could not start, from the errno of the
// engine's refusal.
func launchReason(errno string) string {
	if errno == "ENOENT" {
		return "command not found"
	}
	return errnoWords(errno)
}

func stripPrefix(err error) string {
	msg := err.Error()
	const p = "agentos: "
	for len(msg) > len(p) && msg[:len(p)] == p {
		msg = msg[len(p):]
	}
	return msg
}

// refusedWithoutReason reports whether err is a launch the engine refused
// with no errno and not for its own bridge timeout: on 0.2.21 such a
// refusal follows a stall of the engine's, and the process never started.
func refusedWithoutReason(err error) bool {
	var (
		launch *agentos.LaunchError
		rej    *agentos.RejectedError
	)
	return errors.As(err, &launch) && errors.As(launch.Err, &rej) && rej.Errno == "" && rej.CommandFault() == "" &&
		!agentos.HasEngineCode(err, agentos.EngineBridgeCallTimeout)
}

// launchAttempts is how many times a launch is tried while the engine
// refuses it without a reason. The process never started, so trying again
// is safe, and the try after a stall usually starts it: the gateway does
// what it would otherwise tell the caller to do.
const launchAttempts = 2

// launching runs launch until it succeeds, fails otherwise than by a
// refusal without a reason, or has been tried launchAttempts times, and
// returns its last error.
func launching(ctx context.Context, launch func() error) error {
	err := launch()
	for try := 1; try < launchAttempts && refusedWithoutReason(err) && ctx.Err() == nil; try++ {
		err = launch()
	}
	return err
}
