package vms

import (
	"context"
	"errors"
	"strings"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/agentos"
)

// EngineError turns an error of the agentos client into the gateway's error
// type, so the HTTP layer maps one type to statuses in one place.
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
		return gateway.Wrap(gateway.CodeInvalidArgument, err, "%s: %s", what, stripPrefix(err))
	case errors.Is(err, agentos.ErrTimeout):
		return gateway.Wrap(gateway.CodeDeadlineExceeded, err, "%s: deadline exceeded; the process was killed", what)
	case errors.Is(err, agentos.ErrTerminationFailed):
		return gateway.Wrap(gateway.CodeInternal, err, "%s: termination_failed: the process did not confirm its exit after SIGKILL", what).WithDetail("reason", "termination_failed")
	case errors.As(err, &exited), errors.Is(err, agentos.ErrClosed):
		return gateway.Wrap(gateway.CodeUnavailable, err, "%s: the sidecar hosting this VM is gone", what)
	case errors.Is(err, agentos.ErrVMDisposed):
		return gateway.Wrap(gateway.CodeConflict, err, "%s: the VM was disposed", what).WithDetail("state", gateway.VMDisposed)
	case agentos.IsLaunchConflict(err):
		return gateway.Wrap(gateway.CodeUnavailable, err, "%s: the VM stayed busy starting other processes; retry", what)
	case errors.As(err, &launch):
		return gateway.Wrap(gateway.CodeInvalidArgument, err, "%s: the sidecar refused to launch %q: %s", what, launch.Command, rejectionMessage(launch.Err))
	case errors.Is(err, agentos.ErrOutputOverflow):
		return gateway.Wrap(gateway.CodeResourceExhausted, err, "%s: output buffer overflow", what)
	case errors.As(err, &acp):
		return gateway.Wrap(gateway.CodeConflict, err, "%s: %s: %s", what, acp.Code, acp.Message).WithDetail("agentCode", acp.Code)
	case errors.As(err, &rej):
		return gateway.Wrap(errnoCode(rej.Errno), err, "%s: %s", what, rej.Message).WithDetail("errno", rej.Errno)
	case errors.Is(err, agentos.ErrNotFound):
		return gateway.Wrap(gateway.CodeNotFound, err, "%s: not found", what)
	case errors.Is(err, context.DeadlineExceeded):
		return gateway.Wrap(gateway.CodeDeadlineExceeded, err, "%s: deadline exceeded", what)
	case errors.Is(err, context.Canceled):
		return gateway.Wrap(gateway.CodeUnavailable, err, "%s: cancelled", what)
	}
	return gateway.Wrap(gateway.CodeInternal, err, "%s failed", what)
}

// createError maps a failed VM creation. The sidecar rejects a VM
// configuration it cannot parse (the limits are the one part the gateway
// hands over unchecked) with a code that says nothing of whose fault it is;
// it is the caller's, not an internal error.
func createError(err error) error {
	var rej *agentos.RejectedError
	if errors.As(err, &rej) && strings.HasPrefix(rej.Message, "invalid create VM config") {
		return gateway.Wrap(gateway.CodeInvalidArgument, err, "create vm: %s", rej.Message).WithDetail("field", "limits")
	}
	return EngineError(err, "create vm")
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

func rejectionMessage(err error) string {
	var rej *agentos.RejectedError
	if errors.As(err, &rej) {
		return rej.Message
	}
	return err.Error()
}

func stripPrefix(err error) string {
	msg := err.Error()
	const p = "agentos: "
	for len(msg) > len(p) && msg[:len(p)] == p {
		msg = msg[len(p):]
	}
	return msg
}
