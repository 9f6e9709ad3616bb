package vms

import (
	"context"

	"github.com/agentos-gateway/agentos-gateway/agentos"
)

// The engine's words for agent sessions (ACP), which the sessions service
// speaks without importing the engine.
type (
	// AgentSession is one agent session of a VM, as the engine runs it.
	AgentSession = agentos.Session
	// SessionEvent is one ACP event of a VM's sessions.
	SessionEvent = agentos.SessionEvent
	// SessionEvents follows the ACP events of every session of a VM.
	SessionEvents = agentos.Subscription[agentos.SessionEvent]
	// OpenSessionOptions open (or resume) a session.
	OpenSessionOptions = agentos.OpenSessionOptions
	// SessionConfig is a session's configuration as its agent reports it.
	SessionConfig = agentos.SessionConfig
	// HistoryQuery selects a page of a session's durable history.
	HistoryQuery = agentos.HistoryQuery
	// AgentEntry is an agent a VM knows, installed or not.
	AgentEntry = agentos.AgentEntry
)

// AgentPackages names the software package of each agent the gateway can
// install in a VM.
var AgentPackages = agentos.AgentPackages

// ErrSessionEventsOverflow ends SessionEvents whose reader fell more than
// its buffer behind.
var ErrSessionEventsOverflow = agentos.ErrOutputOverflow

// AgentHost is the part of a VM's engine that agent sessions use: it
// opens and finds sessions, follows their events and lists the agents. It
// is all the sessions service gets of the engine. Two hosts are equal when
// they are the same VM's.
type AgentHost struct{ vm *agentos.VM }

// OpenSession opens a session, or resumes one the engine still holds.
func (h AgentHost) OpenSession(ctx context.Context, o OpenSessionOptions) (*AgentSession, error) {
	return h.vm.OpenSession(ctx, o)
}

// Session returns the handle of a session by its id.
func (h AgentHost) Session(id string) *AgentSession { return h.vm.Session(id) }

// SubscribeSessions follows the events of every session of the VM, with
// room for buffer events before the subscription overflows.
func (h AgentHost) SubscribeSessions(buffer int) *SessionEvents { return h.vm.SubscribeACP(buffer) }

// ListAgents lists the agents the VM knows.
func (h AgentHost) ListAgents(ctx context.Context) ([]AgentEntry, error) { return h.vm.ListAgents(ctx) }

// Lost reports that the VM's sidecar went away with it.
func (h AgentHost) Lost() bool {
	st, _ := h.vm.State()
	return st == agentos.VMLost
}
