// Package mockopenai is a scripted mock of the OpenAI Responses API
// (POST /v1/responses) for tests: Codex running inside an agentOS VM talks
// to it over host loopback instead of the real API, offline and without
// keys. It follows the same script as mockanthropic (package mockmodel:
// RUN_TOOL, SLOW, FAIL400, hello), applied to the last item of a request's
// input: a function_call_output item is the result of a tool call, a
// message its text prompt.
//
// Replies are streamed as server-sent events the way Codex parses them
// (response.created, response.output_item.added, response.output_text.delta
// or response.function_call_arguments.delta, response.output_item.done,
// response.completed) when the request asks for stream: true, one response
// object otherwise. Anything but POST .../v1/responses is a 404 JSON error.
//
// The mock listens on the IPv6 loopback [::1]: in agentOS 0.2.21 a
// WebAssembly command such as codex-exec fails to connect to the literal
// 127.0.0.1 (errno 21, EFAULT, from the engine's host_net bridge, whatever
// listens there), while "localhost" resolves to ::1 and connects.
package mockopenai

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/internal/mockmodel"
)

// Reply kinds recorded in Request.Reply: the script's (mockmodel.Reply*)
// and these.
const (
	ReplyBadRequest = "bad_request"
	ReplyNotFound   = "not_found"
)

// maxBody bounds a request body (Codex sends ~50 KB of instructions and
// tools with every turn).
const maxBody = 64 << 20

// Request is one request the mock received.
type Request struct {
	Method string
	Path   string // URL path, e.g. "/v1/responses"
	// Authorization is the Authorization header ("Bearer <key>"), if any.
	Authorization string
	Time          time.Time

	// Parsed from the JSON body of POST /v1/responses.
	Model  string
	Stream bool
	Tools  []string // names of the offered tools
	Items  int      // number of input items
	// LastItemType and LastText describe the last input item: "message"
	// with its text, or "function_call_output" with its output and CallID.
	LastItemType string
	LastText     string
	CallID       string
	// Prompt is the last non-empty line of a message's LastText, what the
	// script looks at.
	Prompt string

	// Reply is the kind of reply chosen.
	Reply string
}

// Server is a running mock. Its methods are safe for concurrent use.
type Server struct {
	*mockmodel.Server

	mu     sync.Mutex
	reqs   []Request
	nextID int
}

// Start starts a mock on [::1] with a free port. It is closed when the test
// ends (or earlier by Close).
func Start(tb testing.TB) *Server {
	tb.Helper()
	return mockmodel.Start(tb, Listen)
}

// Listen starts a mock on [::1] with a free port, for a caller that has no
// test to tie it to; Close stops it.
func Listen() (*Server, error) {
	s := &Server{}
	srv, err := mockmodel.Listen("[::1]:0", s.serveHTTP, func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusServiceUnavailable, "server_error", "mock: closed")
	})
	if err != nil {
		return nil, fmt.Errorf("mockopenai: %w", err)
	}
	s.Server = srv
	return s, nil
}

// URL returns the mock's root for callers on the host, http://[::1]:<port>
// (the host's "localhost" may not name ::1).
func (s *Server) URL() string { return "http://[::1]:" + strconv.Itoa(s.Port()) }

// BaseURL returns the API base URL agents in a VM are given,
// http://localhost:<port>/v1 ("localhost" resolves to ::1 in the VM).
func (s *Server) BaseURL() string { return "http://localhost:" + strconv.Itoa(s.Port()) + "/v1" }

// APIKey is the key Env gives the agents.
const APIKey = "sk-mock-not-a-real-key"

// Env returns the environment that points Codex at the mock: its base URL
// and a key.
func (s *Server) Env() map[string]string {
	return map[string]string{"OPENAI_BASE_URL": s.BaseURL(), "OPENAI_API_KEY": APIKey}
}

