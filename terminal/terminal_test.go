package terminal

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder collects the answers a Terminal writes.
type recorder struct {
	mu      sync.Mutex
	answers []string
	got     chan struct{}
}

func newRecorder() *recorder { return &recorder{got: make(chan struct{}, 64)} }

func (r *recorder) reply(_ context.Context, b []byte) error {
	r.mu.Lock()
	r.answers = append(r.answers, string(b))
	r.mu.Unlock()
	r.got <- struct{}{}
	return nil
}

// wait waits for n answers in all.
func (r *recorder) wait(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		r.mu.Lock()
		if len(r.answers) >= n {
			out := append([]string(nil), r.answers...)
			r.mu.Unlock()
			return out
		}
		r.mu.Unlock()
		select {
		case <-r.got:
		case <-deadline:
			t.Fatalf("waited for %d answers, got %q", n, r.answers)
		}
	}
}

// dsrAnswer is the emulator's answer to a device status query (ESC[5n):
// "ready", in its DEC form.
const dsrAnswer = "\x1b[?0n"

func TestAnswersWithoutClients(t *testing.T) {
	tests := []struct {
		name   string
		cols   int
		rows   int
		chunks []string
		want   []string
	}{
		{"cursor at start", 80, 24, []string{"\x1b[6n"}, []string{"\x1b[1;1R"}},
		{"cursor after text", 80, 24, []string{"ab\r\ncde\x1b[6n"}, []string{"\x1b[2;4R"}},
		{"query split across chunks", 80, 24, []string{"x\x1b", "[", "6", "n"}, []string{"\x1b[1;2R"}},
		{"prompt of the agentOS shell", 80, 24, []string{"\x1b[?2004h", "\x1b[6n", "\x1b[6n",
			"\x1b[?25l\x1b[1;1H\x1b[J\x1b[39m:/workspace$ \x1b[0m\x1b[?25h\x1b[6n"},
			[]string{"\x1b[1;1R", "\x1b[1;1R", "\x1b[1;14R"}},
		{"cursor moved", 80, 24, []string{"\x1b[5;7H\x1b[6n"}, []string{"\x1b[5;7R"}},
		{"cursor clamped to a small screen", 10, 5, []string{"\x1b[50;50H\x1b[6n"}, []string{"\x1b[5;10R"}},
		{"device status", 80, 24, []string{"\x1b[5n"}, []string{dsrAnswer}},
		{"primary device attributes", 80, 24, []string{"\x1b[c"}, []string{"\x1b[?62;1;6;22c"}},
		{"two queries in one chunk", 80, 24, []string{"\x1b[6nab\x1b[6n"}, []string{"\x1b[1;1R", "\x1b[1;3R"}},
		{"no query", 80, 24, []string{"hello\r\n\x1b[31mred\x1b[0m"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRecorder()
			term := New(Config{Cols: tt.cols, Rows: tt.rows, Reply: r.reply})
			for _, c := range tt.chunks {
				term.Output([]byte(c))
			}
			// A final query that is always answered marks the end, so that
			// "no more answers than wanted" is checked without waiting.
			term.Output([]byte("\x1b[5n"))
			got := r.wait(t, len(tt.want)+1)
			term.Close()
			if want := append(tt.want, dsrAnswer); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("answers %q, want %q", got, want)
			}
			if n := term.Answered(); n != len(tt.want)+1 {
				t.Fatalf("Answered() = %d, want %d", n, len(tt.want)+1)
			}
		})
	}
}

// TestAttachedClients: while a client that answers for itself is attached,
// a query it answers is not answered again; one it leaves unanswered is
// answered after the grace, or at once when the client detaches.
func TestAttachedClients(t *testing.T) {
	tests := []struct {
		name   string
		client string // what the client types after the first query
		detach bool   // the client detaches instead of waiting for the grace
		want   []string
	}{
		{"client answers", "\x1b[9;9R", true, []string{"\x1b[1;2R"}},
		{"client answers among keystrokes", "ls\x1b[A\x1b[9;9R\r", true, []string{"\x1b[1;2R"}},
		{"client answers something else", "\x1b[0n", true, []string{"\x1b[1;1R", "\x1b[1;2R"}},
		{"client types only", "ls\r", true, []string{"\x1b[1;1R", "\x1b[1;2R"}},
		{"client silent, grace runs out", "", false, []string{"\x1b[1;1R", "\x1b[1;2R"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRecorder()
			term := New(Config{Reply: r.reply, Grace: 20 * time.Millisecond})
			defer term.Close()
			detach := term.Attach()
			term.Output([]byte("\x1b[6n"))
			term.ClientInput([]byte(tt.client))
			// A second query the client never answers: answers go out in
			// order, so once it is answered the first one was settled.
			term.Output([]byte("x\x1b[6n"))
			if tt.detach {
				detach()
			}
			got := r.wait(t, len(tt.want))
			term.Close()
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("answers %q, want %q", got, tt.want)
			}
			detach()
		})
	}
}

