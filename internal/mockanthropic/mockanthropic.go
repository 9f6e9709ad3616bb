// Package mockanthropic is a scripted mock of the Anthropic Messages API for
// tests: real agents (pi, claude-code, opencode) running inside agentOS VMs
// talk to it over host loopback instead of the real API, offline and without
// keys (see /work/shared/recipes/offline-agent-sessions.md).
//
// The reply follows the script of package mockmodel (RUN_TOOL, SLOW,
// FAIL400, hello), applied to the last content block of the last message of
// a request: claude merges tool results, interrupts and reminders into one
// user message, so only the last block is meaningful, and a tool_result
// block is the result of a tool call.
//
// POST .../v1/messages/count_tokens answers {"input_tokens":42}; anything
// else is a 404 JSON error. Replies are streamed as SSE when the request asks
// for stream: true, one JSON message otherwise.
package mockanthropic

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

// Texts of the scripted replies (see mockmodel).
const (
	HelloText = mockmodel.HelloText
	DoneText  = mockmodel.DoneText
)

// SLOW replies: SlowDeltas deltas, SlowInterval apart.
const (
	SlowDeltas   = mockmodel.SlowDeltas
	SlowInterval = mockmodel.SlowInterval
)

// Reply kinds recorded in Request.Reply.
const (
	ReplyHello       = mockmodel.ReplyHello
	ReplyToolUse     = mockmodel.ReplyToolUse
	ReplyNoSuchTool  = mockmodel.ReplyNoSuchTool
	ReplySlow        = mockmodel.ReplySlow
	ReplyFail400     = mockmodel.ReplyFail400
	ReplyDone        = mockmodel.ReplyDone
	ReplyCountTokens = "count_tokens"
	ReplyBadRequest  = "bad_request"
	ReplyNotFound    = "not_found"
)

// Request is one request the mock received.
type Request struct {
	Method string
	Path   string // URL path, e.g. "/v1/messages"
	Query  string // raw query, e.g. "beta=true" (claude)
	APIKey string // x-api-key header
	Time   time.Time

	// Parsed from the JSON body of POST /v1/messages(/count_tokens).
	Model    string
	Stream   bool
	Tools    []string // names of the offered tools
	Messages int      // number of messages
	// LastBlockType and LastText describe the last content block of the last
	// message ("text" for a string content). For a tool_result, LastText is
	// its text content and LastIsError its is_error flag.
	LastBlockType string
	LastText      string
	LastIsError   bool
	// Prompt is the last non-empty line of LastText, what the reply rules
	// look at.
	Prompt string

	// Reply is the kind of reply chosen (Reply* constants).
	Reply string
}

// Server is a running mock. Its methods are safe for concurrent use.
type Server struct {
	*mockmodel.Server

	mu       sync.Mutex
	reqs     []Request
	nextTool int
	nextMsg  int
}

// Start starts a mock on 127.0.0.1 with a free port. It is closed when the
// test ends (or earlier by Close).
func Start(tb testing.TB) *Server {
	tb.Helper()
	return mockmodel.Start(tb, Listen)
}

// Listen starts a mock on 127.0.0.1 with a free port, for a caller that
// has no test to tie it to (a TestMain); Close stops it.
func Listen() (*Server, error) {
	s := &Server{}
	srv, err := mockmodel.Listen("127.0.0.1:0", s.serveHTTP, func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusServiceUnavailable, "overloaded_error", "mock: closed")
	})
	if err != nil {
		return nil, fmt.Errorf("mockanthropic: %w", err)
	}
	s.Server = srv
	return s, nil
}

// URL returns the base URL, http://127.0.0.1:<port> (no /v1).
func (s *Server) URL() string { return "http://127.0.0.1:" + strconv.Itoa(s.Port()) }

// APIKey is the key Env gives the agents (anything without "sk-ant-oat",
// which would select OAuth).
const APIKey = "sk-mock-not-a-real-key"