// Requests returns a copy of the requests received so far, oldest first.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.reqs))
	for i, r := range s.reqs {
		r.Tools = append([]string(nil), r.Tools...)
		out[i] = r
	}
	return out
}

func (s *Server) record(r Request) {
	s.mu.Lock()
	s.reqs = append(s.reqs, r)
	s.mu.Unlock()
}

// newID returns prefix followed by a number unique in this mock.
func (s *Server) newID(prefix string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	return prefix + strconv.Itoa(s.nextID)
}

// responsesBody is the part of a Responses API request the mock reads.
type responsesBody struct {
	Model  string      `json:"model"`
	Stream bool        `json:"stream"`
	Input  inputField  `json:"input"`
	Tools  []namedTool `json:"tools"`
}

type namedTool struct {
	Type string `json:"type"`
	Name string `json:"name"`
}

// inputField is a request's input: a string (one user message) or a list
// of items.
type inputField []inputItem

func (f *inputField) UnmarshalJSON(b []byte) error {
	var text string
	if json.Unmarshal(b, &text) == nil {
		*f = inputField{{Type: "message", Role: "user", Content: b}}
		return nil
	}
	var items []inputItem
	if err := json.Unmarshal(b, &items); err != nil {
		return fmt.Errorf("input is neither a string nor a list of items: %w", err)
	}
	*f = items
	return nil
}

// inputItem is one input item; Type is empty for a bare {role, content}
// message.
type inputItem struct {
	Type    string          `json:"type"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"` // message: string or parts
	CallID  string          `json:"call_id"`
	Output  json.RawMessage `json:"output"` // function_call_output: string or parts
}

// partsText flattens a string or a list of {type, text} parts.
func partsText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &parts)
	texts := make([]string, 0, len(parts))
	for _, p := range parts {
		if p.Text != "" {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// describe fills the parsed fields of r from body.
func (r *Request) describe(body responsesBody) {
	r.Model, r.Stream, r.Items = body.Model, body.Stream, len(body.Input)
	for _, t := range body.Tools {
		if t.Name != "" {
			r.Tools = append(r.Tools, t.Name)
		}
	}
	if len(body.Input) == 0 {
		return
	}
	last := body.Input[len(body.Input)-1]
	switch last.Type {
	case "function_call_output", "custom_tool_call_output":
		r.LastItemType, r.LastText, r.CallID = "function_call_output", partsText(last.Output), last.CallID
	case "message", "":
		r.LastItemType, r.LastText = "message", partsText(last.Content)
		r.Prompt = mockmodel.LastLine(r.LastText)
	default:
		r.LastItemType = last.Type
	}
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	req := Request{Method: r.Method, Path: r.URL.Path, Authorization: r.Header.Get("Authorization"), Time: time.Now()}

	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/v1/responses") {
		req.Reply = ReplyNotFound
		s.record(req)
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("mock: no route for %s %s", r.Method, r.URL.Path))
		return
	}
	var body responsesBody
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&body); err != nil {
		req.Reply = ReplyBadRequest
		s.record(req)
		writeError(w, http.StatusBadRequest, "invalid_request_error", "mock: body is not a Responses API request: "+err.Error())
		return
	}
	req.describe(body)
	script := mockmodel.Decide(req.Prompt, req.LastItemType == "function_call_output", req.Tools)
	req.Reply = script.Kind
	s.record(req)
	if script.Kind == mockmodel.ReplyFail400 {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "mock: FAIL400 requested")
		return
	}
	rep := reply{id: s.newID("resp_"), model: body.Model, script: script}
	if script.Kind == mockmodel.ReplyToolUse {
		rep.item = map[string]any{"type": "function_call", "id": s.newID("fc_"), "call_id": s.newID("call_"),
			"name": script.Tool, "arguments": string(script.Input), "status": "completed"}
	} else {
		rep.item = map[string]any{"type": "message", "id": s.newID("msg_"), "role": "assistant", "status": "completed",
			"content": []any{map[string]any{"type": "output_text", "text": script.Text(), "annotations": []any{}}}}
	}
	if body.Stream {
		rep.stream(r.Context(), w)
	} else {
		rep.json(r.Context(), w)
	}
}

