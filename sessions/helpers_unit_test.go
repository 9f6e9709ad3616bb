package sessions

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/agentos"
)

func TestChooseOption(t *testing.T) {
	all := []gateway.PermissionOption{
		{OptionID: "ra", Kind: "reject_always"},
		{OptionID: "aa", Kind: "allow_always"},
		{OptionID: "ro", Kind: "reject_once"},
		{OptionID: "ao", Kind: "allow_once"},
	}
	always := []gateway.PermissionOption{
		{OptionID: "aa", Kind: "allow_always"},
		{OptionID: "ra", Kind: "reject_always"},
	}
	for _, tc := range []struct {
		name     string
		options  []gateway.PermissionOption
		decision string
		want     string
	}{
		{"reject prefers reject_once", all, gateway.DecisionReject, "ro"},
		{"allow prefers allow_once", all, gateway.DecisionAllow, "ao"},
		{"reject falls back to reject_always", always, gateway.DecisionReject, "ra"},
		{"allow falls back to allow_always", always, gateway.DecisionAllow, "aa"},
		{"reject with only allow options", []gateway.PermissionOption{{OptionID: "ao", Kind: "allow_once"}, {OptionID: "aa", Kind: "allow_always"}}, gateway.DecisionReject, ""},
		{"allow with only reject options", []gateway.PermissionOption{{OptionID: "ro", Kind: "reject_once"}}, gateway.DecisionAllow, ""},
		{"unknown kinds", []gateway.PermissionOption{{OptionID: "x", Kind: "maybe"}, {OptionID: "y", Kind: ""}}, gateway.DecisionAllow, ""},
		{"no options", nil, gateway.DecisionReject, ""},
		{"first of a kind wins", []gateway.PermissionOption{{OptionID: "ro1", Kind: "reject_once"}, {OptionID: "ro2", Kind: "reject_once"}}, gateway.DecisionReject, "ro1"},
		{"kinds are case-sensitive", []gateway.PermissionOption{{OptionID: "x", Kind: "Allow_Once"}}, gateway.DecisionAllow, ""},
		// Anything but allow is the safe choice.
		{"unknown decision rejects", all, "maybe", "ro"},
		{"empty decision rejects", all, "", "ro"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := chooseOption(tc.options, tc.decision); got != tc.want {
				t.Errorf("chooseOption(%v, %q) = %q, want %q", tc.options, tc.decision, got, tc.want)
			}
		})
	}
}

// The options of a permission_request event decode into gateway.PermissionOption
// by their ACP field names.
func TestPermissionOptionJSON(t *testing.T) {
	var options []gateway.PermissionOption
	raw := `[{"optionId":"allow","kind":"allow_once","name":"Allow"},{"optionId":"no","kind":"reject_once","name":"Reject"}]`
	if err := json.Unmarshal([]byte(raw), &options); err != nil {
		t.Fatal(err)
	}
	if got := chooseOption(options, gateway.DecisionReject); got != "no" {
		t.Errorf("reject chose %q, want no", got)
	}
	if got := chooseOption(options, gateway.DecisionAllow); got != "allow" {
		t.Errorf("allow chose %q, want allow", got)
	}
}

func TestUpdateType(t *testing.T) {
	for _, tc := range []struct {
		update string
		want   string
	}{
		{`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}`, "agent_message_chunk"},
		{`{"sessionUpdate":"tool_call","toolCallId":"t1"}`, "tool_call"},
		{`{"sessionUpdate":""}`, "session_update"},
		{`{"sessionUpdate":5}`, "session_update"},
		{`{"sessionUpdate":null}`, "session_update"},
		{`{}`, "session_update"},
		{`[]`, "session_update"},
		{`null`, "session_update"},
		{`"agent_message_chunk"`, "session_update"},
		{`{`, "session_update"},
		{``, "session_update"},
	} {
		if got := updateType(json.RawMessage(tc.update)); got != tc.want {
			t.Errorf("updateType(%q) = %q, want %q", tc.update, got, tc.want)
		}
	}
	if got := updateType(nil); got != "session_update" {
		t.Errorf("updateType(nil) = %q, want session_update", got)
	}
}

func TestParseTimestamp(t *testing.T) {
	fallback := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Time
	}{
		{"2024-05-06T07:08:09Z", time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)},
		{"2024-05-06T07:08:09.123456789Z", time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)},
		{"2024-05-06T09:08:09.5+02:00", time.Date(2024, 5, 6, 7, 8, 9, 500000000, time.UTC)},
		{"2024-05-05T23:08:09-08:00", time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)},
		{"", fallback},
		{"yesterday", fallback},
		{"2024-05-06 07:08:09", fallback},
		{"2024-05-06", fallback},
		{"1715000000", fallback},
		{"2024-13-06T07:08:09Z", fallback},
	} {
		got := parseTimestamp(tc.in, fallback)
		if !got.Equal(tc.want) {
			t.Errorf("parseTimestamp(%q) = %v, want %v", tc.in, got, tc.want)
		}
		if got.Location() != time.UTC {
			t.Errorf("parseTimestamp(%q) is in %v, want UTC", tc.in, got.Location())
		}
	}
}

