package vms

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/agentos"
)

// Engine errors reach clients in the gateway's words: the engine's text,
// with its host paths and internal names, stays in the cause. The errors are
// built by hand: the engine produces most of these only by failing.
func TestEngineErrorWording(t *testing.T) {
	const hostText = "ERR_AGENTOS_STORAGE: storage stat for /root/data/agentos-native-sidecar-shadow-1/x failed; native sidecar path /work/deps/node_modules"
	rejected := func(errno string) error {
		return fmt.Errorf("agentos: read file: %w", &agentos.RejectedError{Op: "GuestFilesystemCallRequest", Code: "kernel_error", Message: hostText, Errno: errno})
	}
	for _, c := range []struct {
		name string
		err  error
		code gateway.Code
		msg  string
	}{
		{"ENOENT", rejected("ENOENT"), gateway.CodeNotFound, "read file: no such file or directory"},
		{"EACCES", rejected("EACCES"), gateway.CodePermissionDenied, "read file: permission denied"},
		{"no errno", rejected(""), gateway.CodeInternal, "read file: the engine refused the request"},
		{"odd errno", rejected("EXDEV"), gateway.CodeInternal, "read file: the engine refused the request (EXDEV)"},
		{"launch", &agentos.LaunchError{Command: "nope", Err: &agentos.RejectedError{Message: hostText, Errno: "ENOENT"}}, gateway.CodeInvalidArgument, `read file: the VM could not start "nope": command not found`},
		{"launch without errno", &agentos.LaunchError{Command: "nope", Err: &agentos.RejectedError{Message: hostText}}, gateway.CodeInvalidArgument, `read file: the VM could not start "nope": the engine refused to start it`},
		{"acp", &agentos.ACPError{Code: "invalid_state", Message: hostText}, gateway.CodeConflict, "read file: the agent refused the request (invalid_state)"},
		{"sidecar exited", &agentos.SidecarExitedError{Pid: 1, StderrTail: hostText}, gateway.CodeUnavailable, "read file: the sidecar hosting this VM is gone"},
		{"unknown", errors.New(hostText), gateway.CodeInternal, "read file failed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := EngineError(c.err, "read file")
			var ge *gateway.Error
			if !errors.As(err, &ge) || ge.Code != c.code || ge.Message != c.msg {
				t.Fatalf("EngineError = %#v, want %s %q", err, c.code, c.msg)
			}
			if !errors.Is(err, c.err) {
				t.Errorf("the cause is lost: %v", err)
			}
		})
	}
}

// A refusal of a create with limits is the limits' fault, named in the
// documented spelling; without limits it stays the engine's.
func TestCreateErrorBlamesLimits(t *testing.T) {
	rej := &agentos.RejectedError{Op: "CreateVMRequest", Code: "invalid_state", Message: "limits.acp.max_prompt_bytes must be greater than zero; /tmp/x"}
	var ge *gateway.Error
	if err := createError(rej, true); !errors.As(err, &ge) || ge.Code != gateway.CodeInvalidArgument || ge.Details["field"] != "limits.acp.maxPromptBytes" || strings.Contains(ge.Message, "/tmp") || strings.Contains(ge.Message, "max_prompt") {
		t.Fatalf("with limits: %v", err)
	}
	boot := &agentos.RejectedError{Op: "CreateVMRequest", Message: "build root filesystem: bundled base filesystem contains 15647 bytes, exceeding limit 0"}
	if err := createError(boot, true); !errors.As(err, &ge) || ge.Code != gateway.CodeInvalidArgument || ge.Details["field"] != "limits" || strings.Contains(ge.Message, "bundled") {
		t.Fatalf("too small to boot: %v", err)
	}
	if err := createError(rej, false); gateway.ErrorCode(err) != gateway.CodeInternal {
		t.Fatalf("without limits: %v", err)
	}
}

// Software is refused by name before any sidecar is asked, against the
// real engine's install folder, and the message holds no host path.
func TestVMOptionsSoftware(t *testing.T) {
	eng, err := agentos.LocateEngine()
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Software: eng}
	for _, c := range []struct {
		software []string
		agents   []string
		field    string
	}{
		{[]string{"@agentos-software/pi"}, nil, ""},
		{nil, []string{"pi"}, ""},
		{[]string{"@agentos-software/does-not-exist"}, nil, "software[0]"},
		{[]string{"@agentos-software/pi", "/etc/passwd"}, nil, "software[1]"},
		{[]string{"@agentos-software/../../x"}, nil, "software[0]"},
		{[]string{"@Agentos-Software/Pi"}, nil, "software[0]"},
		{nil, []string{"nobody"}, "agents[0]"},
	} {
		_, err := vmOptions(gateway.VMSpec{Software: c.software, Agents: c.agents}, cfg)
		if c.field == "" {
			if err != nil {
				t.Errorf("%v %v: %v", c.software, c.agents, err)
			}
			continue
		}
		var ge *gateway.Error
		if !errors.As(err, &ge) || ge.Code != gateway.CodeInvalidArgument || ge.Details["field"] != c.field || strings.Contains(ge.Message, eng.PackagesDir) {
			t.Errorf("%v %v: %v, want invalid_argument on %s", c.software, c.agents, err, c.field)
		}
	}
}