// reply is a scripted response: one output item, a message or a function
// call.
type reply struct {
	id, model string
	script    mockmodel.Reply
	item      map[string]any // the complete output item
}

func (rep *reply) usage() map[string]any {
	out := max(len(rep.script.Chunks), 1)
	return map[string]any{
		"input_tokens": 10, "input_tokens_details": map[string]int{"cached_tokens": 0},
		"output_tokens": out, "output_tokens_details": map[string]int{"reasoning_tokens": 0},
		"total_tokens": 10 + out,
	}
}

// response returns the response object with the given status and output.
func (rep *reply) response(status string, output []any) map[string]any {
	r := map[string]any{"id": rep.id, "object": "response", "created_at": time.Now().Unix(), "status": status,
		"model": rep.model, "output": output}
	if status == "completed" {
		r["usage"] = rep.usage()
	}
	return r
}

// stream writes the reply as SSE frames, flushing each, and stops early when
// ctx ends (client gone, server closing) or a write fails.
func (rep *reply) stream(ctx context.Context, w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	seq := 0
	send := func(data map[string]any) bool {
		seq++
		data["sequence_number"] = seq
		b, err := json.Marshal(data)
		if err != nil {
			panic(err)
		}
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", data["type"], b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !send(map[string]any{"type": "response.created", "response": rep.response("in_progress", []any{})}) {
		return
	}
	itemID := rep.item["id"]
	added := map[string]any{}
	for k, v := range rep.item {
		added[k] = v
	}
	added["status"] = "in_progress"
	if rep.script.Kind == mockmodel.ReplyToolUse {
		added["arguments"] = ""
		if !send(map[string]any{"type": "response.output_item.added", "output_index": 0, "item": added}) ||
			!send(map[string]any{"type": "response.function_call_arguments.delta", "output_index": 0, "item_id": itemID,
				"delta": string(rep.script.Input)}) ||
			!send(map[string]any{"type": "response.function_call_arguments.done", "output_index": 0, "item_id": itemID,
				"arguments": string(rep.script.Input)}) {
			return
		}
	} else {
		added["content"] = []any{}
		part := map[string]any{"type": "output_text", "text": "", "annotations": []any{}}
		if !send(map[string]any{"type": "response.output_item.added", "output_index": 0, "item": added}) ||
			!send(map[string]any{"type": "response.content_part.added", "output_index": 0, "item_id": itemID, "content_index": 0, "part": part}) {
			return
		}
		for i, c := range rep.script.Chunks {
			if i > 0 && rep.script.Interval > 0 && !mockmodel.Sleep(ctx, rep.script.Interval) {
				return
			}
			if !send(map[string]any{"type": "response.output_text.delta", "output_index": 0, "item_id": itemID, "content_index": 0, "delta": c}) {
				return
			}
		}
		if !send(map[string]any{"type": "response.output_text.done", "output_index": 0, "item_id": itemID, "content_index": 0, "text": rep.script.Text()}) {
			return
		}
	}
	_ = send(map[string]any{"type": "response.output_item.done", "output_index": 0, "item": rep.item}) &&
		send(map[string]any{"type": "response.completed", "response": rep.response("completed", []any{rep.item})})
}

// json writes the reply as one response object (stream: false).
func (rep *reply) json(ctx context.Context, w http.ResponseWriter) {
	for i := 1; i < len(rep.script.Chunks) && rep.script.Interval > 0; i++ {
		if !mockmodel.Sleep(ctx, rep.script.Interval) {
			return
		}
	}
	mockmodel.WriteJSON(w, http.StatusOK, rep.response("completed", []any{rep.item}))
}

func writeError(w http.ResponseWriter, status int, typ, msg string) {
	mockmodel.WriteJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}})
}