func TestOrNull(t *testing.T) {
	for _, tc := range []struct {
		in   json.RawMessage
		want string
	}{
		{nil, "null"},
		{json.RawMessage{}, "null"},
		{json.RawMessage(`{`), "null"},
		{json.RawMessage(`{"a":1} x`), "null"},
		{json.RawMessage(`null`), "null"},
		{json.RawMessage(`{"a":1}`), `{"a":1}`},
		{json.RawMessage(`[1,2]`), `[1,2]`},
		{json.RawMessage(`"s"`), `"s"`},
		{json.RawMessage(` 1 `), ` 1 `},
	} {
		if got := orNull(tc.in); string(got) != tc.want {
			t.Errorf("orNull(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestEphemeralData(t *testing.T) {
	for _, tc := range []struct {
		name string
		ev   agentos.SessionEvent
		want string
	}{
		{
			"chunk",
			agentos.SessionEvent{Type: "ephemeral", AfterSequence: 7, Update: json.RawMessage(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}`)},
			`{"afterSequence":7,"type":"agent_message_chunk","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}}`,
		},
		{"no update", agentos.SessionEvent{Type: "ephemeral"}, `{"afterSequence":0,"type":"session_update","update":null}`},
		{"invalid update", agentos.SessionEvent{Type: "ephemeral", AfterSequence: 1, Update: json.RawMessage(`{`)}, `{"afterSequence":1,"type":"session_update","update":null}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ephemeralData(tc.ev)
			if !json.Valid(got) {
				t.Fatalf("ephemeralData = %q, not JSON", got)
			}
			if !jsonEqual(t, got, []byte(tc.want)) {
				t.Errorf("ephemeralData = %s, want %s", got, tc.want)
			}
		})
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("decode %q: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("decode %q: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}

func TestPublishLockedCutsOffFullWatcher(t *testing.T) {
	slow := &watcher{ch: make(chan Event, 1)}
	fast := &watcher{ch: make(chan Event, 4)}
	st := &sessionState{watchers: map[*watcher]struct{}{slow: {}, fast: {}}}

	for seq := uint64(1); seq <= 3; seq++ {
		st.publishLocked(Event{Type: TypeDurable, Sequence: seq})
	}
	if _, ok := st.watchers[slow]; ok {
		t.Error("the full watcher is still registered")
	}
	if _, ok := st.watchers[fast]; !ok {
		t.Fatal("the watcher with room was removed")
	}
	// The slow one keeps what it had queued, then ends overflowed.
	if got := drain(t, slow.ch); !reflect.DeepEqual(got, []uint64{1}) {
		t.Errorf("slow watcher got %v, want [1]", got)
	}
	if !slow.overflowed {
		t.Error("slow watcher not marked overflowed")
	}
	if slow.end != "" {
		t.Errorf("slow watcher end = %q, want none", slow.end)
	}
	if fast.overflowed {
		t.Error("fast watcher marked overflowed")
	}
	if n := len(fast.ch); n != 3 {
		t.Fatalf("fast watcher has %d events queued, want 3", n)
	}
	// Publishing again does not touch the cut-off watcher (a second close
	// would panic).
	st.publishLocked(Event{Type: TypeEphemeral, AfterSequence: 3})

	st.endWatchersLocked(string(gateway.SessionLost))
	if len(st.watchers) != 0 {
		t.Errorf("%d watchers left after end", len(st.watchers))
	}
	got := drain(t, fast.ch)
	if !reflect.DeepEqual(got, []uint64{1, 2, 3, 0}) {
		t.Errorf("fast watcher got %v, want [1 2 3 0]", got)
	}
	if fast.end != string(gateway.SessionLost) || fast.overflowed {
		t.Errorf("fast watcher end=%q overflowed=%v, want lost, false", fast.end, fast.overflowed)
	}
	// Nothing left to publish to or end.
	st.publishLocked(Event{Type: TypeDurable, Sequence: 4})
	st.endWatchersLocked(string(gateway.SessionClosed))
}

func TestPublishLockedZeroBufferWatcher(t *testing.T) {
	// A watcher nobody reads right now is cut off at once rather than
	// blocking the publisher.
	w := &watcher{ch: make(chan Event)}
	st := &sessionState{watchers: map[*watcher]struct{}{w: {}}}
	st.publishLocked(Event{Type: TypeDurable, Sequence: 1})
	if !w.overflowed || len(st.watchers) != 0 {
		t.Errorf("overflowed=%v watchers=%d, want true, 0", w.overflowed, len(st.watchers))
	}
	if _, ok := <-w.ch; ok {
		t.Error("channel not closed")
	}
}

// drain reads a closed channel to its end: the sequences of its events (0
// for events without one).
func drain(t *testing.T, ch <-chan Event) []uint64 {
	t.Helper()
	var seqs []uint64
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return seqs
			}
			seqs = append(seqs, ev.Sequence)
		case <-time.After(5 * time.Second):
			t.Fatalf("channel not closed after %v", seqs)
		}
	}
}

func TestRecorderWatchUnwatchUnregister(t *testing.T) {
	r := &recorder{sessions: map[string]*sessionState{}, deleted: map[string]bool{}}
	r.ensure(gateway.Session{ID: "s1", LatestSequence: 9})
	if st := r.sessions["s1"]; st == nil || st.lastSeq != 9 {
		t.Fatalf("ensure registered %+v, want lastSeq 9", st)
	}
	// ensure keeps what the recorder already knows.
	r.sessions["s1"].lastSeq = 12
	r.ensure(gateway.Session{ID: "s1", LatestSequence: 9})
	if got := r.sessions["s1"].lastSeq; got != 12 {
		t.Errorf("a second ensure reset lastSeq to %d", got)
	}

	if w, _ := r.watch("nope", 4); w != nil {
		t.Error("watch of an unregistered session returned a watcher")
	}
	w1, _ := r.watch("s1", 4)
	w2, _ := r.watch("s1", 4)
	if w1 == nil || w2 == nil || cap(w1.ch) != 4 {
		t.Fatalf("watch = %v, %v", w1, w2)
	}
	r.publish("s1", Event{Type: TypeDurable, Sequence: 13})
	r.publish("nope", Event{Type: TypeDurable, Sequence: 1})

	r.unwatch("s1", w1)
	if got := drain(t, w1.ch); !reflect.DeepEqual(got, []uint64{13}) {
		t.Errorf("unwatched watcher got %v, want [13]", got)
	}
	r.unwatch("s1", w1) // twice: no double close
	r.unwatch("nope", w1)

	r.unregister("s1", "deleted")
	if got := drain(t, w2.ch); !reflect.DeepEqual(got, []uint64{13}) {
		t.Errorf("watcher got %v, want [13]", got)
	}
	if w2.end != "deleted" {
		t.Errorf("end = %q, want deleted", w2.end)
	}
	r.unwatch("s1", w2) // after unregister: no double close
	r.unregister("s1", "deleted")

	// A deleted session is not registered again by a request that read its
	// record before the deletion, and watching it says it was deleted;
	// opening it anew registers it.
	r.ensure(gateway.Session{ID: "s1"})
	if _, ok := r.sessions["s1"]; ok {
		t.Error("ensure registered a deleted session again")
	}
	if w, end := r.watch("s1", 1); w != nil || end != endDeleted {
		t.Errorf("watch of a deleted session = %v, %q", w, end)
	}
	r.register(gateway.Session{ID: "s1"})
	if w, end := r.watch("s1", 1); w == nil || end != "" {
		t.Errorf("watch of a session opened again = %v, %q", w, end)
	}

	r.ensure(gateway.Session{ID: "s2"})
	r.ended = true
	if w, _ := r.watch("s2", 1); w != nil {
		t.Error("watch on an ended recorder returned a watcher")
	}
	r.ensure(gateway.Session{ID: "s3"})
	if _, ok := r.sessions["s3"]; ok {
		t.Error("an ended recorder registered a session")
	}
}

func TestMissingCredentials(t *testing.T) {
	claude := agentCredentials["claude"]
	for _, tc := range []struct {
		name  string
		agent string
		envs  []map[string]string
		want  []string
	}{
		{"claude without any", "claude", []map[string]string{nil, {"HOME": "/x"}}, claude},
		{"claude with an API key in the session's env", "claude", []map[string]string{{"ANTHROPIC_API_KEY": "k"}, nil}, nil},
		{"claude with an OAuth token in the VM's env", "claude", []map[string]string{nil, {"CLAUDE_CODE_OAUTH_TOKEN": "t"}}, nil},
		{"claude with an empty key", "claude", []map[string]string{{"ANTHROPIC_API_KEY": ""}}, claude},
		{"claude on Bedrock", "claude", []map[string]string{{"CLAUDE_CODE_USE_BEDROCK": "1"}}, nil},
		{"an agent the gateway knows no credentials of", "pi", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := missingCredentials(tc.agent, tc.envs...); !slices.Equal(got, tc.want) {
				t.Fatalf("= %v, want %v", got, tc.want)
			}
		})
	}
}
