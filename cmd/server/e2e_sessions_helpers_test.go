package main

// Machinery of the agent-session end-to-end tests: a VM that can run an
// agent and reach the mock Anthropic API on loopback, and a reader of a
// session's event stream that keeps what it saw.

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
	"github.com/agentos-gateway/agentos-gateway/internal/apispec"
	"github.com/agentos-gateway/agentos-gateway/internal/mockanthropic"
)

// turnTimeout bounds one agent turn, opening included (pi's open takes ~3 s
// on two shared cores). claude-code's first turn that runs a Bash command
// sometimes ends tens of seconds after its last event (up to 75 s seen),
// with no request to the model meanwhile: time spent inside the VM.
const turnTimeout = 150 * time.Second

// agentVM creates a VM that can run agent and reach mock, through c.
func (e *e2e) agentVM(c *client.Client, mock *mockanthropic.Server, agents ...string) *client.VM {
	e.t.Helper()
	return e.vm(c, client.CreateVMRequest{Agents: agents, LoopbackExemptPorts: []uint16{uint16(mock.Port())}})
}

// sessionFeed reads a session's event stream on a goroutine of its own and
// keeps every event, each checked against the spec.
type sessionFeed struct {
	req    *http.Request
	stream *client.Stream
	done   chan struct{}

	mu   sync.Mutex
	evs  []event
	err  error // why the stream ended
	next int   // until's read position
}

// follow opens a session's event stream after lastID ("" from the start).
func (e *e2e) follow(t testing.TB, c *client.Client, vm, session, lastID string) *sessionFeed {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := c.VM(vm).Session(session).Events(ctx, client.StreamOptions{LastEventID: lastID})
	if err != nil {
		cancel()
		t.Fatalf("open session events: %v", err)
	}
	f := &sessionFeed{req: e.eventReq("GET", "/v1/vms/"+vm+"/sessions/"+session+"/events"), stream: s, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		defer cancel()
		for {
			ev, err := next(ctx, s)
			f.mu.Lock()
			if err != nil {
				f.err = err
				f.mu.Unlock()
				return
			}
			f.evs = append(f.evs, ev)
			f.mu.Unlock()
			if err := apispec.CheckEvent(e.doc, f.req, ev.Type, ev.Data); err != nil {
				e.t.Errorf("session event does not match openapi.yaml: %v", err)
			}
		}
	}()
	t.Cleanup(f.close)
	return f
}

// close ends the stream and waits for its reader.
func (f *sessionFeed) close() {
	_ = f.stream.Close()
	<-f.done
}

// until returns the first event after the previous until's that satisfies
// pred, failing the test after d or when the stream ends first.
func (f *sessionFeed) until(t testing.TB, d time.Duration, what string, pred func(event) bool) event {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		f.mu.Lock()
		for f.next < len(f.evs) {
			ev := f.evs[f.next]
			f.next++
			if pred(ev) {
				f.mu.Unlock()
				return ev
			}
		}
		err := f.err
		f.mu.Unlock()
		if err != nil {
			t.Fatalf("session stream ended (%v) before %s: %s", err, what, summarize(f.events()))
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %s", d, what, summarize(f.events()))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// durableUntil waits for the durable event of sequence seq.
func (f *sessionFeed) durableUntil(t testing.TB, d time.Duration, seq uint64) {
	t.Helper()
	f.mu.Lock()
	f.next = 0
	f.mu.Unlock()
	f.until(t, d, "durable event "+itoa(seq), func(ev event) bool {
		se, err := ev.SessionEvent()
		return err == nil && se.Sequence == seq
	})
}

// ended waits for the stream to end, and returns why (io.EOF after a
// final event closed it).
func (f *sessionFeed) ended(t testing.TB, d time.Duration) error {
	t.Helper()
	select {
	case <-f.done:
	case <-time.After(d):
		t.Fatalf("session stream did not end: %s", summarize(f.events()))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

func (f *sessionFeed) events() []event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]event(nil), f.evs...)
}

// durable returns the durable events seen so far.
func (f *sessionFeed) durable(t testing.TB) []client.SessionEvent {
	t.Helper()
	var out []client.SessionEvent
	for _, ev := range f.events() {
		if ev.Type != "durable" {
			continue
		}
		se, err := ev.SessionEvent()
		if err != nil {
			t.Fatal(err)
		}
		if ev.ID != itoa(se.Sequence) {
			t.Fatalf("durable event %d has id %q", se.Sequence, ev.ID)
		}
		out = append(out, se)
	}
	return out
}

// sequences returns the sequences of events.
func sequences(evs []client.SessionEvent) []uint64 {
	out := make([]uint64, len(evs))
	for i, e := range evs {
		out[i] = e.Sequence
	}
	return out
}

// wantSequence fails unless seqs is exactly from, from+1, ..., to.
func wantSequence(t testing.TB, seqs []uint64, from, to uint64) {
	t.Helper()
	if uint64(len(seqs)) != to-from+1 {
		t.Fatalf("sequences %v, want %d..%d", seqs, from, to)
	}
	for i, s := range seqs {
		if s != from+uint64(i) {
			t.Fatalf("sequences %v, want %d..%d", seqs, from, to)
		}
	}
}

// update is the part of an ACP session/update the tests look at.
type update struct {
	SessionUpdate string          `json:"sessionUpdate"`
	Content       json.RawMessage `json:"content"`
	ToolCallID    string          `json:"toolCallId"`
	Status        string          `json:"status"`
}

func parseUpdate(t testing.TB, raw json.RawMessage) update {
	t.Helper()
	var u update
	if err := json.Unmarshal(raw, &u); err != nil {
		t.Fatalf("update %s: %v", raw, err)
	}
	return u
}

// text returns the text of a chunk update's content block.
func (u update) text() string {
	var c struct{ Type, Text string }
	_ = json.Unmarshal(u.Content, &c)
	return c.Text
}

// messageText concatenates the text blocks of a prompt result's message.
func messageText(t testing.TB, raw json.RawMessage) string {
	t.Helper()
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var m struct {
		Content []struct{ Type, Text string }
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("message %s: %v", raw, err)
	}
	var b strings.Builder
	for _, c := range m.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

func toolPrompt(tool, command string) json.RawMessage {
	input, _ := json.Marshal(map[string]string{"command": command, "description": "x"})
	return client.TextPrompt("RUN_TOOL:" + tool + ":" + string(input))
}

// endState returns the state of a stream's final end event.
func endState(t testing.TB, evs []event) client.SessionState {
	t.Helper()
	if len(evs) == 0 || evs[len(evs)-1].Type != "end" {
		t.Fatalf("stream did not end with an end event: %s", summarize(evs))
	}
	var end struct{ State client.SessionState }
	if err := evs[len(evs)-1].Decode(&end); err != nil {
		t.Fatal(err)
	}
	return end.State
}

// streamEnded reports whether err is a stream's clean end.
func streamEnded(err error) bool { return errors.Is(err, io.EOF) }

// mockRequests counts the mock's message requests.
func mockRequests(mock *mockanthropic.Server) int {
	n := 0
	for _, r := range mock.Requests() {
		if r.Path == "/v1/messages" {
			n++
		}
	}
	return n
}

// optionOf returns the id of the first option of kind of a permission
// request's raw options, or "".
func optionOf(t testing.TB, raw json.RawMessage, kind string) string {
	t.Helper()
	opts, err := client.PermissionOptions(raw)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range opts {
		if o.Kind == kind {
			return o.OptionID
		}
	}
	return ""
}
