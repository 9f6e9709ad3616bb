package client

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// TestDecodeEvent holds every event name of every kind of stream to the Go
// value it decodes into.
func TestDecodeEvent(t *testing.T) {
	ts := time.Date(2025, 1, 2, 3, 4, 5, 5e8, time.UTC)
	two := int32(2)
	outputJSON := `{"seq":5,"stream":"stdout","data":"héllo","encoding":"utf8","ts":"2025-01-02T03:04:05.5Z"}`
	cases := []struct {
		name  string
		kind  streamKind
		typ   string
		data  string
		want  Event
		final bool
		err   bool
	}{
		// Output, in every stream that carries it.
		{"exec stdout", execStream, "stdout", outputJSON, &Output{Seq: 5, Stream: Stdout, Data: []byte("héllo"), Time: ts}, false, false},
		{"process stderr base64", processStream, "stderr", `{"seq":6,"stream":"stderr","data":"AAH/","encoding":"base64","ts":"2025-01-02T03:04:05.5Z"}`,
			&Output{Seq: 6, Stream: Stderr, Data: []byte{0, 1, 0xff}, Time: ts}, false, false},
		{"shell stdout", shellStream, "stdout", outputJSON, &Output{Seq: 5, Stream: Stdout, Data: []byte("héllo"), Time: ts}, false, false},
		{"output without a stream field", processStream, "stderr", `{"seq":1,"data":"x"}`, &Output{Seq: 1, Stream: Stderr, Data: []byte("x")}, false, false},
		{"unknown encoding", processStream, "stdout", `{"data":"x","encoding":"rot13"}`, nil, false, true},
		{"bad base64", execStream, "stdout", `{"data":"!!","encoding":"base64"}`, nil, false, true},
		// Gaps, in every stream that has them.
		{"process gap", processStream, "gap", `{"from":3,"to":9}`, &Gap{From: 3, To: 9}, false, false},
		{"shell gap", shellStream, "gap", `{"from":1,"to":2}`, &Gap{From: 1, To: 2}, false, false},
		{"vm gap", vmStream, "gap", `{"from":4,"to":4}`, &Gap{From: 4, To: 4}, false, false},
		// Exits.
		{"process exit by signal", processStream, "exit", `{"exitCode":137,"signal":"SIGKILL"}`,
			&Exit{ExitStatus: ExitStatus{ExitCode: 137, Signal: SIGKILL}}, true, false},
		{"exec exit", execStream, "exit", `{"exitCode":0,"signal":null,"truncated":true,"durationMs":12}`,
			&Exit{Truncated: true, Duration: 12 * time.Millisecond}, true, false},
		{"shell end", shellStream, "end", `{"exitCode":3}`, &ShellEnd{ExitStatus: ExitStatus{ExitCode: 3}}, true, false},
		{"bad exit", processStream, "exit", `{"exitCode":"x"}`, nil, true, true},
		// A shell's and a process's foreign events.
		{"process end is unknown", processStream, "end", `{}`, &UnknownEvent{Type: "end", Data: json.RawMessage(`{}`)}, false, false},
		{"shell exit is unknown", shellStream, "exit", `{"exitCode":1}`, &UnknownEvent{Type: "exit", Data: json.RawMessage(`{"exitCode":1}`)}, false, false},
		{"exec future event", execStream, "progress", `{"pct":5}`, &UnknownEvent{Type: "progress", Data: json.RawMessage(`{"pct":5}`)}, false, false},
		// VM events.
		{"vm state", vmStream, "state", `{"type":"state","time":"2025-01-02T03:04:05.5Z","state":"lost","reason":"sidecar died"}`,
			&VMEvent{Type: VMEventState, Time: ts, State: VMLost, Reason: "sidecar died"}, false, false},
		{"vm process exit", vmStream, "process_exit", `{"type":"process_exit","time":"2025-01-02T03:04:05.5Z","pid":7,"exit":{"exitCode":1}}`,
			&VMEvent{Type: VMEventProcessExit, Time: ts, Pid: 7, Exit: &ExitStatus{ExitCode: 1}}, false, false},
		{"vm limit warning without a type field", vmStream, "limit_warning", `{"name":"memory","detail":{"used":"90%"}}`,
			&VMEvent{Type: VMEventLimitWarning, Name: "memory", Detail: map[string]string{"used": "90%"}}, false, false},
		{"vm stdout is a vm event", vmStream, "stdout", `{"type":"structured","name":"x"}`, &VMEvent{Type: VMEventStructured, Name: "x"}, false, false},
		{"bad vm event", vmStream, "state", `[1]`, nil, false, true},
		// Session events.
		{"durable", sessionStream, "durable", `{"sequence":6,"timestamp":"2025-01-02T03:04:05.5Z","type":"agent_message_chunk","update":{"a":1}}`,
			&SessionEvent{Sequence: 6, Timestamp: ts, Type: "agent_message_chunk", Update: json.RawMessage(`{"a":1}`)}, false, false},
		{"ephemeral", sessionStream, "ephemeral", `{"afterSequence":6,"type":"agent_message_chunk","update":{"b":2}}`,
			&EphemeralEvent{AfterSequence: 6, Type: "agent_message_chunk", Update: json.RawMessage(`{"b":2}`)}, false, false},
		{"agent stderr", sessionStream, "agent_stderr", `{"agentType":"pi","processId":"p1","text":"warn\n"}`,
			&AgentStderr{AgentType: "pi", ProcessID: "p1", Text: "warn\n"}, false, false},
		{"agent exit", sessionStream, "agent_exit", `{"agentType":"pi","processId":"p1","exitCode":2,"restart":"yes"}`,
			&AgentExit{AgentType: "pi", ProcessID: "p1", ExitCode: &two, Restart: "yes"}, false, false},
		{"agent exit by signal", sessionStream, "agent_exit", `{"agentType":"pi","processId":"p1","exitCode":null,"restart":"no"}`,
			&AgentExit{AgentType: "pi", ProcessID: "p1", Restart: "no"}, false, false},
		{"overflow", sessionStream, "overflow", `{"reason":"slow client"}`, &Overflow{Reason: "slow client"}, false, false},
		{"lost, on any stream", processStream, "lost", `{"code":"conflict","detail":"the VM is lost","state":"lost","node":"n2"}`,
			&Lost{Code: CodeConflict, Detail: "the VM is lost", State: VMLost, Node: "n2"}, true, false},
		{"session end", sessionStream, "end", `{"state":"deleted"}`, &SessionEnd{State: SessionDeleted}, true, false},
		{"session stdout is unknown", sessionStream, "stdout", `{"data":"x"}`, &UnknownEvent{Type: "stdout", Data: json.RawMessage(`{"data":"x"}`)}, false, false},
		{"session message is unknown", sessionStream, "message", `not json`, &UnknownEvent{Type: "message", Data: json.RawMessage(`not json`)}, false, false},
		{"bad durable", sessionStream, "durable", `{"sequence":"x"}`, nil, false, true},
		{"bad ephemeral", sessionStream, "ephemeral", `{`, nil, false, true},
		{"bad agent stderr", sessionStream, "agent_stderr", `1`, nil, false, true},
		{"bad agent exit", sessionStream, "agent_exit", `{"exitCode":"x"}`, nil, false, true},
		{"bad overflow", sessionStream, "overflow", `[]`, nil, false, true},
		{"bad session end", sessionStream, "end", `{"state":1}`, nil, true, true},
		{"bad gap", sessionStream, "gap", `{"from":-1}`, nil, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ev, final, err := decodeEvent(tc.kind, tc.typ, []byte(tc.data))
			if (err != nil) != tc.err {
				t.Fatalf("err %v, want error %v", err, tc.err)
			}
			if final != tc.final {
				t.Errorf("final %v, want %v", final, tc.final)
			}
			if tc.err {
				if _, isGateway := err.(*Error); isGateway {
					t.Errorf("a decoding failure is an *Error: %v", err)
				}
				return
			}
			if !reflect.DeepEqual(ev, tc.want) {
				t.Errorf("event %#v, want %#v", ev, tc.want)
			}
		})
	}
}

