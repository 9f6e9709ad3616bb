package client

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"
)

// Event is an interface holding one event of a stream, decoded: one of
// *Output, *Gap, *Exit, *ShellEnd, *VMEvent, *SessionEvent,
// *EphemeralEvent, *AgentStderr, *AgentExit, *Overflow, *SessionEnd, or
// *UnknownEvent for an event this client does not know. Consume events
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
type Gap struct {
	From, To uint64
}

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

// SessionEnd is the final event of a session's stream: the VM ended
// (closed, lost) or the session was deleted.
type SessionEnd struct {
	State SessionState
}

// AgentStderr is output an agent process wrote to its standard error.
type AgentStderr struct {
	AgentType string
	ProcessID string
	Text      string
}

// AgentExit says that an agent process exited, and what the engine does
// about it.
type AgentExit struct {
	AgentType string
	ProcessID string
	// ExitCode is nil when it is not known (the agent was killed by a
	// signal).
	ExitCode *int
	Restart  string
}

// Overflow says that the client fell behind and streamed deltas were
// dropped; the missed durable events follow from the store.
type Overflow struct {
	Reason string
}

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
)

// wireOutput is the data of stdout and stderr events.
type wireOutput struct {
	Seq      uint64       `json:"seq"`
	Stream   OutputStream `json:"stream"`
	Data     string       `json:"data"`
	Encoding string       `json:"encoding"`
	TS       time.Time    `json:"ts"`
}

// wireExit is the data of exit events (and of a shell's end event).
type wireExit struct {
	ExitCode   int    `json:"exitCode"`
	Signal     Signal `json:"signal"`
	Truncated  bool   `json:"truncated"`
	DurationMs int64  `json:"durationMs"`
}

// wireError is the data of a final error event.
type wireError struct {
	Code   Code   `json:"code"`
	Detail string `json:"detail"`
}

// wireGap is the data of gap events.
type wireGap struct {
	From uint64 `json:"from"`
	To   uint64 `json:"to"`
}

// wireAgentStderr is the data of agent_stderr events.
type wireAgentStderr struct {
	AgentType string `json:"agentType"`
	ProcessID string `json:"processId"`
	Text      string `json:"text"`
}

// wireAgentExit is the data of agent_exit events.
type wireAgentExit struct {
	AgentType string `json:"agentType"`
	ProcessID string `json:"processId"`
	ExitCode  *int   `json:"exitCode"`
	Restart   string `json:"restart"`
}

// wireOverflow is the data of overflow events.
type wireOverflow struct {
	Reason string `json:"reason"`
}

// wireSessionEnd is the data of a session's end event.
type wireSessionEnd struct {
	State SessionState `json:"state"`
}

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
		var w wireError
		if err := unmarshal(&w); err != nil {
			return nil, true, err
		}
		if w.Code == "" {
			w.Code = CodeInternal
		}
		return nil, true, &Error{Code: w.Code, Detail: w.Detail}
	case typ == eventGap:
		var g wireGap
		if err := unmarshal(&g); err != nil {
			return nil, false, err
		}
		return &Gap{From: g.From, To: g.To}, false, nil
	case k != vmStream && k != sessionStream && (typ == eventStdout || typ == eventStderr):
		var w wireOutput
		if err := unmarshal(&w); err != nil {
			return nil, false, err
		}
		b, err := decodeData(w.Data, w.Encoding)
		if err != nil {
			return nil, false, fmt.Errorf("client: decode %q event: %w", typ, err)
		}
		if w.Stream == "" {
			w.Stream = OutputStream(typ)
		}
		return &Output{Seq: w.Seq, Stream: w.Stream, Data: b, Time: w.TS}, false, nil
	case (k == execStream || k == processStream) && typ == eventExit,
		k == shellStream && typ == eventEnd:
		var w wireExit
		if err := unmarshal(&w); err != nil {
			return nil, true, err
		}
		st := ExitStatus{ExitCode: w.ExitCode, Signal: w.Signal}
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
		var w wireAgentStderr
		err := unmarshal(&w)
		return &AgentStderr{AgentType: w.AgentType, ProcessID: w.ProcessID, Text: w.Text}, false, err
	case eventAgentExit:
		var w wireAgentExit
		err := unmarshal(&w)
		return &AgentExit{AgentType: w.AgentType, ProcessID: w.ProcessID, ExitCode: w.ExitCode, Restart: w.Restart}, false, err
	case eventOverflow:
		var w wireOverflow
		err := unmarshal(&w)
		return &Overflow{Reason: w.Reason}, false, err
	case eventEnd:
		var w wireSessionEnd
		err := unmarshal(&w)
		return &SessionEnd{State: w.State}, true, err
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
