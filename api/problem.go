package api

import gateway "github.com/agentos-gateway/agentos-gateway"

// ProblemType is the URI prefix of Problem types, one per code.
const ProblemType = "urn:agentos-gateway:problem:"

// Problem is an RFC 9457 problem document with the gateway's stable code;
// Details carries what the code's problems add (a field, a limit, a
// state).
type Problem struct {
	Type      string         `json:"type"`
	Title     string         `json:"title"`
	Status    int            `json:"status"`
	Detail    string         `json:"detail"`
	Instance  string         `json:"instance,omitempty"`
	Code      gateway.Code   `json:"code"`
	RequestID string         `json:"requestId,omitempty"`
	Details   map[string]any `json:"details,omitempty"`
}
