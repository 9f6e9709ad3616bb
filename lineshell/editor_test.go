package lineshell

import (
	"strings"
	"testing"
)

// TestEditor: keys in, the lines they enter and the events they raise out.
func TestEditor(t *testing.T) {
	for _, c := range []struct {
		name  string
		keys  string
		lines []string // lines entered, in order ("^C" and "^D" for those events)
		line  string   // the line left being typed
	}{
		{"plain", "echo hi\r", []string{"echo hi"}, ""},
		{"CR LF is one Enter", "a\r\nb\n", []string{"a", "b"}, ""},
		{"LF alone", "a\n\n", []string{"a", ""}, ""},
		{"backspace", "ecx\x7fho\r", []string{"echo"}, ""},
		{"backspace at the start", "\x7f\x08a", nil, "a"},
		{"left and insert", "ac\x1b[Db\r", []string{"abc"}, ""},
		{"SS3 arrows", "ac\x1bODb\r", []string{"abc"}, ""},
		{"home and end", "bc\x1b[Ha\x1b[Fd\r", []string{"abcd"}, ""},
		{"Ctrl-A and Ctrl-E", "bc\x01a\x05d\r", []string{"abcd"}, ""},
		{"delete key", "abc\x1b[D\x1b[D\x1b[3~\r", []string{"ac"}, ""},
		{"Ctrl-U", "junk\x15ls\r", []string{"ls"}, ""},
		{"Ctrl-K", "lsjunk\x1b[D\x1b[D\x1b[D\x1b[D\x0b\r", []string{"ls"}, ""},
		{"Ctrl-W", "echo one two\x17three\r", []string{"echo one three"}, ""},
		{"history up", "one\rtwo\r\x1b[A\x1b[A\r", []string{"one", "two", "one"}, ""},
		{"history down back to the draft", "one\rdra\x1b[A\x1b[Bft\r", []string{"one", "draft"}, ""},
		{"history skips repeats", "a\ra\rb\r\x1b[A\x1b[A\x1b[A\r", []string{"a", "a", "b", "a"}, ""},
		{"Ctrl-C drops the line", "half\x03", []string{"^C"}, ""},
		{"Ctrl-D on an empty line", "\x04", []string{"^D"}, ""},
		{"Ctrl-D deletes under the cursor", "ab\x1b[D\x04", nil, "a"},
		{"tab is a space", "a\tb\r", []string{"a b"}, ""},
		{"UTF-8 split across keys", "\xc3", nil, ""},
		{"UTF-8", "caf\xc3\xa9\x1b[D!\r", []string{"caf!é"}, ""},
		{"bracketed paste markers dropped", "\x1b[200~ls\x1b[201~\r", []string{"ls"}, ""},
		{"terminal reply dropped", "\x1b[12;1Rls\r", []string{"ls"}, ""},
		{"alt key dropped", "\x1bxls\r", []string{"ls"}, ""},
		{"other controls dropped", "l\x00\x1fs\r", []string{"ls"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEditor(Prompt, 1024)
			_, events := e.Keys([]byte(c.keys))
			var got []string
			for _, ev := range events {
				switch ev.kind {
				case evRun:
					got = append(got, ev.line)
				case evInterrupt:
					got = append(got, "^C")
				case evEOF:
					got = append(got, "^D")
				}
			}
			if strings.Join(got, "|") != strings.Join(c.lines, "|") {
				t.Fatalf("lines %q, want %q", got, c.lines)
			}
			if string(e.line) != c.line {
				t.Fatalf("left %q, want %q", string(e.line), c.line)
			}
		})
	}
}

// TestEditorEcho: what a terminal shows for typing, editing and Enter.
func TestEditorEcho(t *testing.T) {
	e := newEditor(Prompt, 1024)
	for _, c := range []struct{ keys, out string }{
		{"ls", "ls"},
		{"\x1b[D", "\x1b[1D"},
		{"x", "\r$ lxs\x1b[K\x1b[1D"},
		{"\r", "\r\n"},
		{"\x03", "^C\r\n"},
	} {
		if out, _ := e.Keys([]byte(c.keys)); string(out) != c.out {
			t.Fatalf("keys %q: output %q, want %q", c.keys, out, c.out)
		}
	}
	if got := string(e.Prompt()); got != Prompt {
		t.Fatalf("prompt %q", got)
	}
}

// TestEditorLineBound: a line stops growing at its bound, and the bell
// says so.
func TestEditorLineBound(t *testing.T) {
	e := newEditor(Prompt, 4)
	out, _ := e.Keys([]byte("abcdef"))
	if string(e.line) != "abcd" || !strings.HasSuffix(string(out), "\x07\x07") {
		t.Fatalf("line %q, output %q", string(e.line), out)
	}
}

// FuzzEditor: no key sequence panics the editor, keeps its cursor outside
// the line, or lets the line pass its bound.
func FuzzEditor(f *testing.F) {
	for _, s := range []string{"echo hi\r", "\x1b[A\x1b[B\x1b[3~", "\xc3\xa9\x7f", "\x1b[200~x\x1b[201~", "\x17\x15\x0b\x04\x03"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, keys []byte) {
		e := newEditor(Prompt, 64)
		e.Keys(keys)
		if e.cursor < 0 || e.cursor > len(e.line) || len(string(e.line)) > 64 {
			t.Fatalf("cursor %d in a line of %d runes (%d bytes)", e.cursor, len(e.line), len(string(e.line)))
		}
	})
}
