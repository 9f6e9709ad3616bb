package mockopenai

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
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

func post(t *testing.T, ctx context.Context, c *http.Client, url string, body []byte) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-test")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// codexTools is the start of the tools Codex offers.
var codexTools = []any{
	map[string]any{"type": "function", "name": "exec_command", "parameters": map[string]any{"type": "object"}},
	map[string]any{"type": "web_search"},
}

func body(t *testing.T, stream bool, input any) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"model": "gpt-5", "stream": stream, "instructions": "be brief",
		"input": input, "tools": codexTools, "store": false})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// message is a Codex input message of one input_text part.
func message(role, text string) map[string]any {
	return map[string]any{"type": "message", "role": role, "content": []any{map[string]any{"type": "input_text", "text": text}}}
}

const runTool = `RUN_TOOL:exec_command:{"cmd":"echo hi > /workspace/x.txt"}`

// TestResponsesStream drives each scripted reply over real HTTP and checks
// the event sequence Codex parses, the text its deltas add up to, the
// output item and what the mock recorded.
func TestResponsesStream(t *testing.T) {
	s := Start(t)
	c := client(t)
	ctx := context.Background()
	toolOutput := []any{
		message("user", runTool),
		map[string]any{"type": "function_call", "call_id": "call_9", "name": "exec_command", "arguments": "{}"},
		map[string]any{"type": "function_call_output", "call_id": "call_9", "output": "Process exited with code 0"},
	}
	for _, tc := range []struct {
		name      string
		input     any
		reply     string
		events    []string
		text      string
		item      string // type of the output item
		lastItem  string
		prompt    string
		callID    string
		arguments string
	}{
		{name: "hello", input: []any{message("developer", "rules"), message("user", "hello")}, reply: mockmodel.ReplyHello,
			events: textEvents(5), text: mockmodel.HelloText, item: "message", lastItem: "message", prompt: "hello"},
		{name: "string input", input: "hi there", reply: mockmodel.ReplyHello,
			events: textEvents(5), text: mockmodel.HelloText, item: "message", lastItem: "message", prompt: "hi there"},
		{name: "transcript before the prompt", input: []any{message("user", runTool+"\nSLOW\nhello again")}, reply: mockmodel.ReplyHello,
			events: textEvents(5), text: mockmodel.HelloText, item: "message", lastItem: "message", prompt: "hello again"},
		{name: "tool call", input: []any{message("user", runTool)}, reply: mockmodel.ReplyToolUse,
			events: []string{"response.created", "response.output_item.added", "response.function_call_arguments.delta",
				"response.function_call_arguments.done", "response.output_item.done", "response.completed"},
			item: "function_call", lastItem: "message", prompt: runTool, arguments: `{"cmd":"echo hi > /workspace/x.txt"}`},
		{name: "tool not offered", input: []any{message("user", `RUN_TOOL:apply_patch:{"x":1}`)}, reply: mockmodel.ReplyNoSuchTool,
			events: textEvents(1), text: "No tool named apply_patch.", item: "message", lastItem: "message", prompt: `RUN_TOOL:apply_patch:{"x":1}`},
		{name: "tool output", input: toolOutput, reply: mockmodel.ReplyDone,
			events: textEvents(1), text: mockmodel.DoneText, item: "message", lastItem: "function_call_output", callID: "call_9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(s.Requests())
			resp := post(t, ctx, c, s.URL()+"/v1/responses", body(t, true, tc.input))
			if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			frames := mockmodel.ReadFrames(t, resp)
			var events []string
			var text strings.Builder
			for i, f := range frames {
				events = append(events, f.Event)
				if f.Data["sequence_number"] != float64(i+1) {
					t.Errorf("frame %d has sequence_number %v", i, f.Data["sequence_number"])
				}
				if f.Event == "response.output_text.delta" {
					text.WriteString(f.Data["delta"].(string))
				}
			}
			if strings.Join(events, ",") != strings.Join(tc.events, ",") {
				t.Fatalf("events %v, want %v", events, tc.events)
			}
			if text.String() != tc.text {
				t.Errorf("text %q, want %q", text.String(), tc.text)
			}
			done := frames[len(frames)-2].Data["item"].(map[string]any)
			if done["type"] != tc.item || done["status"] != "completed" {
				t.Errorf("output item %v", done)
			}
			if tc.arguments != "" && (done["arguments"] != tc.arguments || done["name"] != "exec_command" || done["call_id"] == "") {
				t.Errorf("function call %v", done)
			}
			completed := frames[len(frames)-1].Data["response"].(map[string]any)
			if completed["status"] != "completed" || completed["id"] != frames[0].Data["response"].(map[string]any)["id"] || completed["usage"] == nil {
				t.Errorf("completed response %v", completed)
			}
			reqs := s.Requests()
			if len(reqs) != before+1 {
				t.Fatalf("%d requests recorded, want %d", len(reqs), before+1)
			}
			r := reqs[before]
			if r.Reply != tc.reply || r.LastItemType != tc.lastItem || r.Prompt != tc.prompt || r.CallID != tc.callID ||
				r.Model != "gpt-5" || !r.Stream || r.Authorization != "Bearer sk-test" || strings.Join(r.Tools, ",") != "exec_command" {
				t.Errorf("recorded %+v", r)
			}
		})
	}
}

