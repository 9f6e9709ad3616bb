package gateway

import (
	"slices"
	"time"
)

// TokenPrefix starts every token's secret, so that the gateway tells a
// token from an API key at a glance, and secret scanners do too.
const TokenPrefix = "agt_"

// Token is a short-lived credential a tenant mints for a browser or an end
// user: it acts for its tenant within its scopes, on its VM (and session)
// only. Its secret is shown once, at creation, and only its hash is kept.
type Token struct {
	ID       string
	TenantID string
	Scopes   []Scope
	// VMID and SessionID bind the token to one VM, and to one agent
	// session of it (empty: any of the tenant's).
	VMID      string
	SessionID string
	// Origins are the browser origins the token may be used from (none:
	// any); a request whose Origin is not one of them is refused.
	Origins   []string
	Label     string
	CreatedAt time.Time
	ExpiresAt time.Time
}

// Scope is what a token may do.
type Scope string

// The scopes of tokens.
const (
	// ScopeVMRead reads the VM, its events and the lists of its processes,
	// shells, sessions and files' metadata.
	ScopeVMRead Scope = "vm:read"
	// ScopeVMWrite hibernates, wakes, checkpoints, patches and deletes it.
	ScopeVMWrite Scope = "vm:write"
	// ScopeExec runs commands and processes: spawn, stdin, signals, output
	// and attach.
	ScopeExec Scope = "exec"
	// ScopeShells opens, attaches to, types into and closes shells.
	ScopeShells Scope = "shells"
	// ScopeFilesRead and ScopeFilesWrite read and write the VM's files.
	ScopeFilesRead  Scope = "files:read"
	ScopeFilesWrite Scope = "files:write"
	// ScopeSessions opens agent sessions, prompts, cancels, answers
	// permissions and follows their events.
	ScopeSessions Scope = "sessions"
	// ScopePreviews manages previews and reaches the VM's ports.
	ScopePreviews Scope = "previews"
)

// Scopes are every scope, in the order the API documents them.
var Scopes = []Scope{ScopeVMRead, ScopeVMWrite, ScopeExec, ScopeShells, ScopeFilesRead, ScopeFilesWrite, ScopeSessions, ScopePreviews}

// Valid reports whether s is a known scope.
func (s Scope) Valid() bool { return slices.Contains(Scopes, s) }

// Allows reports whether the token carries scope s.
func (t Token) Allows(s Scope) bool { return slices.Contains(t.Scopes, s) }

// AuditRecord is one entry of the audit trail: a call that changed
// something, or a token's call that was refused.
type AuditRecord struct {
	ID        int64
	At        time.Time
	Node      string
	TenantID  string // empty for a token that was not recognised
	KeyID     string
	TokenID   string
	Method    string
	Route     string // the route's template, such as /v1/vms/{vm}/exec
	VMID      string
	Status    int
	RequestID string
}

// AuditFilter selects audit records: a tenant's (empty: every tenant's),
// of one VM (empty: all), at or after a time, a page at a time.
type AuditFilter struct {
	TenantID string
	VMID     string
	After    time.Time
	Cursor   string
	Limit    int
}
