package sessions

// What the recorder makes of the engine's session events: their records
// and API documents.

import (
	"encoding/json"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/vms"
)

// recorded is a durable event as the recorder keeps it: its API document
// and, for permission events, the request to list or the decision taken.
type recorded struct {
	at       time.Time
	data     gateway.SessionEventData
	perm     *gateway.Permission         // a permission_request
	options  []gateway.PermissionOption  // its options
	decision *gateway.PermissionDecision // a permission_response
}

// describe turns an engine event into its record. A response carries the
// answer given through the API or by the default decision, if the engine
// took it.
func (r *recorder) describe(ev vms.SessionEvent, now time.Time) recorded {
	at := parseTimestamp(ev.Timestamp, now)
	rec := recorded{at: at, data: gateway.SessionEventData{Sequence: ev.Sequence, Timestamp: at, Type: ev.Type}}
	switch ev.Type {
	case "session_update":
		rec.data.Type = updateType(ev.Update)
		rec.data.Update = ev.Update
	case "permission_request":
		var req struct {
			Options  json.RawMessage `json:"options"`
			ToolCall json.RawMessage `json:"toolCall"`
		}
		_ = json.Unmarshal(ev.Request, &req)
		_ = json.Unmarshal(req.Options, &rec.options)
		rec.data.RequestID, rec.data.Options, rec.data.ToolCall = ev.RequestID, orNull(req.Options), orNull(req.ToolCall)
		rec.perm = &gateway.Permission{RequestID: ev.RequestID, Options: rec.data.Options, ToolCall: rec.data.ToolCall, AskedAt: at, Status: gateway.PermissionPending}
	case "permission_response":
		rec.data.RequestID, rec.data.Status, rec.data.Reason, rec.data.Response = ev.RequestID, ev.Status, ev.Reason, ev.Response
		r.mu.Lock()
		if st := r.sessions[ev.SessionID]; st != nil {
			if p := st.pending[ev.RequestID]; p != nil && p.answer != nil {
				d := *p.answer
				rec.decision = &d
			}
		}
		r.mu.Unlock()
		if rec.decision == nil || ev.Status != "accepted" {
			// Nobody's answer was taken: the engine settled the request
			// itself, e.g. because the turn was cancelled.
			rec.decision = &gateway.PermissionDecision{By: gateway.DecidedByAgent, At: at}
		}
		rec.decision.Status, rec.decision.Reason = ev.Status, ev.Reason
		rec.data.Decision = rec.decision
	}
	return rec
}

func ephemeralData(ev vms.SessionEvent) json.RawMessage {
	b, _ := json.Marshal(gateway.EphemeralEvent{AfterSequence: ev.AfterSequence, Type: updateType(ev.Update), Update: orNull(ev.Update)})
	return b
}

// updateType is the sessionUpdate field of an ACP session/update, the
// event's type.
func updateType(update json.RawMessage) string {
	var u struct {
		SessionUpdate string `json:"sessionUpdate"`
	}
	if json.Unmarshal(update, &u) != nil || u.SessionUpdate == "" {
		return "session_update"
	}
	return u.SessionUpdate
}

func orNull(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || !json.Valid(raw) {
		return json.RawMessage("null")
	}
	return raw
}

func parseTimestamp(s string, fallback time.Time) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return fallback
	}
	return t.UTC()
}