// textEvents is the event sequence of a text reply of n deltas.
func textEvents(n int) []string {
	out := []string{"response.created", "response.output_item.added", "response.content_part.added"}
	for range n {
		out = append(out, "response.output_text.delta")
	}
	return append(out, "response.output_text.done", "response.output_item.done", "response.completed")
}

func TestResponsesJSON(t *testing.T) {
	s := Start(t)
	resp := post(t, context.Background(), client(t), s.URL()+"/v1/responses", body(t, false, []any{message("user", "hello")}))
	defer resp.Body.Close()
	var got struct {
		Object, Status string
		Output         []struct {
			Type    string
			Content []struct{ Type, Text string }
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || got.Object != "response" || got.Status != "completed" || len(got.Output) != 1 ||
		got.Output[0].Type != "message" || len(got.Output[0].Content) != 1 || got.Output[0].Content[0].Text != mockmodel.HelloText {
		t.Fatalf("status %d, response %+v", resp.StatusCode, got)
	}
}

// TestResponsesErrors covers the replies that are errors: asked for, a body
// that is no request, and an unknown route.
func TestResponsesErrors(t *testing.T) {
	s := Start(t)
	c := client(t)
	for _, tc := range []struct {
		name, method, path string
		body               []byte
		status             int
		reply              string
	}{
		{"FAIL400", http.MethodPost, "/v1/responses", body(t, true, []any{message("user", "FAIL400")}), 400, mockmodel.ReplyFail400},
		{"not JSON", http.MethodPost, "/v1/responses", []byte("{"), 400, ReplyBadRequest},
		{"input of the wrong type", http.MethodPost, "/v1/responses", []byte(`{"input":7}`), 400, ReplyBadRequest},
		{"chat completions", http.MethodPost, "/v1/chat/completions", body(t, true, "hi"), 404, ReplyNotFound},
		{"GET", http.MethodGet, "/v1/responses", nil, 404, ReplyNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(s.Requests())
			req, err := http.NewRequest(tc.method, s.URL()+tc.path, bytes.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e struct {
				Error struct{ Message, Type string }
			}
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.status || e.Error.Message == "" || e.Error.Type == "" {
				t.Fatalf("status %d, error %+v", resp.StatusCode, e)
			}
			if r := s.Requests(); len(r) != before+1 || r[before].Reply != tc.reply {
				t.Fatalf("recorded %+v", r[before:])
			}
		})
	}
}

// TestResponsesSlowStopsWhenClientLeaves checks that a SLOW stream is paced
// and that its handler returns once the client goes away.
func TestResponsesSlowStopsWhenClientLeaves(t *testing.T) {
	s := Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := post(t, ctx, client(t), s.URL()+"/v1/responses", body(t, true, []any{message("user", "SLOW please")}))
	r := bufio.NewReader(resp.Body)
	deltas := 0
	var first time.Time
	for deltas < 2 {
		f, err := mockmodel.ReadFrame(r)
		if err != nil {
			t.Fatal(err)
		}
		if f.Event == "response.output_text.delta" {
			deltas++
			if deltas == 1 {
				first = time.Now()
			}
		}
	}
	if d := time.Since(first); d < mockmodel.SlowInterval/2 {
		t.Fatalf("second delta %v after the first, want about %v", d, mockmodel.SlowInterval)
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(10 * time.Second)
	for s.Active() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the SLOW handler did not return after the client left")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if reqs := s.Requests(); len(reqs) != 1 || reqs[0].Reply != mockmodel.ReplySlow {
		t.Fatalf("recorded %+v", reqs)
	}
}

// FuzzDescribe feeds arbitrary bodies to the request parser: it must never
// panic, and a body it accepts yields a consistent record.
func FuzzDescribe(f *testing.F) {
	f.Add([]byte(`{"model":"gpt-5","stream":true,"input":"hello"}`))
	f.Add([]byte(`{"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"RUN_TOOL:exec_command:{\"cmd\":\"ls\"}"}]}],"tools":[{"type":"function","name":"exec_command"}]}`))
	f.Add([]byte(`{"input":[{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"ok"}]}]}`))
	f.Add([]byte(`{"input":[{"role":"user","content":"SLOW"}]}`))
	f.Add([]byte(`{"input":[{"type":"reasoning"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var body responsesBody
		if json.Unmarshal(b, &body) != nil {
			return
		}
		var r Request
		r.describe(body)
		if r.Items != len(body.Input) {
			t.Fatalf("items %d of %d", r.Items, len(body.Input))
		}
		if r.Prompt != "" && r.LastItemType != "message" {
			t.Fatalf("prompt %q from a %q item", r.Prompt, r.LastItemType)
		}
		_ = mockmodel.Decide(r.Prompt, r.LastItemType == "function_call_output", r.Tools)
	})
}
