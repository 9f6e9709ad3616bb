package client

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"time"
	"unicode/utf8"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
)

// The JSON shapes of the API have one home: package api for those of HTTP
// alone, the root package gateway for the domain's. The client names them
// here so that a program needs one import; where Go wants another form
// (durations, bytes, writers, typed events) the client has a type of its
// own that it converts at the edge.

// List is one page of a list; NextCursor is empty on the last page.
type List[T any] = api.List[T]

// VMState is the state of a VM.
type VMState = gateway.VMState

// VM states. Disposed and lost are final; a hibernated VM wakes under the
// same id on its next use (hibernating and waking are the steps between).
const (
	VMCreating    = gateway.VMCreating
	VMReady       = gateway.VMReady
	VMDisposing   = gateway.VMDisposing
	VMDisposed    = gateway.VMDisposed
	VMLost        = gateway.VMLost
	VMHibernating = gateway.VMHibernating
	VMHibernated  = gateway.VMHibernated
	VMWaking      = gateway.VMWaking
)

// Signal names a signal, such as SIGTERM.
type Signal = gateway.Signal

// The signals a process is usually sent.
const (
	SIGHUP  = gateway.SIGHUP
	SIGINT  = gateway.SIGINT
	SIGQUIT = gateway.SIGQUIT
	SIGKILL = gateway.SIGKILL
	SIGUSR1 = gateway.SIGUSR1
	SIGUSR2 = gateway.SIGUSR2
	SIGTERM = gateway.SIGTERM
	SIGCONT = gateway.SIGCONT
	SIGSTOP = gateway.SIGSTOP
)

// VM is a VM resource; IdleTimeout gives its idle timeout as a duration.
type VM = api.VM

// NetworkRules is the egress rules form of permissions.network: the first
// of Rules that matches a guest's connection decides it, Default ("allow"
// or "deny"; empty: deny) when none does.
type NetworkRules = api.NetworkRules

// NetworkRule allows or denies ("allow", "deny") the connections to Hosts
// (names, "*" matching any run of characters, or addresses) on Ports
// (none: every port).
type NetworkRule = api.NetworkRule

// CreateVMRequest says what a new VM is made of. Every field is optional.
type CreateVMRequest struct {
	Labels map[string]string
	Env    map[string]string
	// Permissions maps fs, network, childProcess, process, env and
	// hostFunction to "allow", "ask" or "deny" (left out: allow); network
	// also takes egress rules, a NetworkRules.
	Permissions         map[string]any
	Limits              map[string]any
	LoopbackExemptPorts []uint16
	// Software names packages such as "@agentos-software/pi".
	Software []string
	// Agents names agents: pi, claude, codex, opencode.
	Agents []string
	// IdleTimeout, rounded up to a second, ends the VM after that long
	// without use (0: never), as OnIdle says: "hibernate" or "dispose"
	// (empty: the gateway's --on-idle).
	IdleTimeout time.Duration
	OnIdle      string
	// Bindings declares the VM's host bindings (see PutBindings).
	Bindings *Bindings
	// FromSnapshot creates the VM with the tree of one of the caller's
	// snapshots.
	FromSnapshot string
	// CheckpointInterval, rounded up to a second, checkpoints the VM's
	// files that often while it runs (a pointer to 0: never; nil: the
	// gateway's --checkpoint-interval).
	CheckpointInterval *time.Duration
}

// MarshalJSON encodes the CreateVMRequest schema.
func (r CreateVMRequest) MarshalJSON() ([]byte, error) {
	return json.Marshal(api.CreateVMRequest{Labels: r.Labels, Env: r.Env, Permissions: r.Permissions, Limits: r.Limits,
		LoopbackExemptPorts: r.LoopbackExemptPorts, Software: r.Software, Agents: r.Agents, IdleTimeoutSeconds: int(ceilUnit(r.IdleTimeout, time.Second)),
		OnIdle: r.OnIdle, Bindings: r.Bindings, FromSnapshot: r.FromSnapshot, CheckpointSeconds: seconds(r.CheckpointInterval)})
}

