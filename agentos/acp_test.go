package agentos

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/internal/mockanthropic"
)

// These tests run real agents (pi, claude-code) in real VMs against the
// scripted mock of the Anthropic Messages API on host loopback
// (/work/shared/recipes/offline-agent-sessions.md). Opening an agent costs
// seconds and disposing a VM that ran one costs 5 s, so each test keeps one
// VM and one session across its subtests; the subtests depend on each other
// and a failing step stops the test.

// newAgentVM creates a VM that can run agent and reach mock.
func newAgentVM(t *testing.T, mock *mockanthropic.Server, agent string) *VM {
	t.Helper()
	s := sharedSidecar(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	vm, err := s.CreateVM(ctx, VMOptions{Agents: []string{agent}, LoopbackExemptPorts: []uint16{uint16(mock.Port())}})
	if err != nil {
		t.Fatalf("create vm: %v\n%s", err, s.Stderr())
	}
	t.Cleanup(func() { disposeAgentVM(t, vm) })
	return vm
}

// disposeAgentVM disposes a VM that ran an agent: Dispose must succeed even
// though the pinned sidecar reports a teardown deadline for such VMs.
func disposeAgentVM(t *testing.T, vm *VM) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := vm.Dispose(ctx); err != nil {
		t.Errorf("dispose: %v", err)
	}
	if st, _ := vm.State(); st != VMDisposed {
		t.Errorf("state after dispose = %s", st)
	}
}

func textPrompt(text string) json.RawMessage {
	b, err := json.Marshal([]map[string]string{{"type": "text", "text": text}})
	if err != nil {
		panic(err)
	}
	return b
}

// update is the part of an ACP session/update the tests look at.
type update struct {
	SessionUpdate string          `json:"sessionUpdate"`
	Content       json.RawMessage `json:"content"`
	ToolCallID    string          `json:"toolCallId"`
	Status        string          `json:"status"`
	Title         string          `json:"title"`
	RawInput      json.RawMessage `json:"rawInput"`
}

func parseUpdate(t *testing.T, e SessionEvent) update {
	t.Helper()
	var u update
	if err := json.Unmarshal(e.Update, &u); err != nil {
		t.Fatalf("event %d: update %s: %v", e.Sequence, e.Update, err)
	}
	return u
}

// text returns the text of a chunk update's content block.
func (u update) text() string {
	var c struct{ Type, Text string }
	_ = json.Unmarshal(u.Content, &c)
	return c.Text
}

func updateType(e SessionEvent) string {
	var u update
	_ = json.Unmarshal(e.Update, &u)
	return u.SessionUpdate
}

// messageText concatenates the text blocks of a prompt result's message.
func messageText(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var m struct {
		Role    string `json:"role"`
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

// feed reads a session subscription and keeps what it saw.
type feed struct {
	sub       *Subscription[SessionEvent]
	durable   []SessionEvent
	ephemeral []SessionEvent
	stderr    int
}

func newFeed(t *testing.T, s *Session) *feed {
	f := &feed{sub: s.Subscribe(4096)}
	t.Cleanup(f.sub.Close)
	return f
}

func (f *feed) lastSeq() uint64 {
	if len(f.durable) == 0 {
		return 0
	}
	return f.durable[len(f.durable)-1].Sequence
}

// until reads events until pred accepts one, which it returns.
func (f *feed) until(t *testing.T, timeout time.Duration, what string, pred func(SessionEvent) bool) SessionEvent {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case e, ok := <-f.sub.C():
			if !ok {
				t.Fatalf("subscription ended (err %v) while waiting for %s", f.sub.Err(), what)
			}
			switch e.Kind {
			case "durable":
				if want := f.lastSeq() + 1; len(f.durable) > 0 && e.Sequence != want {
					t.Errorf("durable sequence %d after %d: want %d (no gaps)", e.Sequence, f.lastSeq(), want)
				}
				f.durable = append(f.durable, e)
			case "ephemeral":
				f.ephemeral = append(f.ephemeral, e)
			case "agent_stderr":
				f.stderr++
			}
			if pred(e) {
				return e
			}
		case <-timer.C:
			t.Fatalf("no %s within %v (last durable sequence %d)", what, timeout, f.lastSeq())
		}
	}
}

// sync reads events up to the session's latest durable sequence.
func (f *feed) sync(t *testing.T, ctx context.Context, s *Session) uint64 {
	t.Helper()
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatalf("info: %v", err)
	}
	if f.lastSeq() < info.LatestSequence {
		f.until(t, 20*time.Second, fmt.Sprintf("durable event %d", info.LatestSequence), func(e SessionEvent) bool {
			return e.Kind == "durable" && e.Sequence >= info.LatestSequence
		})
	}
	return info.LatestSequence
}

// since returns the durable events after sequence seq.
func (f *feed) since(seq uint64) []SessionEvent {
	i := slices.IndexFunc(f.durable, func(e SessionEvent) bool { return e.Sequence > seq })
	if i < 0 {
		return nil
	}
	return f.durable[i:]
}

