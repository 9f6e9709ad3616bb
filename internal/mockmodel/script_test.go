package mockmodel

import (
	"testing"
)

func TestDecide(t *testing.T) {
	tools := []string{"bash", "exec_command"}
	for _, tc := range []struct {
		name       string
		prompt     string
		toolResult bool
		kind       string
		text       string
		tool       string
		input      string
	}{
		{"hello", "hi", false, ReplyHello, HelloText, "", ""},
		{"tool result", "RUN_TOOL:bash:{}", true, ReplyDone, DoneText, "", ""},
		{"tool", `RUN_TOOL:bash:{"command":"ls"} trailing`, false, ReplyToolUse, "", "bash", `{"command":"ls"}`},
		{"tool not offered", `RUN_TOOL:Bash:{"command":"ls"}`, false, ReplyNoSuchTool, "No tool named Bash.", "", ""},
		{"tool input not an object", `RUN_TOOL:bash:[1]`, false, ReplyNoSuchTool, "No tool named bash.", "", ""},
		{"tool without a name", `RUN_TOOL::{}`, false, ReplyNoSuchTool, "No tool named .", "", ""},
		{"fail", "please FAIL400", false, ReplyFail400, "", "", ""},
		{"only the last line counts", "RUN_TOOL:bash:{}\nSLOW\n\n  hello again  \n", false, ReplyHello, HelloText, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Decide(tc.prompt, tc.toolResult, tools)
			if r.Kind != tc.kind || r.Text() != tc.text || r.Tool != tc.tool || string(r.Input) != tc.input {
				t.Fatalf("Decide(%q) = %+v", tc.prompt, r)
			}
		})
	}
	slow := Decide("SLOW", false, nil)
	if slow.Kind != ReplySlow || len(slow.Chunks) != SlowDeltas || slow.Interval != SlowInterval {
		t.Fatalf("SLOW: %+v", slow)
	}
}
