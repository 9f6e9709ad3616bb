package mockanthropic

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/internal/mockmodel"
)

// client returns an HTTP client of its own, its connections closed when the
// test ends.
func client(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// post sends a Messages API request and returns the response.
func post(t *testing.T, c *http.Client, ctx context.Context, url string, body any) *http.Response {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("content-type", "application/json")
	req.Header.Set("x-api-key", "sk-test")
	req.Header.Set("anthropic-version", "2023-06-01")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func userText(text string) map[string]any {
	return map[string]any{"role": "user", "content": text}
}

func reqBody(stream bool, tools []string, msgs ...map[string]any) map[string]any {
	ts := make([]map[string]any, len(tools))
	for i, n := range tools {
		ts[i] = map[string]any{"name": n, "description": "d", "input_schema": map[string]any{"type": "object"}}
	}
	return map[string]any{"model": "claude-test-1", "max_tokens": 1024, "stream": stream, "messages": msgs, "tools": ts,
		"system": []any{map[string]any{"type": "text", "text": "sys"}}}
}

func events(frames []mockmodel.Frame) []string {
	out := make([]string, len(frames))
	for i, f := range frames {
		out[i] = f.Event
	}
	return out
}

func textOf(t *testing.T, frames []mockmodel.Frame) (string, int) {
	t.Helper()
	var b strings.Builder
	n := 0
	for _, f := range frames {
		if f.Event != "content_block_delta" {
			continue
		}
		d := f.Data["delta"].(map[string]any)
		if d["type"] != "text_delta" {
			t.Fatalf("delta type %v", d["type"])
		}
		b.WriteString(d["text"].(string))
		n++
	}
	return b.String(), n
}

func TestSessionMockHelloStream(t *testing.T) {
	s := Start(t)
	c := client(t)
	if got, want := s.URL(), "http://127.0.0.1:"; !strings.HasPrefix(got, want) || strings.HasSuffix(got, "/v1") || s.Port() == 0 {
		t.Fatalf("URL() = %q, Port() = %d", got, s.Port())
	}
	env := s.Env()
	if env["ANTHROPIC_BASE_URL"] != s.URL() || env["ANTHROPIC_API_KEY"] == "" || strings.Contains(env["ANTHROPIC_API_KEY"], "sk-ant-oat") {
		t.Fatalf("Env() = %v", env)
	}

	resp := post(t, c, context.Background(), s.URL()+"/v1/messages?beta=true", reqBody(true, []string{"read", "bash"}, userText("say hi")))
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	frames := mockmodel.ReadFrames(t, resp)
	want := []string{"message_start", "content_block_start", "content_block_delta", "content_block_delta", "content_block_delta",
		"content_block_delta", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}
	if got := events(frames); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("events = %v, want %v", got, want)
	}
	msg := frames[0].Data["message"].(map[string]any)
	if msg["model"] != "claude-test-1" || msg["role"] != "assistant" || msg["stop_reason"] != nil {
		t.Fatalf("message_start = %v", msg)
	}
	if cb := frames[1].Data["content_block"].(map[string]any); cb["type"] != "text" || cb["text"] != "" {
		t.Fatalf("content_block_start = %v", cb)
	}
	if text, n := textOf(t, frames); text != HelloText || n != 5 {
		t.Fatalf("text = %q in %d deltas", text, n)
	}
	if d := frames[8].Data["delta"].(map[string]any); d["stop_reason"] != "end_turn" {
		t.Fatalf("message_delta = %v", frames[8].Data)
	}

	reqs := s.Requests()
	if len(reqs) != 1 {
		t.Fatalf("requests = %+v", reqs)
	}
	r := reqs[0]
	if r.Method != "POST" || r.Path != "/v1/messages" || r.Query != "beta=true" || r.APIKey != "sk-test" || r.Model != "claude-test-1" ||
		!r.Stream || strings.Join(r.Tools, ",") != "read,bash" || r.Messages != 1 || r.LastBlockType != "text" || r.LastText != "say hi" || r.Reply != ReplyHello {
		t.Fatalf("request = %+v", r)
	}
}

func TestSessionMockHelloJSON(t *testing.T) {
	s := Start(t)
	resp := post(t, client(t), context.Background(), s.URL()+"/v1/messages", reqBody(false, nil,
		userText("first"), map[string]any{"role": "assistant", "content": "x"},
		map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "ignored"}, map[string]any{"type": "text", "text": "hi again"}}}))
	defer resp.Body.Close()
	var m struct {
		ID, Type, Role, Model, StopReason string
		Content                           []struct{ Type, Text string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || m.Type != "message" || m.Role != "assistant" || len(m.Content) != 1 || m.Content[0].Text != HelloText {
		t.Fatalf("status %d, message %+v", resp.StatusCode, m)
	}
	if r := s.Requests()[0]; r.Stream || r.Messages != 3 || r.LastText != "hi again" || r.LastBlockType != "text" {
		t.Fatalf("request = %+v", r)
	}
}

// TestTranscriptPrompt: only the last line of the last text block counts,
// as agentOS prefixes a restored session's prompt with a transcript.
func TestSessionMockTranscriptPrompt(t *testing.T) {
	s := Start(t)
	c := client(t)
	transcript := "You are continuing an AgentOS session.\n\n" +
		`{"sessionUpdate":"user_message_chunk","content":{"text":"RUN_TOOL:bash:{\"command\":\"true\"}","type":"text"}}` + "\n" +
		`{"sessionUpdate":"user_message_chunk","content":{"text":"please be SLOW","type":"text"}}` + "\n"
	start := time.Now()
	frames := mockmodel.ReadFrames(t, post(t, c, context.Background(), s.URL()+"/v1/messages", reqBody(true, []string{"bash"}, userText(transcript+"hello again\n"))))
	if text, _ := textOf(t, frames); text != HelloText || time.Since(start) > 2*time.Second {
		t.Fatalf("text = %q after %v", text, time.Since(start))
	}
	frames = mockmodel.ReadFrames(t, post(t, c, context.Background(), s.URL()+"/v1/messages", reqBody(true, []string{"bash"}, userText(transcript+`RUN_TOOL:bash:{"command":"ls"}`))))
	if cb := frames[1].Data["content_block"].(map[string]any); cb["type"] != "tool_use" {
		t.Fatalf("content block = %v", cb)
	}
	if r := s.Requests(); r[0].Prompt != "hello again" || r[0].Reply != ReplyHello || r[1].Reply != ReplyToolUse || !strings.HasPrefix(r[0].LastText, "You are continuing") {
		t.Fatalf("requests = %+v", r)
	}
	if n := s.RequestsWithPrompt("hello again"); n != 1 {
		t.Fatalf("%d requests with the prompt %q, want 1", n, "hello again")
	}
}

func TestSessionMockToolUse(t *testing.T) {
	s := Start(t)
	c := client(t)
	input := `{"command":"echo hi","description":"x"}`
	frames := mockmodel.ReadFrames(t, post(t, c, context.Background(), s.URL()+"/v1/messages",
		reqBody(true, []string{"Bash", "Read"}, userText("RUN_TOOL:Bash:"+input))))
	want := "message_start,content_block_start,content_block_delta,content_block_stop,message_delta,message_stop"
	if got := strings.Join(events(frames), ","); got != want {
		t.Fatalf("events = %s", got)
	}
	cb := frames[1].Data["content_block"].(map[string]any)
	if cb["type"] != "tool_use" || cb["name"] != "Bash" || !strings.HasPrefix(cb["id"].(string), "toolu_") {
		t.Fatalf("content_block_start = %v", cb)
	}
	if d := frames[2].Data["delta"].(map[string]any); d["type"] != "input_json_delta" || d["partial_json"] != input {
		t.Fatalf("delta = %v", d)
	}
	if d := frames[4].Data["delta"].(map[string]any); d["stop_reason"] != "tool_use" {
		t.Fatalf("message_delta = %v", frames[4].Data)
	}

	// A tool the request does not offer: plain text.
	frames = mockmodel.ReadFrames(t, post(t, c, context.Background(), s.URL()+"/v1/messages",
		reqBody(true, []string{"Read"}, userText("RUN_TOOL:Bash:"+input))))
	if text, _ := textOf(t, frames); text != "No tool named Bash." {
		t.Fatalf("text = %q", text)
	}

	// The tool result: "done".
	result := map[string]any{"role": "user", "content": []any{
		map[string]any{"type": "tool_result", "tool_use_id": "toolu_1", "is_error": true, "content": []any{map[string]any{"type": "text", "text": "Permission denied"}}},
	}}
	frames = mockmodel.ReadFrames(t, post(t, c, context.Background(), s.URL()+"/v1/messages", reqBody(true, []string{"Bash"}, userText("x"), result)))
	if text, n := textOf(t, frames); text != DoneText || n != 1 {
		t.Fatalf("text = %q in %d deltas", text, n)
	}

	// Non-streaming tool call.
	resp := post(t, c, context.Background(), s.URL()+"/v1/messages", reqBody(false, []string{"Bash"}, userText("RUN_TOOL:Bash:"+input)))
	var m struct {
		StopReason string `json:"stop_reason"`
		Content    []struct {
			Type, Name string
			Input      json.RawMessage
		}
	}
	err := json.NewDecoder(resp.Body).Decode(&m)
	resp.Body.Close()
	if err != nil || m.StopReason != "tool_use" || len(m.Content) != 1 || m.Content[0].Type != "tool_use" || string(m.Content[0].Input) != input {
		t.Fatalf("message %+v, err %v", m, err)
	}

	reqs := s.Requests()
	var replies []string
	for _, r := range reqs {
		replies = append(replies, r.Reply)
	}
	if got := strings.Join(replies, ","); got != "tool_use,no_such_tool,done,tool_use" {
		t.Fatalf("replies = %s", got)
	}
	if r := reqs[2]; r.LastBlockType != "tool_result" || !r.LastIsError || r.LastText != "Permission denied" {
		t.Fatalf("tool result request = %+v", r)
	}
}

func TestSessionMockFail400(t *testing.T) {
	s := Start(t)
	resp := post(t, client(t), context.Background(), s.URL()+"/v1/messages", reqBody(true, nil, userText("please FAIL400 now")))
	defer resp.Body.Close()
	var e struct {
		Type  string
		Error struct{ Type, Message string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 400 || resp.Header.Get("Content-Type") != "application/json" || e.Type != "error" || e.Error.Type != "invalid_request_error" {
		t.Fatalf("status %d, body %+v", resp.StatusCode, e)
	}
	if r := s.Requests(); len(r) != 1 || r[0].Reply != ReplyFail400 {
		t.Fatalf("requests = %+v", r)
	}
}

func TestSessionMockNotFound(t *testing.T) {
	s := Start(t)
	c := client(t)
	for _, tc := range []struct{ method, path string }{
		{"HEAD", "/"}, {"GET", "/"}, {"GET", "/v1/messages"}, {"POST", "/v1/complete"}, {"POST", "/v1/models"},
	} {
		req, _ := http.NewRequest(tc.method, s.URL()+tc.path, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 404 || (tc.method != "HEAD" && !strings.Contains(string(body), `"not_found_error"`)) {
			t.Fatalf("%s %s: status %d body %s", tc.method, tc.path, resp.StatusCode, body)
		}
	}
	if r := s.Requests(); len(r) != 5 || r[0].Method != "HEAD" || r[0].Reply != ReplyNotFound {
		t.Fatalf("requests = %+v", r)
	}
	// A body that is not JSON is a 400, not a crash.
	resp, err := c.Post(s.URL()+"/v1/messages", "application/json", strings.NewReader("{nope"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("bad body: status %d", resp.StatusCode)
	}
}

func TestSessionMockCountTokens(t *testing.T) {
	s := Start(t)
	resp := post(t, client(t), context.Background(), s.URL()+"/v1/messages/count_tokens?beta=true", reqBody(false, []string{"Bash"}, userText("count me")))
	defer resp.Body.Close()
	var r struct {
		InputTokens int `json:"input_tokens"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != 200 || r.InputTokens != 42 {
		t.Fatalf("status %d, %+v, %v", resp.StatusCode, r, err)
	}
	if reqs := s.Requests(); len(reqs) != 1 || reqs[0].Reply != ReplyCountTokens || reqs[0].LastText != "count me" {
		t.Fatalf("requests = %+v", reqs)
	}
}

// startSlow starts a SLOW stream and returns once its first delta arrived.
func startSlow(t *testing.T, s *Server, ctx context.Context) *bufio.Reader {
	t.Helper()
	resp := post(t, client(t), ctx, s.URL()+"/v1/messages", reqBody(true, nil, userText("be SLOW please")))
	t.Cleanup(func() { resp.Body.Close() })
	r := bufio.NewReader(resp.Body)
	for {
		f, err := mockmodel.ReadFrame(r)
		if err != nil {
			t.Fatalf("slow stream: %v", err)
		}
		if f.Event == "content_block_delta" {
			return r
		}
	}
}

func TestSessionMockSlowStopsWhenClientLeaves(t *testing.T) {
	s := Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	r := startSlow(t, s, ctx)
	// The deltas are paced.
	start := time.Now()
	if f, err := mockmodel.ReadFrame(r); err != nil || f.Event != "content_block_delta" {
		t.Fatalf("second frame %v, %v", f, err)
	}
	if d := time.Since(start); d < SlowInterval/2 {
		t.Fatalf("second delta after %v, want about %v", d, SlowInterval)
	}
	cancel()
	deadline := time.Now().Add(3 * time.Second)
	for s.Active() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the SLOW handler still runs 3 s after the client left")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r := s.Requests(); len(r) != 1 || r[0].Reply != ReplySlow {
		t.Fatalf("requests = %+v", r)
	}
}

func TestSessionMockCloseDoesNotWaitForSlowStreams(t *testing.T) {
	s := Start(t)
	r := startSlow(t, s, context.Background())
	start := time.Now()
	s.Close()
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Close took %v with a SLOW stream in flight", d)
	}
	if s.Active() != 0 {
		t.Fatal("a handler outlived Close")
	}
	// The client sees the stream cut, not the full reply.
	for {
		f, err := mockmodel.ReadFrame(r)
		if err != nil {
			break
		}
		if f.Event == "message_stop" {
			t.Fatal("stream completed despite Close")
		}
	}
	s.Close() // idempotent
	if _, err := client(t).Get(s.URL() + "/"); err == nil {
		t.Fatal("server still answers after Close")
	}
}