func TestResize(t *testing.T) {
	r := newRecorder()
	term := New(Config{Cols: 80, Rows: 24, Reply: r.reply})
	defer term.Close()
	term.Output([]byte("\x1b[24;80H"))
	term.Resize(40, 10)
	if c, rows := term.Size(); c != 40 || rows != 10 {
		t.Fatalf("size %dx%d", c, rows)
	}
	if row, col := term.Cursor(); row != 10 || col != 40 {
		t.Fatalf("cursor %d;%d after shrinking", row, col)
	}
	term.Output([]byte("\x1b[6n"))
	if got := r.wait(t, 1); got[0] != "\x1b[10;40R" {
		t.Fatalf("answer %q", got[0])
	}
}

func TestOutputAfterClose(t *testing.T) {
	r := newRecorder()
	term := New(Config{Reply: r.reply})
	term.Close()
	term.Close()
	term.Output([]byte("\x1b[6n"))
	term.Resize(10, 10)
	if n := term.Answered(); n != 0 {
		t.Fatalf("a closed terminal answered %d queries", n)
	}
}

func TestReplies(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{"", ""},
		{"ls -l\r", ""},
		{"\x1b[12;40R", "R"},
		{"\x1b[?12;40;1R", "R"},
		{"\x1b[0n", "n"},
		{"\x1b[?62;1;6;22c", "c"},
		{"\x1b[>1;10;0c", "c"},
		{"\x1b[?2004;1$y", "y"},
		{"\x1b]11;rgb:0000/0000/0000\x07", "]"},
		{"\x1b]11;rgb:0000/0000/0000\x1b\\", "]"},
		{"\x1bP1$r0m\x1b\\", "P"},
		{"\x1b[A\x1b[1;5C", "AC"},
		{"a\x1b[3;1Rb\x1b[0nc", "Rn"},
		{"\x1b[12;4", ""},         // incomplete
		{"\x1b]11;rgb:00", ""},    // unterminated
		{"\x1b]11\x1b[1;1R", "R"}, // a string cut by another sequence
		{"\x1b\x1b[1;1R", "R"},    // a lone ESC (the Escape key)
		{"\x1bO", ""},             // SS3 prefix alone
		{strings.Repeat("\x1b[", 3), ""},
	}
	for _, tt := range tests {
		if got := string(Replies([]byte(tt.in))); got != tt.want {
			t.Errorf("Replies(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// FuzzReplies: any client input parses without panicking, into no more
// replies than it has ESC bytes, each of a kind a reply can have.
func FuzzReplies(f *testing.F) {
	for _, s := range []string{"\x1b[12;40R", "\x1b]11;rgb:0/0/0\x07", "\x1bP1$r\x1b\\", "ls\r", "\x1b[", "\x1b]\x1b"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		kinds := Replies(p)
		if len(kinds) > bytes.Count(p, []byte{esc}) {
			t.Fatalf("%d replies in %d ESC bytes", len(kinds), bytes.Count(p, []byte{esc}))
		}
		for _, k := range kinds {
			if k != ']' && k != 'P' && (k < 0x40 || k > 0x7e) {
				t.Fatalf("kind %q", k)
			}
		}
	})
}

// FuzzTerminalOutput: arbitrary program output, cut anywhere, never panics
// or blocks the model, keeps the cursor on the screen, and every answer it
// provokes is a whole escape sequence.
func FuzzTerminalOutput(f *testing.F) {
	for _, s := range []string{"\x1b[6n", "ab\x1b[5n\x1b[c", "\x1b[?2004h\x1b[6n", "\x1b[999;999H\x1b[6n", "\x1b]11;?\x07", "\x1b[?1049h\x1b[6n\x1b[?1049l", "\x1b[18t"} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, p []byte, cut uint8) {
		var mu sync.Mutex
		var answers [][]byte
		term := New(Config{Cols: 20, Rows: 5, Reply: func(_ context.Context, b []byte) error {
			mu.Lock()
			answers = append(answers, b)
			mu.Unlock()
			return nil
		}})
		i := min(int(cut), len(p))
		term.Output(p[:i])
		term.Output(p[i:])
		row, col := term.Cursor()
		term.Close()
		if row < 1 || row > 5 || col < 1 || col > 20 {
			t.Fatalf("cursor %d;%d off a 20x5 screen", row, col)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, a := range answers {
			if len(a) < 2 || a[0] != esc {
				t.Fatalf("answer %q is not an escape sequence", a)
			}
		}
	})
}
