package client

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
)

// Event is an interface holding one event of a stream, decoded: one of
// *Output, *Gap, *Exit, *ShellEnd, *VMEvent, *SessionEvent,
// *EphemeralEvent, *AgentStderr, *AgentExit, *Overflow, *SessionEnd, *Lost,
// *FileChange, *Resync, or *UnknownEvent for an event this client does not
// know. Consume events
// with a type switch:
//
//	switch ev := ev.(type) {
//	case *client.Output:
//		os.Stdout.Write(ev.Data)
//	case *client.Exit:
//		fmt.Println("exit", ev.ExitCode)
//	}
//
// A final "error" event is not an Event: Stream.Next and the Follow
// iterators return it as an *Error.
type Event any

// SSE event names of the gateway's streams.
const (
	eventStdout      = "stdout"
	eventStderr      = "stderr"
	eventExit        = "exit"
	eventGap         = "gap"
	eventEnd         = "end"
	eventError       = "error"
	eventDurable     = "durable"
	eventEphemeral   = "ephemeral"
	eventAgentStderr = "agent_stderr"
	eventAgentExit   = "agent_exit"
	eventOverflow    = "overflow"
	eventLost        = "lost"
)

// OutputStream names the stream a piece of output came from.
type OutputStream string

// The output streams.
const (
	Stdout OutputStream = "stdout"
	Stderr OutputStream = "stderr"
)

// Output is a piece of a process's, a command's or a shell's output.
type Output struct {
	// Seq is the output's sequence number (also the event id).
	Seq    uint64
	Stream OutputStream
	// Data is the raw bytes, decoded from base64 when they travelled so.
	Data []byte
	// Time is when the engine read the bytes.
	Time time.Time
}

// Gap says that output (or VM events) with sequence numbers From..To was
// dropped from the gateway's bounded buffer before this client read it.
type Gap = api.GapEvent

// Exit is the final event of a process's or a command's output. Truncated
// and Duration are set by a streamed exec only.
type Exit struct {
	ExitStatus
	// Truncated is set when output beyond the exec's MaxOutputBytes was
	// dropped.
	Truncated bool
	Duration  time.Duration
}

// ShellEnd is the final event of a shell's output: its exit status.
type ShellEnd struct {
	ExitStatus
}

// SessionEnd is the final event of a session's stream: its VM ended
// (closed, lost) or it was deleted.
type SessionEnd = gateway.SessionEndEvent

// AgentStderr is output an agent process wrote to its standard error.
type AgentStderr = gateway.AgentStderrEvent

// AgentExit says that an agent process exited, and what the engine does
// about it.
type AgentExit = gateway.AgentExitEvent

// Overflow says that the client fell behind and streamed deltas were
// dropped; the missed durable events follow from the store.
type Overflow = gateway.OverflowEvent

// Lost ends a stream that a gateway node proxied from the node running the
// VM, when that node died: the VM is lost (State), with the node that ran
// it. Any stream may end so when the gateway runs as several nodes.
type Lost = api.LostEvent

// UnknownEvent is an event this client does not know, as it came.
type UnknownEvent struct {
	Type string
	Data json.RawMessage
}

// streamKind tells the streams apart where one event name means different
// things: a shell's "end" carries an exit status, a session's its state.
type streamKind int

const (
	execStream streamKind = iota
	processStream
	shellStream
	vmStream
	sessionStream
	watchStream
)

