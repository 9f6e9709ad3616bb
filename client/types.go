package client

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"time"
	"unicode/utf8"
)

// List is one page of a list: the gateway answers every list as
// {items, nextCursor}; NextCursor is empty on the last page.
type List[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"nextCursor,omitempty"`
}

// VMState is the state of a VM.
type VMState string

// VM states. Disposed and lost are final.
const (
	VMCreating  VMState = "creating"
	VMReady     VMState = "ready"
	VMDisposing VMState = "disposing"
	VMDisposed  VMState = "disposed"
	VMLost      VMState = "lost"
)

// Final reports whether no transition leaves s.
func (s VMState) Final() bool { return s == VMDisposed || s == VMLost }

// Signal names a signal, such as SIGTERM.
type Signal string

// The signals a process can be sent.
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

// VM is a VM resource.
type VM struct {
	ID                  string
	State               VMState
	Reason              string // why it ended, when it was lost
	Labels              map[string]string
	SidecarID           string
	Env                 map[string]string
	Permissions         map[string]any
	Limits              map[string]any
	LoopbackExemptPorts []uint16
	Software            []string
	Agents              []string
	// IdleTimeout is how long the VM may go unused before the gateway
	// disposes of it (0: never).
	IdleTimeout time.Duration
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// wireVM is the VM schema.
type wireVM struct {
	ID                  string            `json:"id"`
	State               VMState           `json:"state"`
	Reason              string            `json:"reason,omitempty"`
	Labels              map[string]string `json:"labels"`
	SidecarID           string            `json:"sidecarId,omitempty"`
	Env                 map[string]string `json:"env,omitempty"`
	Permissions         map[string]any    `json:"permissions,omitempty"`
	Limits              map[string]any    `json:"limits,omitempty"`
	LoopbackExemptPorts []uint16          `json:"loopbackExemptPorts"`
	Software            []string          `json:"software"`
	Agents              []string          `json:"agents"`
	IdleTimeoutSeconds  int               `json:"idleTimeoutSeconds"`
	CreatedAt           time.Time         `json:"createdAt"`
	UpdatedAt           time.Time         `json:"updatedAt"`
}

// UnmarshalJSON decodes the VM schema.
func (v *VM) UnmarshalJSON(b []byte) error {
	var w wireVM
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*v = VM{ID: w.ID, State: w.State, Reason: w.Reason, Labels: w.Labels, SidecarID: w.SidecarID, Env: w.Env,
		Permissions: w.Permissions, Limits: w.Limits, LoopbackExemptPorts: w.LoopbackExemptPorts, Software: w.Software,
		Agents: w.Agents, IdleTimeout: time.Duration(w.IdleTimeoutSeconds) * time.Second, CreatedAt: w.CreatedAt, UpdatedAt: w.UpdatedAt}
	return nil
}

// CreateVMRequest says what a new VM is made of. Every field is optional.
type CreateVMRequest struct {
	Labels map[string]string
	Env    map[string]string
	// Permissions maps fs, network, childProcess, process, env and
	// hostFunction to "allow", "ask" or "deny".
	Permissions         map[string]any
	Limits              map[string]any
	LoopbackExemptPorts []uint16
	// Software names packages such as "@agentos-software/pi".
	Software []string
	// Agents names agents: pi, claude, codex, opencode.
	Agents []string
	// IdleTimeout, rounded up to a second, disposes of the VM after that
	// long without use (0: the gateway's default).
	IdleTimeout time.Duration
}

// wireCreateVM is the CreateVMRequest schema.
type wireCreateVM struct {
	Labels              map[string]string `json:"labels,omitempty"`
	Env                 map[string]string `json:"env,omitempty"`
	Permissions         map[string]any    `json:"permissions,omitempty"`
	Limits              map[string]any    `json:"limits,omitempty"`
	LoopbackExemptPorts []uint16          `json:"loopbackExemptPorts,omitempty"`
	Software            []string          `json:"software,omitempty"`
	Agents              []string          `json:"agents,omitempty"`
	IdleTimeoutSeconds  int64             `json:"idleTimeoutSeconds,omitempty"`
}

// MarshalJSON encodes the CreateVMRequest schema.
func (r CreateVMRequest) MarshalJSON() ([]byte, error) {
	return json.Marshal(wireCreateVM{Labels: r.Labels, Env: r.Env, Permissions: r.Permissions, Limits: r.Limits,
		LoopbackExemptPorts: r.LoopbackExemptPorts, Software: r.Software, Agents: r.Agents, IdleTimeoutSeconds: ceilUnit(r.IdleTimeout, time.Second)})
}

// ceilUnit is d in units, rounded up (0 for d <= 0).
func ceilUnit(d, unit time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + unit - 1) / unit)
}

// ListVMsOptions filters the VMs listed.
type ListVMsOptions struct {
	// States are the states asked for; none lists the VMs that have not
	// ended. AllStates lists every VM.
	States    []VMState
	AllStates bool
	// Labels must all match (label=key=value); NotLabels must not
	// (label=key!=value), and a VM without the label matches.
	Labels    map[string]string
	NotLabels map[string]string
	// Limit bounds a page (0: the gateway's default, 50).
	Limit int
	// Cursor starts ListVMs at a page a previous one named (VMs ignores
	// it and starts at the first).
	Cursor string
}

// ExecRequest is a command to run: Command alone (a command line, run
// directly when it is a simple command or a `sh -c` invocation, through
// `sh -c` otherwise), Command with Args (the program and its arguments, no
// shell), or Argv (no shell). An empty Args is not sent; use Argv to run a
// program without arguments and without a shell.
type ExecRequest struct {
	Command string
	Args    []string
	Argv    []string
	Cwd     string
	Env     map[string]string
	// Stdin, when not nil, is written to the command's stdin (then closed).
	Stdin []byte
	// Timeout, rounded up to a millisecond, bounds the command (0: the
	// gateway's default, 10 minutes).
	Timeout time.Duration
	// MaxOutputBytes bounds the output kept of each stream (0: the
	// gateway's default, 1 MiB).
	MaxOutputBytes int
	// Stdout and Stderr, when either is set, make Exec stream the output
	// into them as it comes instead of buffering it in the ExecResult
	// (a nil one discards its stream).
	Stdout, Stderr io.Writer
}

// wireExec is the ExecRequest schema.
type wireExec struct {
	Command        string            `json:"command,omitempty"`
	Args           []string          `json:"args,omitempty"`
	Argv           []string          `json:"argv,omitempty"`
	Cwd            string            `json:"cwd,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	Stdin          *string           `json:"stdin,omitempty"`
	StdinEncoding  string            `json:"stdinEncoding,omitempty"`
	TimeoutMs      int64             `json:"timeoutMs,omitempty"`
	MaxOutputBytes int               `json:"maxOutputBytes,omitempty"`
}