// Env returns the session environment that points pi and claude at the mock.
// It also sets CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: without it claude-code
// tries to reach Anthropic's other endpoints at the end of a turn, which
// offline makes some prompts return 6-30 s after their last event.
func (s *Server) Env() map[string]string {
	return map[string]string{
		"ANTHROPIC_API_KEY":                        APIKey,
		"ANTHROPIC_BASE_URL":                       s.URL(),
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
	}
}

// LastToolResult returns the latest request whose last block was a
// tool_result (what the agent reported of a tool call), if any.
func (s *Server) LastToolResult() (Request, bool) {
	reqs := s.Requests()
	for i := len(reqs) - 1; i >= 0; i-- {
		if reqs[i].LastBlockType == "tool_result" {
			return reqs[i], true
		}
	}
	return Request{}, false
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

// RequestsWithPrompt counts the requests whose prompt (the last line of
// the last message) is prompt: the attempts an agent made at one turn.
func (s *Server) RequestsWithPrompt(prompt string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.reqs {
		if r.Prompt == prompt {
			n++
		}
	}
	return n
}

func (s *Server) record(r Request) {
	s.mu.Lock()
	s.reqs = append(s.reqs, r)
	s.mu.Unlock()
}

func (s *Server) newID(prefix string, n *int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	*n++
	return prefix + strconv.Itoa(*n)
}

// messagesBody is the part of a Messages API request the mock reads.
type messagesBody struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Name string `json:"name"`
	} `json:"tools"`
}

type contentBlock struct {
	Type    string          `json:"type"`
	Text    string          `json:"text"`
	Content json.RawMessage `json:"content"` // tool_result: string or blocks
	IsError bool            `json:"is_error"`
}

// lastBlock returns the last content block of the last message.
func (b *messagesBody) lastBlock() contentBlock {
	if len(b.Messages) == 0 {
		return contentBlock{}
	}
	c := b.Messages[len(b.Messages)-1].Content
	var text string
	if json.Unmarshal(c, &text) == nil {
		return contentBlock{Type: "text", Text: text}
	}
	var blocks []contentBlock
	if json.Unmarshal(c, &blocks) != nil || len(blocks) == 0 {
		return contentBlock{}
	}
	last := blocks[len(blocks)-1]
	if last.Type == "tool_result" {
		last.Text = blockText(last.Content)
	}
	return last
}

// blockText flattens a tool_result content (a string or text blocks).
func blockText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []contentBlock
	_ = json.Unmarshal(raw, &blocks)
	var parts []string
	for _, b := range blocks {
		if b.Type == "text" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	req := Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, APIKey: r.Header.Get("x-api-key"), Time: time.Now()}

	isCount := r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/v1/messages/count_tokens")
	isMessages := r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/v1/messages")
	if !isCount && !isMessages {
		req.Reply = ReplyNotFound
		s.record(req)
		writeError(w, http.StatusNotFound, "not_found_error", fmt.Sprintf("mock: no route for %s %s", r.Method, r.URL.Path))
		return
	}
	var body messagesBody
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<20)).Decode(&body); err != nil {
		req.Reply = ReplyBadRequest
		s.record(req)
		writeError(w, http.StatusBadRequest, "invalid_request_error", "mock: body is not JSON: "+err.Error())
		return
	}
	req.Model, req.Stream, req.Messages = body.Model, body.Stream, len(body.Messages)
	for _, t := range body.Tools {
		req.Tools = append(req.Tools, t.Name)
	}
	last := body.lastBlock()
	req.LastBlockType, req.LastText, req.LastIsError = last.Type, last.Text, last.IsError
	if last.Type == "text" {
		req.Prompt = mockmodel.LastLine(last.Text)
	}

	if isCount {
		req.Reply = ReplyCountTokens
		s.record(req)
		mockmodel.WriteJSON(w, http.StatusOK, map[string]int{"input_tokens": 42})
		return
	}

	script := mockmodel.Decide(req.Prompt, last.Type == "tool_result", req.Tools)
	req.Reply = script.Kind
	if script.Kind == mockmodel.ReplyFail400 {
		s.record(req)
		writeError(w, http.StatusBadRequest, "invalid_request_error", "mock: FAIL400 requested")
		return
	}
	rep := reply{model: body.Model, chunks: script.Chunks, interval: script.Interval, stop: "end_turn"}
	if script.Kind == mockmodel.ReplyToolUse {
		rep.tool = &toolUse{ID: s.newID("toolu_", &s.nextTool), Name: script.Tool, Input: script.Input}
		rep.stop = "tool_use"
	}
	s.record(req)
	rep.id = s.newID("msg_", &s.nextMsg)
	if body.Stream {
		rep.stream(r.Context(), w)
	} else {
		rep.json(r.Context(), w)
	}
}