// seconds is d rounded up to whole seconds, nil for nil.
func seconds(d *time.Duration) *int {
	if d == nil {
		return nil
	}
	secs := int(ceilUnit(*d, time.Second))
	return &secs
}

// UpdateVMRequest changes a VM's settings (VMHandle.Update); a nil field
// stays as it is.
type UpdateVMRequest struct {
	// Labels are merged into the VM's; a label set to nil is removed.
	Labels map[string]*string
	// IdleTimeout, rounded up to a second (0: never), and OnIdle
	// ("hibernate" or "dispose") apply at once to a running VM.
	IdleTimeout *time.Duration
	OnIdle      *string
	// CheckpointInterval, rounded up to a second, is how often the VM's
	// files are checkpointed (0: never).
	CheckpointInterval *time.Duration
	// Permissions replaces the capabilities it names (as in
	// CreateVMRequest; a nil value allows the capability again), at once
	// on a running VM. Tokens cannot change them.
	Permissions map[string]any
}

// MarshalJSON encodes the UpdateVMRequest schema.
func (r UpdateVMRequest) MarshalJSON() ([]byte, error) {
	return json.Marshal(api.UpdateVMRequest{Labels: r.Labels, OnIdle: r.OnIdle, Permissions: r.Permissions,
		IdleTimeoutSeconds: seconds(r.IdleTimeout), CheckpointSeconds: seconds(r.CheckpointInterval)})
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

// MarshalJSON encodes the ExecRequest schema (Stdout and Stderr stay on
// this side).
func (r ExecRequest) MarshalJSON() ([]byte, error) {
	w := api.ExecRequest{Invocation: api.Invocation{Command: r.Command, Args: r.Args, Argv: r.Argv, Cwd: r.Cwd, Env: r.Env},
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

// SpawnRequest is a long-running process to start, with the command forms
// of ExecRequest.
type SpawnRequest struct {
	Command string
	Args    []string
	Argv    []string
	Cwd     string
	Env     map[string]string
}

// MarshalJSON encodes the SpawnRequest schema.
func (r SpawnRequest) MarshalJSON() ([]byte, error) {
	return json.Marshal(api.SpawnRequest{Invocation: api.Invocation{Command: r.Command, Args: r.Args, Argv: r.Argv, Cwd: r.Cwd, Env: r.Env}})
}

// ExitStatus is how a process ended. Signal is set when it was killed by
// a signal.
type ExitStatus = gateway.ExitStatus

// Process describes a process of a VM, exited ones included.
type Process = gateway.ProcessInfo

// ShellRequest is a shell to open. Zero values take the gateway's defaults
// (sh, 80x24).
type ShellRequest = api.OpenShellRequest

// ShellState is the state of a shell.
type ShellState = gateway.ShellState

// Shell states.
const (
	ShellRunning = gateway.ShellRunning
	ShellExited  = gateway.ShellExited
)

// Shell describes a shell of a VM, ended ones included.
type Shell = gateway.ShellInfo

// DirEntry is one entry of a directory listing.
type DirEntry = gateway.DirEntry

// FileStat is a file's metadata.
type FileStat = api.Stat

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
type WriteResult = api.FileWritten

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
type Quotas = gateway.Quotas

// QuotasUpdate changes the quotas whose field is set.
type QuotasUpdate = api.QuotasUpdate

// APIKey is a tenant's API key. Key, the secret, is only set in the answer
// of CreateKey.
type APIKey = api.APIKey

// Sidecar describes a pooled sidecar process (admin only).
type Sidecar = api.Sidecar

// VMEventType is the kind of a VM event.
type VMEventType = gateway.VMEventType

// VM event types.
const (
	VMEventState        = gateway.VMEventState
	VMEventLimitWarning = gateway.VMEventLimitWarning
	VMEventProcessExit  = gateway.VMEventProcessExit
	VMEventStructured   = gateway.VMEventStructured
	VMEventScheduleRun  = gateway.VMEventScheduleRun
	VMEventBindingCall  = gateway.VMEventBindingCall
)

// VMEvent is an event of a VM's event stream.
type VMEvent = gateway.VMEvent
