package gateway

import "time"

// ExitStatus is how a process or a shell ended. Signal names the signal that
// ended it when a client killed it with one (the exit code is then
// 128+signo); it is empty when it exited by itself.
type ExitStatus struct {
	ExitCode int    `json:"exitCode"`
	Signal   Signal `json:"signal,omitempty"`
}

// Signal names a signal by its POSIX name, such as SIGTERM.
type Signal string

// The signals a client may send a process (any other POSIX name is
// accepted too).
const (
	SIGHUP  Signal = "SIGHUP"
	SIGINT  Signal = "SIGINT"
	SIGQUIT Signal = "SIGQUIT"
	SIGKILL Signal = "SIGKILL"
	SIGUSR1 Signal = "SIGUSR1"
	SIGUSR2 Signal = "SIGUSR2"
	SIGTERM Signal = "SIGTERM"
	SIGCONT Signal = "SIGCONT"
	SIGSTOP Signal = "SIGSTOP"
)

// ProcessInfo describes a spawned process of a VM, by its guest pid.
type ProcessInfo struct {
	Pid       uint32      `json:"pid"`
	Command   string      `json:"command"`
	Args      []string    `json:"args"`
	Cwd       string      `json:"cwd"`
	Running   bool        `json:"running"`
	Exit      *ExitStatus `json:"exit,omitempty"`
	Error     string      `json:"error,omitempty"`
	StartedAt time.Time   `json:"startedAt"`
	ExitedAt  *time.Time  `json:"exitedAt,omitempty"`
}

// ShellState is the state of an interactive shell.
type ShellState string

// Shell states.
const (
	ShellRunning ShellState = "running"
	ShellExited  ShellState = "exited"
)

// ShellInfo describes an interactive shell of a VM.
type ShellInfo struct {
	ID        string      `json:"id"`
	Shell     string      `json:"shell"`
	State     ShellState  `json:"state"`
	Cols      uint16      `json:"cols"`
	Rows      uint16      `json:"rows"`
	StartedAt time.Time   `json:"startedAt"`
	ExitedAt  *time.Time  `json:"exitedAt,omitempty"`
	Exit      *ExitStatus `json:"exit,omitempty"`
	// Error says why the end of the shell is unknowable (the VM was
	// disposed, its sidecar died).
	Error string `json:"error,omitempty"`
	// Deprecated: AnsweredQueries is always 0 and goes in the next
	// release: a shell's lines run without a terminal, so the gateway has
	// no terminal queries to answer.
	AnsweredQueries int `json:"answeredQueries"`
}

// DirEntry is one entry of a directory listing in a VM.
type DirEntry struct {
	Name      string `json:"name"`
	Path      string `json:"path"`
	IsDir     bool   `json:"isDirectory"`
	IsSymlink bool   `json:"isSymbolicLink"`
	Size      int64  `json:"size"`
}

// VMEventType is the kind of an entry of a VM's event stream.
type VMEventType string

// VM event types.
const (
	// VMEventState is a change of the VM's state (State, and Reason when
	// it is lost, hibernated or woken: request, idle, drain, shutdown).
	VMEventState VMEventType = "state"
	// VMEventLimitWarning is the engine's warning that the VM nears one of
	// its limits (Name, Detail).
	VMEventLimitWarning VMEventType = "limit_warning"
	// VMEventProcessExit is the end of a spawned process (Pid, Exit).
	VMEventProcessExit VMEventType = "process_exit"
	// VMEventStructured is any other structured event of the engine (Name,
	// Detail).
	VMEventStructured VMEventType = "structured"
	// VMEventScheduleRun is a recorded run of one of the VM's schedules
	// (Name: the schedule's id; Detail: run, outcome, and exitCode when it
	// has one).
	VMEventScheduleRun VMEventType = "schedule_run"
	// VMEventBindingCall is one invocation of a host binding (Name:
	// "<collection>.<binding>"; Detail: invocation, outcome, durationMs, and
	// status when the webhook answered). It carries no payload.
	VMEventBindingCall VMEventType = "binding_call"
)

// VMEvent is an entry of a VM's event stream.
type VMEvent struct {
	Type   VMEventType       `json:"type"`
	Time   time.Time         `json:"time"`
	State  VMState           `json:"state,omitempty"`
	Reason string            `json:"reason,omitempty"`
	Name   string            `json:"name,omitempty"`
	Detail map[string]string `json:"detail,omitempty"`
	Pid    uint32            `json:"pid,omitempty"`
	Exit   *ExitStatus       `json:"exit,omitempty"`
}