type toolUse struct {
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

// reply is a scripted assistant message: text chunks, or one tool call.
type reply struct {
	id, model string
	chunks    []string
	interval  time.Duration
	tool      *toolUse
	stop      string
}

func (rep *reply) usage(output int) map[string]int {
	return map[string]int{"input_tokens": 10, "output_tokens": output}
}

// stream writes the reply as SSE frames, flushing each, and stops early when
// ctx ends (client gone, server closing) or a write fails.
func (rep *reply) stream(ctx context.Context, w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send := func(event string, data any) bool {
		b, err := json.Marshal(data)
		if err != nil {
			panic(err)
		}
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	ok := send("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": rep.id, "type": "message", "role": "assistant", "model": rep.model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": rep.usage(1),
	}})
	if !ok {
		return
	}
	if rep.tool != nil {
		if !send("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
			"content_block": map[string]any{"type": "tool_use", "id": rep.tool.ID, "name": rep.tool.Name, "input": map[string]any{}}}) ||
			!send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
				"delta": map[string]any{"type": "input_json_delta", "partial_json": string(rep.tool.Input)}}) {
			return
		}
	} else {
		if !send("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
			"content_block": map[string]any{"type": "text", "text": ""}}) {
			return
		}
		for i, c := range rep.chunks {
			if i > 0 && rep.interval > 0 && !mockmodel.Sleep(ctx, rep.interval) {
				return
			}
			if !send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
				"delta": map[string]any{"type": "text_delta", "text": c}}) {
				return
			}
		}
	}
	_ = send("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0}) &&
		send("message_delta", map[string]any{"type": "message_delta",
			"delta": map[string]any{"stop_reason": rep.stop, "stop_sequence": nil}, "usage": map[string]int{"output_tokens": max(len(rep.chunks), 1)}}) &&
		send("message_stop", map[string]any{"type": "message_stop"})
}

// json writes the reply as one Messages API message (stream: false).
func (rep *reply) json(ctx context.Context, w http.ResponseWriter) {
	var content []any
	if rep.tool != nil {
		content = []any{map[string]any{"type": "tool_use", "id": rep.tool.ID, "name": rep.tool.Name, "input": rep.tool.Input}}
	} else {
		for i := 1; i < len(rep.chunks) && rep.interval > 0; i++ {
			if !mockmodel.Sleep(ctx, rep.interval) {
				return
			}
		}
		content = []any{map[string]any{"type": "text", "text": strings.Join(rep.chunks, "")}}
	}
	mockmodel.WriteJSON(w, http.StatusOK, map[string]any{
		"id": rep.id, "type": "message", "role": "assistant", "model": rep.model, "content": content,
		"stop_reason": rep.stop, "stop_sequence": nil, "usage": rep.usage(max(len(rep.chunks), 1)),
	})
}

func writeError(w http.ResponseWriter, status int, typ, msg string) {
	mockmodel.WriteJSON(w, status, map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}})
}
