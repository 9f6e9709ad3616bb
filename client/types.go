package client

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
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

// VM is a VM resource.
type VM struct {
	ID        string            `json:"id"`
	State     VMState           `json:"state"`
	Reason    string            `json:"reason,omitempty"`
	Labels    map[string]string `json:"labels"`
	SidecarID string            `json:"sidecarId,omitempty"`
	// Node is the gateway node that runs the VM.
	Node                string            `json:"node,omitempty"`
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

// CreateVMRequest is the body of POST /v1/vms. Every field is optional.
type CreateVMRequest struct {
	Labels map[string]string `json:"labels,omitempty"`
	Env    map[string]string `json:"env,omitempty"`
	// Permissions maps fs, network, childProcess, process, env and
	// hostFunction to "allow", "ask" or "deny".
	Permissions         map[string]any `json:"permissions,omitempty"`
	Limits              map[string]any `json:"limits,omitempty"`
	LoopbackExemptPorts []uint16       `json:"loopbackExemptPorts,omitempty"`
	// Software names packages such as "@agentos-software/pi".
	Software []string `json:"software,omitempty"`
	// Agents names agents: pi, claude, codex, opencode.
	Agents             []string `json:"agents,omitempty"`
	IdleTimeoutSeconds int      `json:"idleTimeoutSeconds,omitempty"`
}

// ListVMsOptions filters GET /v1/vms.
type ListVMsOptions struct {
	// State and States are the states asked for (both may be set); none
	// lists the VMs that have not ended. AllStates lists every VM.
	State     VMState
	States    []VMState
	AllStates bool
	// Labels must all match (label=key=value); NotLabels must not
	// (label=key!=value), and a VM without the label matches.
	Labels    map[string]string
	NotLabels map[string]string
	Cursor    string
	Limit     int // 0: the gateway's default (50)
}

// ExecRequest is the body of POST /v1/vms/{vm}/exec: Command alone (a
// command line, run directly when it is a simple command or a `sh -c`
// invocation, through `sh -c` otherwise), Command with Args (the program
// and its arguments, no shell), or Argv (no shell). An empty Args is not
// sent; use Argv to run a program without arguments and without a shell.
type ExecRequest struct {
	Command string
	Args    []string
	Argv    []string
	Cwd     string
	Env     map[string]string
	// Stdin, when not nil, is written to the command's stdin (then closed).
	// It travels as text when it is valid UTF-8, as base64 otherwise.
	Stdin          []byte
	TimeoutMs      int64
	MaxOutputBytes int
}

type execRequestJSON struct {
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

// MarshalJSON encodes the request as the gateway expects it.
func (r ExecRequest) MarshalJSON() ([]byte, error) {
	w := execRequestJSON{Command: r.Command, Args: r.Args, Argv: r.Argv, Cwd: r.Cwd, Env: r.Env, TimeoutMs: r.TimeoutMs, MaxOutputBytes: r.MaxOutputBytes}
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

// ExecResult is the answer of a buffered exec. Stdout and Stderr are encoded
// as Encoding says ("utf8" or "base64", the same for both); StdoutBytes and
// StderrBytes decode them.
type ExecResult struct {
	ExitCode   int    `json:"exitCode"`
	Signal     string `json:"signal,omitempty"`
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	Encoding   string `json:"encoding"`
	Truncated  bool   `json:"truncated"`
	DurationMs int64  `json:"durationMs"`
	// Replayed is true when the gateway answered from the record of an
	// earlier call with the same Idempotency-Key.
	Replayed bool `json:"-"`
}

// StdoutBytes returns the decoded stdout.
func (r *ExecResult) StdoutBytes() ([]byte, error) { return decodeData(r.Stdout, r.Encoding) }

// StderrBytes returns the decoded stderr.
func (r *ExecResult) StderrBytes() ([]byte, error) { return decodeData(r.Stderr, r.Encoding) }

func decodeData(s, encoding string) ([]byte, error) {
	switch encoding {
	case "", "utf8":
		return []byte(s), nil
	case "base64":
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("client: invalid base64 data: %w", err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("client: unknown data encoding %q", encoding)
}

// SpawnRequest is the body of POST /v1/vms/{vm}/processes, with the fields
// of ExecRequest: Command alone (a command line), Command with Args (no
// shell), or Argv (no shell).
type SpawnRequest struct {
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Argv    []string          `json:"argv,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
}

// ExitStatus is how a process ended.
type ExitStatus struct {
	ExitCode int    `json:"exitCode"`
	Signal   string `json:"signal,omitempty"`
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
	// Replayed is true when SpawnProcess was answered from the record of an
	// earlier call with the same Idempotency-Key.
	Replayed bool `json:"-"`
}

// ShellRequest is the body of POST /v1/vms/{vm}/shells. Zero values take
// the gateway's defaults (80x24).
type ShellRequest struct {
	Shell string            `json:"shell,omitempty"` // "sh" or "bash"
	Cols  uint16            `json:"cols,omitempty"`
	Rows  uint16            `json:"rows,omitempty"`
	Cwd   string            `json:"cwd,omitempty"`
	Env   map[string]string `json:"env,omitempty"`
}

// Shell states.
const (
	ShellRunning = "running"
	ShellExited  = "exited"
)

// Shell describes a shell of a VM, ended ones included.
type Shell struct {
	ID        string     `json:"id"`
	Shell     string     `json:"shell"`
	State     string     `json:"state"` // ShellRunning or ShellExited
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

// FileStat is a file's metadata (GET /fs/stat).
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
	Recursive bool
	MaxDepth  int // 0: the gateway's default
}

// Quotas bound what a tenant may use; zero means unlimited.
type Quotas struct {
	MaxVMs            int     `json:"maxVms"`
	MaxProcesses      int     `json:"maxProcesses"`
	RequestsPerSecond float64 `json:"requestsPerSecond"`
}

// Tenant is a customer of the gateway.
type Tenant struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Isolated  bool            `json:"isolated"`
	Quotas    Quotas          `json:"quotas"`
	Sessions  SessionSettings `json:"sessions"`
	CreatedAt time.Time       `json:"createdAt"`
	UpdatedAt time.Time       `json:"updatedAt"`
}

// TenantCreate is the body of POST /v1/tenants. Nil Quotas take the
// gateway's defaults (unlimited).
type TenantCreate struct {
	Name     string                 `json:"name"`
	Isolated bool                   `json:"isolated,omitempty"`
	Quotas   *Quotas                `json:"quotas,omitempty"`
	Sessions *SessionSettingsUpdate `json:"sessions,omitempty"`
}

// QuotasUpdate changes the quotas whose field is set.
type QuotasUpdate struct {
	MaxVMs            *int     `json:"maxVms,omitempty"`
	MaxProcesses      *int     `json:"maxProcesses,omitempty"`
	RequestsPerSecond *float64 `json:"requestsPerSecond,omitempty"`
}

// TenantUpdate is the body of PATCH /v1/tenants/{t}: only the fields set
// change (see Ptr).
type TenantUpdate struct {
	Name     *string                `json:"name,omitempty"`
	Isolated *bool                  `json:"isolated,omitempty"`
	Quotas   *QuotasUpdate          `json:"quotas,omitempty"`
	Sessions *SessionSettingsUpdate `json:"sessions,omitempty"`
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

// VMEvent is the data of an event of GET /v1/vms/{vm}/events.
type VMEvent struct {
	Type   string            `json:"type"` // "state", "limit_warning", "process_exit", "structured"
	Time   time.Time         `json:"time"`
	State  VMState           `json:"state,omitempty"`
	Reason string            `json:"reason,omitempty"`
	Name   string            `json:"name,omitempty"`
	Detail map[string]string `json:"detail,omitempty"`
	Pid    uint32            `json:"pid,omitempty"`
	Exit   *ExitStatus       `json:"exit,omitempty"`
}
