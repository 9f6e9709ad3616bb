package api

import (
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// Invocation is what to run, in exec and spawn bodies: a command line
// (Command alone), a program and its arguments run without a shell (Command
// with Args), or an argv run without a shell (Argv alone).
type Invocation struct {
	Command string            `json:"command,omitempty" validate:"max=131072,nonul"`
	Args    []string          `json:"args,omitempty" validate:"omitempty,max=4096,dive,max=131072,nonul"`
	Argv    []string          `json:"argv,omitempty" validate:"omitempty,max=4096,dive,max=131072,nonul"`
	Cwd     string            `json:"cwd,omitempty" validate:"omitempty,startswith=/,max=4096,nonul"`
	Env     map[string]string `json:"env,omitempty" validate:"omitempty,max=256,dive,keys,min=1,max=256,envkey,endkeys,nonul,max=65536"`
}

// ExecRequest is the body of POST /v1/vms/{vm}/exec.
type ExecRequest struct {
	Invocation
	// Stdin is the command's whole input, in StdinEncoding (utf8 when
	// empty); nil gives it none.
	Stdin          *string `json:"stdin,omitempty"`
	StdinEncoding  string  `json:"stdinEncoding,omitempty" validate:"omitempty,oneof=utf8 base64"`
	TimeoutMs      int64   `json:"timeoutMs,omitempty" validate:"gte=0,lte=86400000"`
	MaxOutputBytes int     `json:"maxOutputBytes,omitempty" validate:"gte=0,lte=16777216"`
}

// ExecResult is the answer of a buffered exec. Stdout and Stderr are both
// in Encoding: "utf8" when both are text, "base64" otherwise.
type ExecResult struct {
	ExitCode   int            `json:"exitCode"`
	Signal     gateway.Signal `json:"signal,omitempty"`
	Stdout     string         `json:"stdout"`
	Stderr     string         `json:"stderr"`
	Encoding   string         `json:"encoding"`
	Truncated  bool           `json:"truncated"`
	DurationMs int64          `json:"durationMs"`
}

// ExecExitEvent is the data of a streamed exec's final exit event. Signal
// is null when the command exited by itself. The fields are in the order
// the gateway has always sent them.
type ExecExitEvent struct {
	DurationMs int64           `json:"durationMs"`
	ExitCode   int             `json:"exitCode"`
	Signal     *gateway.Signal `json:"signal"`
	Truncated  bool            `json:"truncated"`
}

// SpawnRequest is the body of POST /v1/vms/{vm}/processes.
type SpawnRequest struct {
	Invocation
}

// SignalRequest is the body of POST /v1/vms/{vm}/processes/{pid}/signal.
type SignalRequest struct {
	Signal string `json:"signal" validate:"required,max=16"`
}

// StdinWritten answers a write to a process's stdin.
type StdinWritten struct {
	Written int `json:"written"`
}

// OutputEvent is the data of the stdout and stderr events of exec, process
// and shell streams: a chunk of output in Encoding. TS is in UTC.
type OutputEvent struct {
	Seq      uint64    `json:"seq"`
	Stream   string    `json:"stream"`
	Data     string    `json:"data"`
	Encoding string    `json:"encoding"`
	TS       time.Time `json:"ts"`
}

// ProcessExitEvent is the data of the final event of a process's or a
// shell's output stream (exit and end): its exit status, with Signal null
// when it exited by itself.
type ProcessExitEvent struct {
	ExitCode int             `json:"exitCode"`
	Signal   *gateway.Signal `json:"signal"`
}
