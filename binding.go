package gateway

import "encoding/json"

// Bindings are a VM's host bindings: collections of functions its guest runs
// as the engine's agentos-<collection> <binding> commands, each answered by a
// tenant's webhook, and the webhook that decides the permission requests of
// the VM's agent sessions. They are kept with the VM's record.
type Bindings struct {
	Collections []BindingCollection `json:"collections"`
	// PermissionWebhookURL, when set, is asked to decide each permission
	// request of the VM's sessions; without an answer the default decision
	// applies.
	PermissionWebhookURL string `json:"permissionWebhookUrl,omitempty"`
}

// BindingCollection is a named set of bindings: the guest command
// agentos-<Name>.
type BindingCollection struct {
	Name        string    `json:"name"`
	Description string    `json:"description"`
	Bindings    []Binding `json:"bindings"`
}

// Binding is one host function of a collection, answered by WebhookURL.
type Binding struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// InputSchema is the JSON Schema (an object) the engine checks each
	// input against before the webhook is called.
	InputSchema json.RawMessage  `json:"inputSchema"`
	Examples    []BindingExample `json:"examples,omitempty"`
	// TimeoutMs is how long the guest waits for the webhook's answer.
	TimeoutMs  int    `json:"timeoutMs,omitempty"`
	WebhookURL string `json:"webhookUrl"`
}

// BindingExample is an example input shown in the command's help and the
// agents' tool reference.
type BindingExample struct {
	Description string          `json:"description"`
	Input       json.RawMessage `json:"input"`
}

// Binding call outcomes, as the binding_call VM event's detail says them.
const (
	BindingOK          = "ok"          // the webhook answered 2xx with JSON
	BindingTimeout     = "timeout"     // no answer within the binding's timeout
	BindingHTTPError   = "http_error"  // the webhook answered outside 2xx, or not JSON
	BindingUnreachable = "unreachable" // no connection could be made
	BindingRefused     = "refused"     // the target is not allowed (--webhook-allow)
	BindingUnknown     = "unknown"     // the binding is no longer declared
)

// PermissionVerdict is a permission webhook's answer to a request: the
// option chosen, or a decision (allow or reject) the gateway maps to an
// option of that kind.
type PermissionVerdict struct {
	OptionID string `json:"optionId,omitempty"`
	Decision string `json:"decision,omitempty"`
}