// MarshalJSON encodes the ExecRequest schema (Stdout and Stderr stay on
// this side).
func (r ExecRequest) MarshalJSON() ([]byte, error) {
	w := wireExec{Command: r.Command, Args: r.Args, Argv: r.Argv, Cwd: r.Cwd, Env: r.Env,
		TimeoutMs: ceilUnit(r.Timeout, time.Millisecond), MaxOutputBytes: r.MaxOutputBytes}
	if r.Stdin != nil {
		var s string
		if utf8.Valid(r.Stdin) {
			s = string(r.Stdin)
		} else {
			s = base64.StdEncoding.EncodeToString(r.Stdin)
			w.StdinEncoding = "base64"
		}
		w.Stdin = &s
	}
	return json.Marshal(w)
}

// ExecResult is how a command ended, with its output unless it was
// streamed into ExecRequest.Stdout and Stderr.
type ExecResult struct {
	ExitStatus
	Stdout, Stderr []byte
	// Truncated is set when output beyond MaxOutputBytes was dropped.
	Truncated bool
	Duration  time.Duration
	// Replayed is set when the gateway answered from the record of an
	// earlier call with the same Idempotency-Key.
	Replayed bool
}

// wireExecResult is the ExecResult schema.
type wireExecResult struct {
	ExitCode   int    `json:"exitCode"`
	Signal     Signal `json:"signal,omitempty"`
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	Encoding   string `json:"encoding"`
	Truncated  bool   `json:"truncated"`
	DurationMs int64  `json:"durationMs"`
}

