package vms

import (
	"context"
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
		{"launch without errno", &agentos.LaunchError{Command: "nope", Err: &agentos.RejectedError{Message: hostText}}, gateway.CodeUnavailable, `read file: the VM could not start "nope": the engine refused to start it without saying why (its sidecar may be busy or stalled); retry`},
		{"launch that failed without a refusal", &agentos.LaunchError{Command: "nope", Err: errors.New(hostText)}, gateway.CodeUnavailable, `read file: the VM could not start "nope": the engine did not start it; retry`},
		{"launch refused for a reason named", &agentos.LaunchError{Command: "python3 --help", Err: &agentos.RejectedError{Code: "invalid_state", Message: "unsupported python option: --help"}}, gateway.CodeInvalidArgument, `read file: the VM could not start "python3 --help": unsupported python option: --help`},
		{"launch refused with EACCES", &agentos.LaunchError{Command: "nope", Err: &agentos.RejectedError{Message: hostText, Errno: "EACCES"}}, gateway.CodeInvalidArgument, `read file: the VM could not start "nope": permission denied`},
		{"launch that timed out in the engine", &agentos.LaunchError{Command: "echo hi", Err: &agentos.RejectedError{Code: "execution_error", Message: "ERR_AGENTOS_BRIDGE_CALL_TIMEOUT: " + hostText, EngineCode: agentos.EngineBridgeCallTimeout}}, gateway.CodeUnavailable, "read file: the engine did not answer in time (its sidecar is busy or stalled); retry"},
		{"call that timed out in the engine", &agentos.RejectedError{Code: "execution_error", Message: hostText, EngineCode: agentos.EngineBridgeCallTimeout}, gateway.CodeUnavailable, "read file: the engine did not answer in time (its sidecar is busy or stalled); retry"},
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
	given := map[string]any{"acp": map[string]any{"maxTurnOutputBytes": 1.0}}
	for _, c := range []struct {
		name   string
		err    error
		limits map[string]any
		code   gateway.Code
		field  string
	}{
		{"named, the given one", &agentos.RejectedError{Op: "CreateVMRequest", Message: "limits.acp.maxCompletedMessageBytes (67108864) must be <= limits.acp.maxTurnOutputBytes (1); /tmp/x"}, given, gateway.CodeInvalidArgument, "limits.acp.maxTurnOutputBytes"},
		{"named in snake case", &agentos.RejectedError{Op: "CreateVMRequest", Message: "limits.acp.max_prompt_bytes must be greater than zero"}, given, gateway.CodeInvalidArgument, "limits.acp.maxPromptBytes"},
		{"too small to boot", &agentos.RejectedError{Op: "CreateVMRequest", Message: "build root filesystem: bundled base filesystem contains 15647 bytes, exceeding limit 1"}, given, gateway.CodeInvalidArgument, "limits"},
		{"without limits", &agentos.RejectedError{Op: "CreateVMRequest", Message: "limits.acp.max_prompt_bytes must be greater than zero"}, nil, gateway.CodeInternal, ""},
		{"another request", &agentos.RejectedError{Op: "ConfigureVMRequest", Message: "mount failed"}, given, gateway.CodeInternal, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := createError(fmt.Errorf("agentos: create vm: %w", c.err), c.limits)
			var ge *gateway.Error
			if !errors.As(err, &ge) || ge.Code != c.code || (c.field != "" && ge.Details["field"] != c.field) {
				t.Fatalf("createError = %v (%v), want %s on %q", err, ge.Details, c.code, c.field)
			}
			if strings.Contains(ge.Message, "/tmp") || strings.Contains(ge.Message, "_bytes") || strings.Contains(ge.Message, "bundled") {
				t.Errorf("message %q shows the engine's words", ge.Message)
			}
		})
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

// A launch the engine refused without a reason never started, and is tried
// once more; every other failure is the caller's at once. The errors are
// built by hand: the engine refuses so only while it stalls.
func TestLaunchingRetriesARefusalWithoutAReason(t *testing.T) {
	refused := &agentos.LaunchError{Command: "echo hi", Err: &agentos.RejectedError{Code: "execution_error", Message: "refused"}}
	enoent := &agentos.LaunchError{Command: "nope", Err: &agentos.RejectedError{Errno: "ENOENT"}}
	timedOut := &agentos.LaunchError{Command: "echo hi", Err: &agentos.RejectedError{EngineCode: agentos.EngineBridgeCallTimeout}}
	unanswered := &agentos.LaunchError{Command: "echo hi", Err: errors.New("no answer")}
	badOption := &agentos.LaunchError{Command: "python3 -X dev", Err: &agentos.RejectedError{Code: "invalid_state", Message: "unsupported python option: -X"}}
	for _, c := range []struct {
		name    string
		results []error // what each try returns, in order
		tries   int
		want    error
	}{
		{"starts", []error{nil}, 1, nil},
		{"refused, then starts", []error{refused, nil}, 2, nil},
		{"refused twice", []error{refused, refused, nil}, launchAttempts, refused},
		{"command not found", []error{enoent, nil}, 1, enoent},
		{"refused for a reason named", []error{badOption, nil}, 1, badOption},
		{"timed out in the engine: it may have started", []error{timedOut, nil}, 1, timedOut},
		{"never answered: it may have started", []error{unanswered, nil}, 1, unanswered},
	} {
		t.Run(c.name, func(t *testing.T) {
			tries := 0
			err := launching(t.Context(), func() error {
				tries++
				return c.results[tries-1]
			})
			if tries != c.tries || err != c.want {
				t.Fatalf("%d tries, %v; want %d, %v", tries, err, c.tries, c.want)
			}
		})
	}
	t.Run("a cancelled request is not tried again", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		tries := 0
		err := launching(ctx, func() error { tries++; cancel(); return refused })
		if tries != 1 || err != refused {
			t.Fatalf("%d tries, %v", tries, err)
		}
	})
}