// sameJSON compares two JSON texts by value.
func sameJSON(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

func asACPError(t *testing.T, err error, code string) *ACPError {
	t.Helper()
	var ae *ACPError
	if !errors.As(err, &ae) {
		t.Fatalf("err = %v (%T), want *ACPError %s", err, err, code)
	}
	if ae.Code != code || ae.Message == "" {
		t.Fatalf("ACPError = %+v, want code %s", ae, code)
	}
	return ae
}

// countRequests counts the model requests whose last block is text.
func countRequests(mock *mockanthropic.Server, text string) int {
	n := 0
	for _, r := range mock.Requests() {
		if r.LastBlockType == "text" && r.LastText == text {
			n++
		}
	}
	return n
}

type promptOutcome struct {
	res PromptResult
	err error
	at  time.Time
}

// promptAsync runs Prompt in a goroutine; the test waits for its outcome.
func promptAsync(ctx context.Context, s *Session, text string) <-chan promptOutcome {
	ch := make(chan promptOutcome, 1)
	go func() {
		r, err := s.Prompt(ctx, textPrompt(text), "")
		ch <- promptOutcome{r, err, time.Now()}
	}()
	return ch
}

func waitPrompt(t *testing.T, ch <-chan promptOutcome, timeout time.Duration) promptOutcome {
	t.Helper()
	select {
	case o := <-ch:
		if o.err != nil {
			t.Fatalf("prompt: %v", o.err)
		}
		return o
	case <-time.After(timeout):
		t.Fatalf("prompt did not return within %v", timeout)
	}
	panic("unreachable")
}

// TestACPSessionPi drives one pi session through the whole session API.
func TestACPSessionPi(t *testing.T) {
	mock := mockanthropic.Start(t)
	vm := newAgentVM(t, mock, "pi")
	ctx := testContext(t, 3*time.Minute)
	const sid = "pi-session-1"
	parent := t
	var s *Session
	var f *feed
	step := func(name string, fn func(t *testing.T)) {
		start := time.Now()
		ok := t.Run(name, fn)
		t.Logf("%-22s %v", name, time.Since(start).Round(time.Millisecond))
		if !ok {
			t.FailNow()
		}
	}

	step("ListAgents", func(t *testing.T) {
		agents, err := vm.ListAgents(ctx)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(agents, func(a AgentEntry) bool { return a.ID == "pi" })
		if i < 0 || !agents[i].Installed || agents[i].AdapterEntrypoint == "" {
			t.Fatalf("agents = %+v, want pi installed", agents)
		}
	})

	step("OpenSession", func(t *testing.T) {
		var err error
		s, err = vm.OpenSession(ctx, OpenSessionOptions{SessionID: sid, Agent: "pi", Cwd: "/workspace", Env: mock.Env()})
		if err != nil {
			t.Fatal(err)
		}
		if s.ID() != sid || vm.Session(sid) != s {
			t.Fatalf("session id %q, vm.Session gives %p, want %p", s.ID(), vm.Session(sid), s)
		}
		// Subscribe before prompting: live events are not replayed. The
		// feed outlives this subtest.
		f = newFeed(parent, s)
	})

	step("CancelWithoutTurn", func(t *testing.T) {
		st, err := s.Cancel(ctx)
		if err != nil || st != "no_active_prompt" {
			t.Fatalf("Cancel = %q, %v; want no_active_prompt", st, err)
		}
	})

	step("PromptHello", func(t *testing.T) {
		res, err := s.Prompt(ctx, textPrompt("say hi"), "")
		if err != nil {
			t.Fatal(err)
		}
		if res.StopReason != "end_turn" || messageText(t, res.Message) != mockanthropic.HelloText {
			t.Fatalf("result = %s %s", res.StopReason, res.Message)
		}
		f.sync(t, ctx, s)
		if len(f.durable) != 2 {
			t.Fatalf("durable events = %d, want 2", len(f.durable))
		}
		for i, want := range []struct {
			kind, text string
		}{{"user_message_chunk", "say hi"}, {"agent_message_chunk", mockanthropic.HelloText}} {
			e := f.durable[i]
			u := parseUpdate(t, e)
			if e.Sequence != uint64(i+1) || e.SessionID != sid || e.Type != "session_update" || e.Timestamp == "" ||
				u.SessionUpdate != want.kind || u.text() != want.text {
				t.Fatalf("durable[%d] = %+v (update %s), want seq %d %s %q", i, e, e.Update, i+1, want.kind, want.text)
			}
		}
		// One ephemeral chunk per streamed delta, all after sequence 1.
		var text strings.Builder
		for _, e := range f.ephemeral {
			u := parseUpdate(t, e)
			if e.AfterSequence != 1 || e.SessionID != sid || e.Sequence != 0 || u.SessionUpdate != "agent_message_chunk" {
				t.Fatalf("ephemeral %+v (update %s)", e, e.Update)
			}
			text.WriteString(u.text())
		}
		if len(f.ephemeral) != 5 || text.String() != mockanthropic.HelloText {
			t.Fatalf("%d ephemeral events with text %q, want 5 with %q", len(f.ephemeral), text.String(), mockanthropic.HelloText)
		}
		reqs := mock.Requests()
		last := reqs[len(reqs)-1]
		if last.Path != "/v1/messages" || !last.Stream || last.APIKey != mockanthropic.APIKey || last.LastText != "say hi" ||
			last.Reply != mockanthropic.ReplyHello || !slices.Contains(last.Tools, "bash") {
			t.Fatalf("model request = %+v", last)
		}
	})

	step("ToolCall", func(t *testing.T) {
		before := f.lastSeq()
		res, err := s.Prompt(ctx, textPrompt(`RUN_TOOL:bash:{"command":"echo made-by-agent > /workspace/agent.txt"}`), "")
		if err != nil {
			t.Fatal(err)
		}
		if res.StopReason != "end_turn" || messageText(t, res.Message) != mockanthropic.DoneText {
			t.Fatalf("result = %s %s", res.StopReason, res.Message)
		}
		f.sync(t, ctx, s)
		var callID, status string
		for _, e := range f.since(before) {
			u := parseUpdate(t, e)
			switch u.SessionUpdate {
			case "tool_call":
				var in struct{ Command string }
				_ = json.Unmarshal(u.RawInput, &in)
				if callID == "" && strings.Contains(in.Command, "made-by-agent") {
					callID = u.ToolCallID
				}
			case "tool_call_update":
				if u.ToolCallID == callID && u.Status != "" {
					status = u.Status
				}
			}
		}
		if callID == "" || status != "completed" {
			t.Fatalf("tool call %q ended %q, want completed; events: %d", callID, status, len(f.since(before)))
		}
		data, err := vm.ReadFile(ctx, "/workspace/agent.txt")
		if err != nil || string(data) != "made-by-agent\n" {
			t.Fatalf("agent.txt = %q, %v", data, err)
		}
		reqs := mock.Requests()
		if n := len(reqs); n < 2 || reqs[n-2].Reply != mockanthropic.ReplyToolUse ||
			reqs[n-1].LastBlockType != "tool_result" || reqs[n-1].LastIsError || reqs[n-1].Reply != mockanthropic.ReplyDone {
			t.Fatalf("model requests = %+v", reqs)
		}
	})

	step("CancelSlowTurn", func(t *testing.T) {
		before := f.lastSeq()
		done := promptAsync(ctx, s, "please be SLOW")
		f.until(t, 30*time.Second, "the first SLOW delta", func(e SessionEvent) bool {
			return e.Kind == "ephemeral" && strings.HasPrefix(parseUpdate(t, e).text(), "slow 1.")
		})
		cancelled := time.Now()
		st, err := s.Cancel(ctx)
		if err != nil || st != "cancelled" {
			t.Fatalf("Cancel = %q, %v; want cancelled", st, err)
		}
		o := waitPrompt(t, done, 20*time.Second)
		took := o.at.Sub(cancelled)
		text := messageText(t, o.res.Message)
		if o.res.StopReason != "cancelled" || !strings.HasPrefix(text, "slow 1.") || strings.Contains(text, "slow 40.") {
			t.Fatalf("result = %s %q", o.res.StopReason, text)
		}
		// The whole SLOW reply takes 10 s.
		if took > 5*time.Second {
			t.Fatalf("prompt returned %v after Cancel", took)
		}
		t.Logf("cancelled turn returned %v after Cancel with %q", took.Round(time.Millisecond), text)
		if st, err := s.Cancel(ctx); err != nil || st != "no_active_prompt" {
			t.Fatalf("second Cancel = %q, %v; want no_active_prompt", st, err)
		}
		f.sync(t, ctx, s)
		if evs := f.since(before); len(evs) == 0 || updateType(evs[0]) != "user_message_chunk" {
			t.Fatalf("durable events of the cancelled turn: %+v", evs)
		}
	})

	step("History", func(t *testing.T) {
		latest := f.sync(t, ctx, s)
		if latest < 6 {
			t.Fatalf("latest sequence %d, want at least 6 for paging", latest)
		}
		all, err := s.History(ctx, HistoryQuery{})
		if err != nil {
			t.Fatal(err)
		}
		if all.HasMoreBefore || all.HasMoreAfter || len(all.Events) != len(f.durable) {
			t.Fatalf("history: %d events (before %v, after %v), live saw %d", len(all.Events), all.HasMoreBefore, all.HasMoreAfter, len(f.durable))
		}
		for i, h := range all.Events {
			l := f.durable[i]
			if h.Kind != "durable" || h.Sequence != uint64(i+1) || h.SessionID != l.SessionID || h.Sequence != l.Sequence ||
				h.Timestamp != l.Timestamp || h.Type != l.Type || !sameJSON(h.Update, l.Update) || h.RequestID != l.RequestID {
				t.Fatalf("history[%d] = %+v\nlive = %+v", i, h, l)
			}
		}
		u64 := func(v uint64) *uint64 { return &v }
		seqs := func(p HistoryPage) []uint64 {
			var out []uint64
			for _, e := range p.Events {
				out = append(out, e.Sequence)
			}
			return out
		}
		for _, tc := range []struct {
			name          string
			q             HistoryQuery
			want          []uint64
			before, after bool
		}{
			{"after 1 limit 2", HistoryQuery{After: u64(1), Limit: 2}, []uint64{2, 3}, true, true},
			{"before 3", HistoryQuery{Before: u64(3)}, []uint64{1, 2}, false, true},
			{"before 3 limit 1", HistoryQuery{Before: u64(3), Limit: 1}, []uint64{2}, true, true},
			// Without a cursor a limit gives the latest events.
			{"latest page", HistoryQuery{Limit: 2}, []uint64{latest - 1, latest}, true, false},
			{"after latest-2", HistoryQuery{After: u64(latest - 2)}, []uint64{latest - 1, latest}, true, false},
			{"past the end", HistoryQuery{After: u64(latest)}, nil, true, false},
		} {
			p, err := s.History(ctx, tc.q)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if got := seqs(p); !slices.Equal(got, tc.want) || p.HasMoreBefore != tc.before || p.HasMoreAfter != tc.after {
				t.Errorf("%s: sequences %v before %v after %v; want %v %v %v", tc.name, got, p.HasMoreBefore, p.HasMoreAfter, tc.want, tc.before, tc.after)
			}
		}
		_, err = s.History(ctx, HistoryQuery{After: u64(2), Before: u64(5)})
		asACPError(t, err, "invalid_history_cursor")
		// Paging forward with an after cursor walks the whole history.
		var walked []SessionEvent
		cursor := uint64(0)
		for {
			p, err := s.History(ctx, HistoryQuery{After: u64(cursor), Limit: 4})
			if err != nil {
				t.Fatal(err)
			}
			walked = append(walked, p.Events...)
			if !p.HasMoreAfter || len(p.Events) == 0 {
				break
			}
			cursor = p.Events[len(p.Events)-1].Sequence
		}
		if !reflect.DeepEqual(walked, all.Events) {
			t.Fatalf("paged walk gave %d events, want the %d of the whole history", len(walked), len(all.Events))
		}
	})

	step("IdempotentRetry", func(t *testing.T) {
		const text = "idempotent hello"
		r1, err := s.Prompt(ctx, textPrompt(text), "idem-key-1")
		if err != nil {
			t.Fatal(err)
		}
		seq1 := f.sync(t, ctx, s)
		r2, err := s.Prompt(ctx, textPrompt(text), "idem-key-1")
		if err != nil {
			t.Fatal(err)
		}
		if r1.StopReason != "end_turn" || r2.StopReason != r1.StopReason || !sameJSON(r1.Message, r2.Message) {
			t.Fatalf("retry gave %s %s, first %s %s", r2.StopReason, r2.Message, r1.StopReason, r1.Message)
		}
		if n := countRequests(mock, text); n != 1 {
			t.Fatalf("the mock saw %d model requests for the prompt, want 1", n)
		}
		if seq2 := f.sync(t, ctx, s); seq2 != seq1 {
			t.Fatalf("the retry added durable events: latest %d -> %d", seq1, seq2)
		}
	})

	step("InfoAndList", func(t *testing.T) {
		latest := f.sync(t, ctx, s)
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var state struct{ Status string }
		_ = json.Unmarshal(info.State, &state)
		if info.SessionID != sid || info.Agent != "pi" || info.Cwd != "/workspace" || info.LatestSequence != latest ||
			state.Status != "idle" || info.CreatedAt == "" || info.UpdatedAt < info.CreatedAt {
			t.Fatalf("info = %+v (state %s)", info, info.State)
		}
		list, next, err := vm.ListSessions(ctx, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(list, func(d DurableSessionInfo) bool { return d.SessionID == sid })
		if i < 0 || list[i].LatestSequence != latest || list[i].Agent != "pi" || next != "" {
			t.Fatalf("sessions = %+v, next %q", list, next)
		}
		if list, _, err := vm.ListSessions(ctx, "", 1); err != nil || len(list) != 1 {
			t.Fatalf("limit 1: %d sessions, %v", len(list), err)
		}
	})

	step("CapabilitiesAndConfig", func(t *testing.T) {
		caps, err := s.Capabilities(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var c struct {
			PromptCapabilities struct{ Image bool } `json:"promptCapabilities"`
		}
		if err := json.Unmarshal(caps, &c); err != nil || !c.PromptCapabilities.Image {
			t.Fatalf("capabilities = %s", caps)
		}
		ai, err := s.AgentInfo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var a struct{ Name, Version string }
		if err := json.Unmarshal(ai, &a); err != nil || a.Name == "" || a.Version == "" {
			t.Fatalf("agent info = %s", ai)
		}
		cfg, err := s.Config(ctx)
		if err != nil || cfg.Revision != 0 || !sameJSON(cfg.Options, json.RawMessage("[]")) {
			t.Fatalf("config = %d %s, %v", cfg.Revision, cfg.Options, err)
		}
		// pi cannot set options: the error is the agent's, surfaced as is.
		_, err = s.SetConfig(ctx, "model", json.RawMessage(`"claude-test"`))
		if ae := asACPError(t, err, "invalid_state"); !strings.Contains(ae.Message, "set_config_option") {
			t.Fatalf("SetConfig error %q does not name the method", ae.Message)
		}
		if _, err := s.SetConfig(ctx, "model", json.RawMessage(`{nope`)); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("SetConfig with bad JSON: %v", err)
		}
	})

	step("UnloadThenPrompt", func(t *testing.T) {
		if err := s.Unload(ctx); err != nil {
			t.Fatal(err)
		}
		before := f.sync(t, ctx, s)
		res, err := s.Prompt(ctx, textPrompt("hello again"), "")
		if err != nil {
			t.Fatal(err)
		}
		reqs := mock.Requests()
		last := reqs[len(reqs)-1]
		if res.StopReason != "end_turn" || messageText(t, res.Message) != mockanthropic.HelloText || last.Prompt != "hello again" {
			t.Fatalf("result = %s %s\nlast model request: %+v", res.StopReason, res.Message, last)
		}
		// The reloaded agent has no native context: agentOS prefixes the
		// prompt with a transcript of the session's recent updates.
		t.Logf("model request after reload: %d message(s), prompt text of %d bytes", last.Messages, len(last.LastText))
		// The same subscription keeps receiving, sequences go on.
		f.sync(t, ctx, s)
		evs := f.since(before)
		if len(evs) < 2 || evs[0].Sequence != before+1 || parseUpdate(t, evs[0]).text() != "hello again" ||
			parseUpdate(t, evs[len(evs)-1]).text() != mockanthropic.HelloText {
			t.Fatalf("events after reload: %+v", evs)
		}
	})

	step("Delete", func(t *testing.T) {
		if err := s.Delete(ctx); err != nil {
			t.Fatal(err)
		}
		// Deleting ends the session's subscriptions cleanly.
		for range f.sub.C() {
		}
		if err := f.sub.Err(); err != nil {
			t.Fatalf("subscription ended with %v", err)
		}
		_, err := s.Info(ctx)
		asACPError(t, err, "session_not_found")
		list, _, err := vm.ListSessions(ctx, "", 0)
		if err != nil || slices.ContainsFunc(list, func(d DurableSessionInfo) bool { return d.SessionID == sid }) {
			t.Fatalf("sessions after delete = %+v, %v", list, err)
		}
	})
}

// TestACPSessionErrors: failures are typed errors, and malformed input is
// refused before it reaches the sidecar.
func TestACPSessionErrors(t *testing.T) {
	ctx := testContext(t, time.Minute)
	t.Run("NoDatabase", func(t *testing.T) {
		vm := newVM(t, VMOptions{})
		_, err := vm.OpenSession(ctx, OpenSessionOptions{Agent: "pi"})
		asACPError(t, err, "session_storage_unavailable")
	})

	vm := newVM(t, VMOptions{Database: true})
	t.Run("UnknownAgent", func(t *testing.T) {
		_, err := vm.OpenSession(ctx, OpenSessionOptions{SessionID: "s-unknown-agent", Agent: "no-such-agent"})
		if ae := asACPError(t, err, "invalid_state"); !strings.Contains(ae.Message, "no-such-agent") {
			t.Fatalf("message %q does not name the agent", ae.Message)
		}
		// A failed open leaves nothing behind.
		vm.mu.Lock()
		_, kept := vm.sessions["s-unknown-agent"]
		vm.mu.Unlock()
		if kept {
			t.Fatal("the failed session is still registered in the VM")
		}
		if list, _, err := vm.ListSessions(ctx, "", 0); err != nil || len(list) != 0 {
			t.Fatalf("sessions = %+v, %v", list, err)
		}
		if _, err := vm.OpenSession(ctx, OpenSessionOptions{}); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("no agent: %v", err)
		}
	})
	t.Run("UnknownSession", func(t *testing.T) {
		s := vm.Session("no-such-session")
		_, err := s.Prompt(ctx, textPrompt("hi"), "")
		asACPError(t, err, "session_not_found")
		_, err = s.Info(ctx)
		asACPError(t, err, "session_not_found")
		_, err = s.History(ctx, HistoryQuery{})
		asACPError(t, err, "session_not_found")
	})
	t.Run("MalformedContent", func(t *testing.T) {
		// On a session the sidecar does not know: reaching it would give
		// session_not_found.
		s := vm.Session("no-such-session")
		for _, c := range []string{`not json`, `[{"type":"text"`, ``} {
			_, err := s.Prompt(ctx, json.RawMessage(c), "")
			var ae *ACPError
			if !errors.Is(err, ErrInvalidArgument) || errors.As(err, &ae) {
				t.Fatalf("content %q: err = %v, want ErrInvalidArgument", c, err)
			}
		}
	})
}

// TestACPSessionClaudePermissions answers claude-code's permission requests:
// allow, reject, and a cancel while one is pending.
// claudeTurnTimeout bounds a claude-code turn that runs a Bash command.
// Its first one sometimes ends tens of seconds after its last event (up to
// 75 s seen on two loaded cores), with no request to the model meanwhile:
// time claude-code spends inside the VM, not the gateway's.
const claudeTurnTimeout = 150 * time.Second

func TestACPSessionClaudePermissions(t *testing.T) {
	if testing.Short() {
		t.Skip("claude-code turns take seconds")
	}
	mock := mockanthropic.Start(t)
	vm := newAgentVM(t, mock, "claude")
	ctx := testContext(t, 6*time.Minute)
	s, err := vm.OpenSession(ctx, OpenSessionOptions{SessionID: "claude-perm", Agent: "claude", Cwd: "/workspace", PermissionPolicy: "ask", Env: mock.Env()})
	if err != nil {
		t.Fatal(err)
	}
	f := newFeed(t, s)

	type option struct{ Kind, OptionID string }
	type permission struct {
		event   SessionEvent
		options []option
		command string
		done    <-chan promptOutcome
	}
	// ask prompts a Bash command and returns the permission request it
	// raised. claude-code runs read-only commands such as `echo hi` without
	// asking, so the commands write files.
	ask := func(t *testing.T, command string) permission {
		t.Helper()
		input, _ := json.Marshal(map[string]string{"command": command, "description": "x"})
		done := promptAsync(ctx, s, "RUN_TOOL:Bash:"+string(input))
		e := f.until(t, 90*time.Second, "a permission request", func(e SessionEvent) bool {
			return e.Kind == "durable" && e.Type == "permission_request"
		})
		var req struct {
			Options  []option
			ToolCall struct {
				RawInput struct{ Command string }
			}
		}
		if err := json.Unmarshal(e.Request, &req); err != nil || e.RequestID == "" {
			t.Fatalf("permission request %s (%v), id %q", e.Request, err, e.RequestID)
		}
		if req.ToolCall.RawInput.Command != command {
			t.Fatalf("permission asked for %q, want %q", req.ToolCall.RawInput.Command, command)
		}
		return permission{event: e, options: req.Options, command: command, done: done}
	}
	optionOf := func(t *testing.T, p permission, kind string) string {
		t.Helper()
		for _, o := range p.options {
			if o.Kind == kind {
				return o.OptionID
			}
		}
		t.Fatalf("no %s option in %+v", kind, p.options)
		return ""
	}
	response := func(t *testing.T, requestID string) SessionEvent {
		t.Helper()
		for _, e := range f.durable {
			if e.Type == "permission_response" && e.RequestID == requestID {
				return e
			}
		}
		return f.until(t, 30*time.Second, "the permission response", func(e SessionEvent) bool {
			return e.Kind == "durable" && e.Type == "permission_response" && e.RequestID == requestID
		})
	}
	lastToolResult := func(t *testing.T) mockanthropic.Request {
		t.Helper()
		r, ok := mock.LastToolResult()
		if !ok {
			t.Fatal("the mock saw no tool result")
		}
		return r
	}
	step := func(name string, fn func(t *testing.T)) {
		start := time.Now()
		ok := t.Run(name, fn)
		t.Logf("%-10s %v", name, time.Since(start).Round(time.Millisecond))
		if !ok {
			t.FailNow()
		}
	}

	step("Allow", func(t *testing.T) {
		p := ask(t, "echo allowed > /workspace/allowed.txt")
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var state struct {
			Status   string
			Requests []struct{ RequestID string }
		}
		_ = json.Unmarshal(info.State, &state)
		if state.Status != "waiting" || len(state.Requests) != 1 || state.Requests[0].RequestID != p.event.RequestID {
			t.Fatalf("state while waiting = %s", info.State)
		}
		allow := optionOf(t, p, "allow_once")
		if st, reason, err := s.RespondPermission(ctx, p.event.RequestID, allow); err != nil || st != "accepted" || reason != "" {
			t.Fatalf("respond = %q %q %v", st, reason, err)
		}
		if st, reason, err := s.RespondPermission(ctx, p.event.RequestID, allow); err != nil || st != "not_pending" || reason != "already_resolved" {
			t.Fatalf("second respond = %q %q %v", st, reason, err)
		}
		o := waitPrompt(t, p.done, claudeTurnTimeout)
		if o.res.StopReason != "end_turn" || messageText(t, o.res.Message) != mockanthropic.DoneText {
			t.Fatalf("result = %s %s", o.res.StopReason, o.res.Message)
		}
		r := response(t, p.event.RequestID)
		var resp struct {
			Outcome struct{ Outcome, OptionID string }
		}
		_ = json.Unmarshal(r.Response, &resp)
		if r.Status != "accepted" || resp.Outcome.Outcome != "selected" || resp.Outcome.OptionID != allow || r.Sequence <= p.event.Sequence {
			t.Fatalf("permission response = %+v (%s)", r, r.Response)
		}
		if data, err := vm.ReadFile(ctx, "/workspace/allowed.txt"); err != nil || string(data) != "allowed\n" {
			t.Fatalf("allowed.txt = %q, %v", data, err)
		}
		if tr := lastToolResult(t); tr.LastIsError {
			t.Fatalf("tool result = %+v", tr)
		}
	})

	step("Reject", func(t *testing.T) {
		p := ask(t, "echo rejected > /workspace/rejected.txt")
		reject := optionOf(t, p, "reject_once")
		if st, _, err := s.RespondPermission(ctx, p.event.RequestID, reject); err != nil || st != "accepted" {
			t.Fatalf("respond = %q %v", st, err)
		}
		o := waitPrompt(t, p.done, claudeTurnTimeout)
		if o.res.StopReason != "end_turn" || messageText(t, o.res.Message) != mockanthropic.DoneText {
			t.Fatalf("result = %s %s", o.res.StopReason, o.res.Message)
		}
		if r := response(t, p.event.RequestID); r.Status != "accepted" || !strings.Contains(string(r.Response), reject) {
			t.Fatalf("permission response = %+v (%s)", r, r.Response)
		}
		if _, err := vm.ReadFile(ctx, "/workspace/rejected.txt"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("rejected.txt: %v, want not found", err)
		}
		if tr := lastToolResult(t); !tr.LastIsError {
			t.Fatalf("tool result after a rejection = %+v, want is_error", tr)
		}
	})

	step("CancelPending", func(t *testing.T) {
		p := ask(t, "echo cancelled > /workspace/cancelled.txt")
		if st, err := s.Cancel(ctx); err != nil || st != "cancelled" {
			t.Fatalf("Cancel = %q, %v", st, err)
		}
		o := waitPrompt(t, p.done, claudeTurnTimeout)
		if o.res.StopReason != "cancelled" || messageText(t, o.res.Message) != "" {
			t.Fatalf("result = %s %s, want cancelled without text", o.res.StopReason, o.res.Message)
		}
		t.Logf("cancelled turn's message: %s", o.res.Message)
		r := response(t, p.event.RequestID)
		if r.Status != "not_pending" || r.Reason != "prompt_cancelled" {
			t.Fatalf("permission response = %+v", r)
		}
		if st, _, err := s.RespondPermission(ctx, p.event.RequestID, optionOf(t, p, "allow_once")); err != nil || st != "not_pending" {
			t.Fatalf("late respond = %q %v", st, err)
		}
		if _, err := vm.ReadFile(ctx, "/workspace/cancelled.txt"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("cancelled.txt: %v, want not found", err)
		}
		// The session goes on.
		res, err := s.Prompt(ctx, textPrompt("say hi"), "")
		if err != nil || res.StopReason != "end_turn" || messageText(t, res.Message) != mockanthropic.HelloText {
			t.Fatalf("next prompt = %+v, %v", res, err)
		}
	})
}

// hostCall sends one JSON-RPC request to serveACPHostRequest and decodes the
// answer, checking the envelope.
func hostCall(t *testing.T, ctx context.Context, vm *VM, id any, method string, params any) (json.RawMessage, *rpcError) {
	t.Helper()
	req := map[string]any{"jsonrpc": "2.0", "method": method, "params": params}
	if id != nil {
		req["id"] = id
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	out := serveACPHostRequest(ctx, vm, string(b))
	var resp map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		t.Fatalf("%s: reply %s: %v", method, out, err)
	}
	wantID, _ := json.Marshal(id)
	result, hasResult := resp["result"]
	rawErr, hasError := resp["error"]
	if string(resp["jsonrpc"]) != `"2.0"` || string(resp["id"]) != string(wantID) || hasResult == hasError {
		t.Fatalf("%s: reply %s (want id %s, exactly one of result and error)", method, out, wantID)
	}
	if hasError {
		var e rpcError
		if err := json.Unmarshal(rawErr, &e); err != nil {
			t.Fatalf("%s: error %s: %v", method, rawErr, err)
		}
		return nil, &e
	}
	return result, nil
}

// TestACPHostRequest covers the client side of ACP the host implements for
// agents (fs/* and terminal/*), against a real VM. The agents of the session
// tests do their file and shell work themselves, so this is the only test of
// these callbacks.
func TestACPHostRequest(t *testing.T) {
	vm := newVM(t, VMOptions{})
	ctx := testContext(t, 2*time.Minute)
	next := 0
	call := func(t *testing.T, method string, params any) (json.RawMessage, *rpcError) {
		t.Helper()
		next++
		return hostCall(t, ctx, vm, next, method, params)
	}
	ok := func(t *testing.T, method string, params any) json.RawMessage {
		t.Helper()
		r, e := call(t, method, params)
		if e != nil {
			t.Fatalf("%s %v: error %d %s", method, params, e.Code, e.Message)
		}
		return r
	}
	fails := func(t *testing.T, code int, method string, params any) *rpcError {
		t.Helper()
		r, e := call(t, method, params)
		if e == nil || e.Code != code || e.Message == "" {
			t.Fatalf("%s %v: result %s error %+v, want code %d", method, params, r, e, code)
		}
		return e
	}
	content := func(t *testing.T, r json.RawMessage) string {
		t.Helper()
		var c struct{ Content *string }
		if err := json.Unmarshal(r, &c); err != nil || c.Content == nil {
			t.Fatalf("result %s has no content", r)
		}
		return *c.Content
	}

	const text = "one\ntwo\nthree\nfour\n"
	t.Run("WriteAndReadTextFile", func(t *testing.T) {
		if r := ok(t, "fs/write_text_file", map[string]any{"sessionId": "s", "path": "/workspace/host.txt", "content": text}); string(r) != "null" {
			t.Fatalf("write result = %s, want null", r)
		}
		if data, err := vm.ReadFile(ctx, "/workspace/host.txt"); err != nil || string(data) != text {
			t.Fatalf("file = %q, %v", data, err)
		}
		for _, tc := range []struct {
			params map[string]any
			want   string
		}{
			{map[string]any{}, text},
			{map[string]any{"line": 2, "limit": 2}, "two\nthree\n"},
			{map[string]any{"line": 4}, "four\n"},
			{map[string]any{"limit": 1}, "one\n"},
			{map[string]any{"line": 1, "limit": 0}, ""},
			{map[string]any{"line": 9}, ""},
			{map[string]any{"encoding": "base64"}, base64.StdEncoding.EncodeToString([]byte(text))},
		} {
			tc.params["sessionId"], tc.params["path"] = "s", "/workspace/host.txt"
			if got := content(t, ok(t, "fs/read_text_file", tc.params)); got != tc.want {
				t.Errorf("read %v = %q, want %q", tc.params, got, tc.want)
			}
		}
		// The SDK's aliases, with binary content.
		bin := []byte{0, 1, 2, 0xff, '\n'}
		ok(t, "fs/write", map[string]any{"path": "/workspace/bin", "content": base64.StdEncoding.EncodeToString(bin), "encoding": "base64"})
		if got := content(t, ok(t, "fs/read", map[string]any{"path": "/workspace/bin", "encoding": "base64"})); got != base64.StdEncoding.EncodeToString(bin) {
			t.Fatalf("binary round trip = %q", got)
		}
		// A missing file is a failure of the request, not of its params.
		fails(t, rpcInternalError, "fs/read_text_file", map[string]any{"path": "/workspace/missing.txt"})
	})

	t.Run("ReadDir", func(t *testing.T) {
		if err := vm.Mkdir(ctx, "/workspace/dir/sub", true); err != nil {
			t.Fatal(err)
		}
		if err := vm.WriteFile(ctx, "/workspace/dir/f.txt", []byte("x")); err != nil {
			t.Fatal(err)
		}
		for _, method := range []string{"fs/read_dir", "fs/readDir"} {
			var res struct {
				Entries []struct{ Name, Path, Type string }
			}
			if err := json.Unmarshal(ok(t, method, map[string]any{"path": "/workspace/dir"}), &res); err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, e := range res.Entries {
				got[e.Name] = e.Type
				if e.Path != "/workspace/dir/"+e.Name {
					t.Errorf("%s: entry %+v has path %q", method, e, e.Path)
				}
			}
			if want := map[string]string{"sub": "directory", "f.txt": "file"}; !reflect.DeepEqual(got, want) {
				t.Fatalf("%s = %v, want %v", method, got, want)
			}
		}
	})

	terminalID := func(t *testing.T, r json.RawMessage) string {
		t.Helper()
		var c struct{ TerminalID string }
		if err := json.Unmarshal(r, &c); err != nil || !strings.HasPrefix(c.TerminalID, "acp-terminal-") {
			t.Fatalf("create result = %s", r)
		}
		return c.TerminalID
	}
	type output struct {
		Output     string
		Truncated  bool
		ExitStatus *struct {
			ExitCode int
			Signal   *string
		}
	}
	readOutput := func(t *testing.T, id string) output {
		t.Helper()
		var o output
		if err := json.Unmarshal(ok(t, "terminal/output", map[string]any{"sessionId": "s", "terminalId": id}), &o); err != nil {
			t.Fatal(err)
		}
		return o
	}

	t.Run("Terminal", func(t *testing.T) {
		id := terminalID(t, ok(t, "terminal/create", map[string]any{
			"sessionId": "s", "command": "sh", "args": []string{"-c", `echo "$GREETING"; pwd; echo oops >&2; exit 3`},
			"env": []map[string]string{{"name": "GREETING", "value": "hello-terminal"}}, "cwd": "/tmp",
		}))
		var st struct {
			ExitCode *int
			Signal   *string
		}
		if err := json.Unmarshal(ok(t, "terminal/wait_for_exit", map[string]any{"sessionId": "s", "terminalId": id}), &st); err != nil ||
			st.ExitCode == nil || *st.ExitCode != 3 || st.Signal != nil {
			t.Fatalf("wait_for_exit = %+v, %v", st, err)
		}
		// Once the process exited, every output read reports its status.
		for range 20 {
			o := readOutput(t, id)
			if o.ExitStatus == nil || o.ExitStatus.ExitCode != 3 || o.Truncated {
				t.Fatalf("output after exit = %+v", o)
			}
			for _, want := range []string{"hello-terminal\n", "/tmp\n", "oops\n"} {
				if !strings.Contains(o.Output, want) {
					t.Fatalf("output %q lacks %q", o.Output, want)
				}
			}
		}
		// The alias.
		if r := ok(t, "terminal/waitForExit", map[string]any{"terminalId": id}); !strings.Contains(string(r), `"exitCode":3`) {
			t.Fatalf("waitForExit = %s", r)
		}
		if r := ok(t, "terminal/release", map[string]any{"sessionId": "s", "terminalId": id}); string(r) != "null" {
			t.Fatalf("release = %s", r)
		}
		fails(t, rpcInvalidParams, "terminal/output", map[string]any{"terminalId": id})
	})

	t.Run("TerminalOutputLimit", func(t *testing.T) {
		id := terminalID(t, ok(t, "terminal/create", map[string]any{
			"command": "sh", "args": []string{"-c", "echo 0123456789abcdef"}, "env": map[string]string{"X": "1"}, "outputByteLimit": 5,
		}))
		ok(t, "terminal/wait_for_exit", map[string]any{"terminalId": id})
		// ACP keeps the end of the output.
		if o := readOutput(t, id); o.Output != "cdef\n" || !o.Truncated || o.ExitStatus == nil || o.ExitStatus.ExitCode != 0 {
			t.Fatalf("output = %+v", o)
		}
		ok(t, "terminal/close", map[string]any{"terminalId": id})
	})

	t.Run("TerminalKillAndRelease", func(t *testing.T) {
		id := terminalID(t, ok(t, "terminal/create", map[string]any{"command": "sleep", "args": []string{"60"}}))
		if o := readOutput(t, id); o.ExitStatus != nil {
			t.Fatalf("a running terminal reports %+v", o)
		}
		ok(t, "terminal/kill", map[string]any{"terminalId": id})
		var st struct {
			ExitCode int
			Signal   *string
		}
		if err := json.Unmarshal(ok(t, "terminal/wait_for_exit", map[string]any{"terminalId": id}), &st); err != nil || st.Signal == nil || *st.Signal != "SIGKILL" {
			t.Fatalf("after kill: %+v, %v", st, err)
		}
		ok(t, "terminal/release", map[string]any{"terminalId": id})

		// Releasing a running terminal kills its process.
		id = terminalID(t, ok(t, "terminal/create", map[string]any{"command": "sleep", "args": []string{"60"}}))
		vm.terminals.mu.Lock()
		proc := vm.terminals.byID[id].proc
		vm.terminals.mu.Unlock()
		ok(t, "terminal/release", map[string]any{"terminalId": id})
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if st, err := proc.Wait(wctx); err != nil || st.Signal != "SIGKILL" {
			t.Fatalf("released terminal's process: %+v, %v", st, err)
		}
	})

	t.Run("Errors", func(t *testing.T) {
		if e := fails(t, rpcMethodNotFound, "fs/delete_everything", map[string]any{}); e.Message != "Method not found: fs/delete_everything" {
			t.Fatalf("message %q", e.Message)
		}
		fails(t, rpcMethodNotFound, "terminal/bogus", map[string]any{"terminalId": "x"})
		fails(t, rpcMethodNotFound, "session/request_permission", map[string]any{})
		fails(t, rpcInvalidParams, "fs/read_text_file", "not an object")
		fails(t, rpcInvalidParams, "fs/write_text_file", map[string]any{"path": "/workspace/x", "content": 42})
		fails(t, rpcInvalidParams, "fs/write", map[string]any{"path": "/workspace/x", "content": "%%%", "encoding": "base64"})
		fails(t, rpcInvalidParams, "fs/read_dir", []int{1})
		fails(t, rpcInvalidParams, "terminal/create", map[string]any{"args": []string{"x"}})
		fails(t, rpcInvalidParams, "terminal/create", map[string]any{"command": "true", "env": 7})
		fails(t, rpcInvalidParams, "terminal/output", map[string]any{"terminalId": "acp-terminal-999"})
		fails(t, rpcInvalidParams, "terminal/wait_for_exit", map[string]any{"terminalId": 5})

		// A string id is echoed as is; a request without id gets id null.
		if _, e := hostCall(t, ctx, vm, "req-abc", "nope/nope", nil); e == nil || e.Code != rpcMethodNotFound {
			t.Fatalf("string id: %+v", e)
		}
		var resp rpcResponse
		if err := json.Unmarshal([]byte(serveACPHostRequest(ctx, vm, `{"jsonrpc":"2.0","method":"nope"}`)), &resp); err != nil || string(resp.ID) != "null" {
			t.Fatalf("no id: %+v, %v", resp, err)
		}
		// Not JSON: a parse error.
		var perr struct {
			ID    json.RawMessage
			Error rpcError
		}
		if err := json.Unmarshal([]byte(serveACPHostRequest(ctx, vm, `{"jsonrpc":`)), &perr); err != nil || perr.Error.Code != -32700 || string(perr.ID) != "null" {
			t.Fatalf("parse error reply: %+v, %v", perr, err)
		}
		// No VM (the ownership named an unknown one): an internal error.
		out := serveACPHostRequest(ctx, nil, `{"jsonrpc":"2.0","id":1,"method":"fs/read_text_file","params":{"path":"/x"}}`)
		if !strings.Contains(out, `"code":-32603`) || !strings.Contains(out, `"id":1`) {
			t.Fatalf("no vm: %s", out)
		}
	})
}