// TestDecodeErrorEvent checks that a final error event of any stream is an
// *Error with Status 0, never an Event.
func TestDecodeErrorEvent(t *testing.T) {
	for _, k := range []streamKind{execStream, processStream, shellStream, vmStream, sessionStream} {
		ev, final, err := decodeEvent(k, "error", []byte(`{"code":"conflict","detail":"the VM is lost"}`))
		e, ok := err.(*Error)
		if ev != nil || !final || !ok || e.Status != 0 || e.Code != CodeConflict || e.Detail != "the VM is lost" {
			t.Fatalf("kind %d: %v, %v, %#v", k, ev, final, err)
		}
		if e.Error() != "agentos-gateway: conflict: the VM is lost" {
			t.Fatalf("message %q", e.Error())
		}
		// No code: internal.
		_, _, err = decodeEvent(k, "error", []byte(`{"detail":"?"}`))
		if CodeOf(err) != CodeInternal {
			t.Fatalf("kind %d: code of %v", k, err)
		}
		// Not JSON: a final decoding failure.
		ev, final, err = decodeEvent(k, "error", []byte(`nope`))
		if _, isGateway := err.(*Error); ev != nil || !final || err == nil || isGateway {
			t.Fatalf("kind %d: %v, %v, %v", k, ev, final, err)
		}
	}
}
