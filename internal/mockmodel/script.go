// Package mockmodel is what the mock model APIs for tests (mockanthropic,
// mockopenai) share: the script they follow, what a prompt asks of the
// mock whatever API shape carries it, so that every agent is tested with
// the same prompts, and the loopback HTTP server they run on.
//
// The reply is chosen from the last input of a request, and of a text only
// its last non-empty line counts: when a session is prompted after an
// unload, agentOS prefixes the prompt with a transcript of the earlier
// updates (one JSON line each), which may contain earlier RUN_TOOL or SLOW
// prompts.
//
//   - the result of a tool call: the final text "done";
//   - text containing RUN_TOOL:<name>:<json input>: a call of that tool with
//     that input, if the request offers a tool of that name; otherwise the
//     plain text "No tool named <name>.";
//   - text containing SLOW: SlowDeltas text deltas SlowInterval apart (for
//     cancel tests);
//   - text containing FAIL400: an HTTP 400 error (4xx, so that agents do not
//     retry with backoff);
//   - anything else: "Hello from the mock LLM." in 5 deltas.
package mockmodel

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Texts of the scripted replies.
const (
	HelloText = "Hello from the mock LLM."
	DoneText  = "done"
)

// helloChunks are the 5 deltas of HelloText.
var helloChunks = []string{"Hello", " from", " the", " mock", " LLM."}

// SLOW replies: SlowDeltas deltas, SlowInterval apart.
const (
	SlowDeltas   = 40
	SlowInterval = 250 * time.Millisecond
)

// Kinds of reply.
const (
	ReplyHello      = "hello"
	ReplyToolUse    = "tool_use"
	ReplyNoSuchTool = "no_such_tool"
	ReplySlow       = "slow"
	ReplyFail400    = "fail400"
	ReplyDone       = "done"
)

// Reply is what the script answers to one request: text in chunks (with
// Interval between them), one tool call, or (ReplyFail400) an error.
type Reply struct {
	Kind     string
	Chunks   []string
	Interval time.Duration
	// Tool and Input name the tool to call and its JSON input (ReplyToolUse).
	Tool  string
	Input json.RawMessage
}

// Text returns the whole text of the reply.
func (r Reply) Text() string { return strings.Join(r.Chunks, "") }

// Decide applies the script to a request whose last input is a tool's
// result (toolResult) or else the text prompt (only its last line counts),
// and that offers the tools named in tools.
func Decide(prompt string, toolResult bool, tools []string) Reply {
	prompt = LastLine(prompt)
	switch {
	case toolResult:
		return Reply{Kind: ReplyDone, Chunks: []string{DoneText}}
	case strings.Contains(prompt, "RUN_TOOL:"):
		name, input, ok := parseRunTool(prompt)
		if ok && slices.Contains(tools, name) {
			return Reply{Kind: ReplyToolUse, Tool: name, Input: input}
		}
		return Reply{Kind: ReplyNoSuchTool, Chunks: []string{"No tool named " + name + "."}}
	case strings.Contains(prompt, "SLOW"):
		chunks := make([]string, SlowDeltas)
		for i := range chunks {
			chunks[i] = "slow " + strconv.Itoa(i+1) + ". "
		}
		return Reply{Kind: ReplySlow, Chunks: chunks, Interval: SlowInterval}
	case strings.Contains(prompt, "FAIL400"):
		return Reply{Kind: ReplyFail400}
	default:
		return Reply{Kind: ReplyHello, Chunks: slices.Clone(helloChunks)}
	}
}

// LastLine returns the last non-empty line of s, trimmed.
func LastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = strings.TrimSpace(s[i+1:])
	}
	return s
}

// parseRunTool extracts the tool name and JSON input of RUN_TOOL:<name>:<json>;
// when the input is no JSON object, it still returns the name, for the reply.
func parseRunTool(text string) (name string, input json.RawMessage, ok bool) {
	i := strings.Index(text, "RUN_TOOL:")
	if i < 0 {
		return "", nil, false
	}
	rest := text[i+len("RUN_TOOL:"):]
	j := strings.IndexByte(rest, ':')
	if j <= 0 {
		return "", nil, false
	}
	name = strings.TrimSpace(rest[:j])
	dec := json.NewDecoder(strings.NewReader(rest[j+1:]))
	if err := dec.Decode(&input); err != nil || len(input) == 0 || input[0] != '{' {
		return name, nil, false
	}
	return name, input, true
}