// decodeEvent turns one Server-Sent Event of a stream of kind k into its
// Event. An "error" event is returned as the *Error it carries, with final
// set.
func decodeEvent(k streamKind, typ string, data []byte) (ev Event, final bool, err error) {
	unmarshal := func(v any) error {
		if err := json.Unmarshal(data, v); err != nil {
			return fmt.Errorf("client: decode %q event: %w", typ, err)
		}
		return nil
	}
	switch {
	case typ == eventError:
		var w api.ErrorEvent
		if err := unmarshal(&w); err != nil {
			return nil, true, err
		}
		if w.Code == "" {
			w.Code = CodeInternal
		}
		return nil, true, &Error{Code: w.Code, Detail: w.Detail}
	case typ == eventLost:
		var v Lost
		if err := unmarshal(&v); err != nil {
			return nil, true, err
		}
		return &v, true, nil
	case typ == eventGap:
		var g Gap
		if err := unmarshal(&g); err != nil {
			return nil, false, err
		}
		return &g, false, nil
	case k == watchStream:
		return decodeWatchEvent(typ, data, unmarshal)
	case k != vmStream && k != sessionStream && (typ == eventStdout || typ == eventStderr):
		var w api.OutputEvent
		if err := unmarshal(&w); err != nil {
			return nil, false, err
		}
		b, err := decodeData(w.Data, w.Encoding)
		if err != nil {
			return nil, false, fmt.Errorf("client: decode %q event: %w", typ, err)
		}
		if w.Stream == "" {
			w.Stream = typ
		}
		return &Output{Seq: w.Seq, Stream: OutputStream(w.Stream), Data: b, Time: w.TS}, false, nil
	case (k == execStream || k == processStream) && typ == eventExit,
		k == shellStream && typ == eventEnd:
		// The exec's exit event is the process's with two fields more.
		var w api.ExecExitEvent
		if err := unmarshal(&w); err != nil {
			return nil, true, err
		}
		st := ExitStatus{ExitCode: w.ExitCode}
		if w.Signal != nil {
			st.Signal = *w.Signal
		}
		if typ == eventEnd {
			return &ShellEnd{ExitStatus: st}, true, nil
		}
		return &Exit{ExitStatus: st, Truncated: w.Truncated, Duration: time.Duration(w.DurationMs) * time.Millisecond}, true, nil
	case k == vmStream:
		var v VMEvent
		if err := unmarshal(&v); err != nil {
			return nil, false, err
		}
		if v.Type == "" {
			v.Type = VMEventType(typ)
		}
		return &v, false, nil
	case k == sessionStream:
		return decodeSessionEvent(typ, data, unmarshal)
	}
	return &UnknownEvent{Type: typ, Data: json.RawMessage(data)}, false, nil
}

func decodeSessionEvent(typ string, data []byte, unmarshal func(any) error) (Event, bool, error) {
	switch typ {
	case eventDurable:
		var v SessionEvent
		return &v, false, unmarshal(&v)
	case eventEphemeral:
		var v EphemeralEvent
		return &v, false, unmarshal(&v)
	case eventAgentStderr:
		var v AgentStderr
		return &v, false, unmarshal(&v)
	case eventAgentExit:
		var v AgentExit
		return &v, false, unmarshal(&v)
	case eventOverflow:
		var v Overflow
		return &v, false, unmarshal(&v)
	case eventEnd:
		var v SessionEnd
		return &v, true, unmarshal(&v)
	}
	return &UnknownEvent{Type: typ, Data: json.RawMessage(data)}, false, nil
}

func decodeWatchEvent(typ string, data []byte, unmarshal func(any) error) (Event, bool, error) {
	switch typ {
	case eventCreate, eventModify, eventDelete, eventRename:
		var v FileChange
		if err := unmarshal(&v); err != nil {
			return nil, false, err
		}
		if v.Type == "" {
			v.Type = typ
		}
		return &v, false, nil
	case eventResync:
		var v Resync
		return &v, false, unmarshal(&v)
	}
	return &UnknownEvent{Type: typ, Data: json.RawMessage(data)}, false, nil
}

// decodeData decodes output or file data that travelled in encoding.
func decodeData(s, encoding string) ([]byte, error) {
	switch encoding {
	case "", "utf8":
		return []byte(s), nil
	case "base64":
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("invalid base64 data: %w", err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("unknown data encoding %q", encoding)
}