// SpawnRequest is a long-running process to start, with the command forms
// of ExecRequest.
type SpawnRequest struct {
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Argv    []string          `json:"argv,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
}

// ExitStatus is how a process ended. Signal is set when it was killed by
// a signal.
type ExitStatus struct {
	ExitCode int    `json:"exitCode"`
	Signal   Signal `json:"signal,omitempty"`
}

// Process describes a process of a VM, exited ones included.
type Process struct {
	Pid     uint32   `json:"pid"`
	Command string   `json:"command"`
	Args    []string `json:"args"`
	Cwd     string   `json:"cwd"`
	Running bool     `json:"running"`
	// Exit is set once the process exited.
	Exit *ExitStatus `json:"exit,omitempty"`
	// Error says why the process's end is unknowable (VM lost...).
	Error     string     `json:"error,omitempty"`
	StartedAt time.Time  `json:"startedAt"`
	ExitedAt  *time.Time `json:"exitedAt,omitempty"`
}

// ShellRequest is a shell to open. Zero values take the gateway's defaults
// (sh, 80x24).
type ShellRequest struct {
	Shell string            `json:"shell,omitempty"` // "sh" or "bash"
	Cols  uint16            `json:"cols,omitempty"`
	Rows  uint16            `json:"rows,omitempty"`
	Cwd   string            `json:"cwd,omitempty"`
	Env   map[string]string `json:"env,omitempty"`
}

// ShellState is the state of a shell.
type ShellState string

// Shell states.
const (
	ShellRunning ShellState = "running"
	ShellExited  ShellState = "exited"
)

// Shell describes a shell of a VM, ended ones included.
type Shell struct {
	ID        string     `json:"id"`
	Shell     string     `json:"shell"`
	State     ShellState `json:"state"`
	Cols      uint16     `json:"cols"`
	Rows      uint16     `json:"rows"`
	StartedAt time.Time  `json:"startedAt"`
	ExitedAt  *time.Time `json:"exitedAt,omitempty"`
	// Exit is set once the shell exited.
	Exit *ExitStatus `json:"exit,omitempty"`
	// Error says why the shell's end is unknowable (VM lost...).
	Error string `json:"error,omitempty"`
	// AnsweredQueries counts the terminal queries the gateway answered
	// itself because no attached client did.
	AnsweredQueries int `json:"answeredQueries"`
}

// DirEntry is one entry of a directory listing.
type DirEntry struct {
	Name      string `json:"name"`
	Path      string `json:"path"`
	IsDir     bool   `json:"isDirectory"`
	IsSymlink bool   `json:"isSymbolicLink"`
	Size      int64  `json:"size"`
}

// FileStat is a file's metadata.
type FileStat struct {
	Path      string    `json:"path"`
	Size      int64     `json:"size"`
	Mode      uint32    `json:"mode"` // st_mode: type and permission bits
	IsDir     bool      `json:"isDirectory"`
	IsSymlink bool      `json:"isSymbolicLink"`
	ModTime   time.Time `json:"mtime"`
	UID       uint32    `json:"uid"`
	GID       uint32    `json:"gid"`
}

// FileHead is what HEAD /files tells of a path.
type FileHead struct {
	Size        int64
	ContentType string // "inode/directory" for a directory
	ModTime     time.Time
	IsDir       bool
	ETag        string // a file's validator, for If-None-Match and If-Range
}

// WriteFileOptions tunes WriteFile.
type WriteFileOptions struct {
	// Mkdirs creates missing parent directories.
	Mkdirs bool
	// Size, when > 0, is sent as Content-Length (the reader must then yield
	// exactly Size bytes); otherwise the body is chunked unless the reader
	// is a *bytes.Reader, *bytes.Buffer or *strings.Reader.
	Size int64
}

// WriteResult is the answer of WriteFile.
type WriteResult struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
}

// ListDirOptions tunes ListDir.
type ListDirOptions struct {
	// Recursive descends into subdirectories, at most MaxDepth levels (0:
	// the gateway's default).
	Recursive bool
	MaxDepth  int
}

// DeleteFileOptions tunes DeleteFile.
type DeleteFileOptions struct {
	// Recursive removes a directory with its content.
	Recursive bool
}

// Quotas bound what a tenant may use; zero means unlimited.
type Quotas struct {
	MaxVMs            int     `json:"maxVms"`
	MaxProcesses      int     `json:"maxProcesses"`
	RequestsPerSecond float64 `json:"requestsPerSecond"`
}

// QuotasUpdate changes the quotas whose field is set.
type QuotasUpdate struct {
	MaxVMs            *int     `json:"maxVms,omitempty"`
	MaxProcesses      *int     `json:"maxProcesses,omitempty"`
	RequestsPerSecond *float64 `json:"requestsPerSecond,omitempty"`
}

// APIKey is a tenant's API key. Key, the secret, is only set in the answer
// of CreateKey.
type APIKey struct {
	ID        string    `json:"id"`
	TenantID  string    `json:"tenantId"`
	Prefix    string    `json:"prefix"`
	CreatedAt time.Time `json:"createdAt"`
	Key       string    `json:"key,omitempty"`
}

// Sidecar describes a pooled sidecar process (admin only).
type Sidecar struct {
	ID        string    `json:"id"`
	Pid       int       `json:"pid"`
	State     string    `json:"state"`
	VMCount   int       `json:"vmCount"`
	Tenants   []string  `json:"tenants"`
	Isolated  bool      `json:"isolated"`
	RSSBytes  int64     `json:"rssBytes"`
	Restarts  int64     `json:"restarts"`
	StartedAt time.Time `json:"startedAt"`
}

// VMEventType is the kind of a VM event.
type VMEventType string

// VM event types.
const (
	VMEventState        VMEventType = "state"
	VMEventLimitWarning VMEventType = "limit_warning"
	VMEventProcessExit  VMEventType = "process_exit"
	VMEventStructured   VMEventType = "structured"
)

// VMEvent is an event of a VM's event stream.
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
