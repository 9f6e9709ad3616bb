package lineshell

import (
	"strconv"
	"unicode/utf8"
)

// editor is the line being typed at the prompt, with the cursor and the
// history, and the terminal output that shows each edit. It is not safe for
// concurrent use; the Shell's mutex guards it.
type editor struct {
	prompt  string
	line    []rune
	cursor  int        // index into line
	history [][]rune   // oldest first
	browse  int        // index into history while browsing; len(history) when not
	saved   []rune     // the line being typed when browsing began
	esc     []byte     // an escape sequence being read
	partial []byte     // the start of a UTF-8 sequence split across writes
	lastCR  bool       // the previous key was CR: a following LF is the same Enter
	maxLine int        // longest line kept (bytes); longer input is dropped
	out     []byte     // terminal output of the keys handled so far
	events  []keyEvent // what the keys asked of the shell, in order
}

// keyEvent is what a key asks of the shell besides editing the line.
type keyEvent struct {
	kind eventKind
	line string // for evRun
}

type eventKind int

const (
	evRun       eventKind = iota // Enter: run line
	evInterrupt                  // Ctrl-C
	evEOF                        // Ctrl-D at an empty line
)

const maxHistory = 500

func newEditor(prompt string, maxLine int) *editor {
	return &editor{prompt: prompt, maxLine: maxLine}
}

// Keys feeds typed bytes to the editor. It returns the terminal output to
// show and the events the keys raised, in order; both are the caller's.
func (e *editor) Keys(p []byte) (out []byte, events []keyEvent) {
	for _, b := range p {
		e.key(b)
	}
	out, events = e.out, e.events
	e.out, e.events = nil, nil
	return out, events
}

// Prompt returns the output that shows a fresh prompt with the current
// (normally empty) line.
func (e *editor) Prompt() []byte {
	e.out = append(e.out, e.prompt...)
	e.out = append(e.out, string(e.line)...)
	e.moveBack(len(e.line) - e.cursor)
	out := e.out
	e.out = nil
	return out
}

func (e *editor) key(b byte) {
	if e.esc != nil {
		e.escape(b)
		return
	}
	if len(e.partial) > 0 || b >= 0x80 {
		e.partial = append(e.partial, b)
		if utf8.FullRune(e.partial) {
			r, _ := utf8.DecodeRune(e.partial)
			e.partial = e.partial[:0]
			e.insert(r)
		}
		return
	}
	cr := e.lastCR
	e.lastCR = b == '\r'
	switch b {
	case '\r':
		e.enter()
	case '\n':
		if !cr {
			e.enter()
		}
	case 0x1b:
		e.esc = []byte{}
	case 0x03: // Ctrl-C
		e.out = append(e.out, "^C\r\n"...)
		e.line, e.cursor = e.line[:0], 0
		e.browse = len(e.history)
		e.events = append(e.events, keyEvent{kind: evInterrupt})
	case 0x04: // Ctrl-D
		if len(e.line) == 0 {
			e.events = append(e.events, keyEvent{kind: evEOF})
			return
		}
		if e.cursor < len(e.line) {
			e.line = append(e.line[:e.cursor], e.line[e.cursor+1:]...)
			e.redraw()
		}
	case 0x7f, 0x08: // Backspace
		if e.cursor > 0 {
			e.line = append(e.line[:e.cursor-1], e.line[e.cursor:]...)
			e.cursor--
			e.redraw()
		}
	case 0x01: // Ctrl-A
		e.moveTo(0)
	case 0x05: // Ctrl-E
		e.moveTo(len(e.line))
	case 0x02: // Ctrl-B
		e.moveTo(e.cursor - 1)
	case 0x06: // Ctrl-F
		e.moveTo(e.cursor + 1)
	case 0x15: // Ctrl-U
		e.line = append(e.line[:0], e.line[e.cursor:]...)
		e.cursor = 0
		e.redraw()
	case 0x0b: // Ctrl-K
		e.line = e.line[:e.cursor]
		e.redraw()
	case 0x17: // Ctrl-W
		i := e.cursor
		for i > 0 && e.line[i-1] == ' ' {
			i--
		}
		for i > 0 && e.line[i-1] != ' ' {
			i--
		}
		e.line = append(e.line[:i], e.line[e.cursor:]...)
		e.cursor = i
		e.redraw()
	case 0x0c: // Ctrl-L
		e.out = append(e.out, "\x1b[H\x1b[2J"...)
		e.out = append(e.out, e.Prompt()...)
	case 0x10: // Ctrl-P
		e.historyStep(-1)
	case 0x0e: // Ctrl-N
		e.historyStep(1)
	case '\t':
		e.insert(' ')
	default:
		if b >= 0x20 {
			e.insert(rune(b))
		}
	}
}

// escape reads one byte of an escape sequence: CSI (ESC [ params final) or
// SS3 (ESC O final). Sequences it does not know (a bracketed paste's
// markers, terminal replies) are dropped whole.
func (e *editor) escape(b byte) {
	e.esc = append(e.esc, b)
	switch {
	case len(e.esc) == 1:
		if b != '[' && b != 'O' {
			e.esc = nil // Alt-key or a lone ESC: dropped
		}
		return
	case e.esc[0] == 'O':
		e.esc = nil
		e.cursorKey(b, "")
		return
	case b >= 0x40 && b <= 0x7e: // a CSI's final byte
		params := string(e.esc[1 : len(e.esc)-1])
		e.esc = nil
		e.cursorKey(b, params)
		return
	case len(e.esc) > 32:
		e.esc = nil // not a sequence anything sends: give up on it
	}
}

func (e *editor) cursorKey(final byte, params string) {
	switch final {
	case 'A':
		e.historyStep(-1)
	case 'B':
		e.historyStep(1)
	case 'C':
		e.moveTo(e.cursor + 1)
	case 'D':
		e.moveTo(e.cursor - 1)
	case 'H':
		e.moveTo(0)
	case 'F':
		e.moveTo(len(e.line))
	case '~':
		switch params {
		case "1", "7":
			e.moveTo(0)
		case "4", "8":
			e.moveTo(len(e.line))
		case "3": // Delete
			if e.cursor < len(e.line) {
				e.line = append(e.line[:e.cursor], e.line[e.cursor+1:]...)
				e.redraw()
			}
		}
	}
}

func (e *editor) insert(r rune) {
	if len(string(e.line))+utf8.RuneLen(r) > e.maxLine {
		e.out = append(e.out, 0x07) // bell: the line is full
		return
	}
	e.line = append(e.line, 0)
	copy(e.line[e.cursor+1:], e.line[e.cursor:])
	e.line[e.cursor] = r
	e.cursor++
	if e.cursor == len(e.line) {
		e.out = utf8.AppendRune(e.out, r)
		return
	}
	e.redraw()
}

func (e *editor) enter() {
	line := string(e.line)
	e.out = append(e.out, "\r\n"...)
	if len(e.line) > 0 && (len(e.history) == 0 || string(e.history[len(e.history)-1]) != line) {
		e.history = append(e.history, append([]rune(nil), e.line...))
		if len(e.history) > maxHistory {
			e.history = e.history[1:]
		}
	}
	e.line, e.cursor = nil, 0
	e.browse = len(e.history)
	e.saved = nil
	e.events = append(e.events, keyEvent{kind: evRun, line: line})
}

func (e *editor) historyStep(d int) {
	i := e.browse + d
	if i < 0 || i > len(e.history) {
		return
	}
	if e.browse == len(e.history) {
		e.saved = append([]rune(nil), e.line...)
	}
	e.browse = i
	if i == len(e.history) {
		e.line = append([]rune(nil), e.saved...)
	} else {
		e.line = append([]rune(nil), e.history[i]...)
	}
	e.cursor = len(e.line)
	e.redraw()
}

func (e *editor) moveTo(i int) {
	i = max(0, min(i, len(e.line)))
	switch {
	case i < e.cursor:
		e.moveBack(e.cursor - i)
	case i > e.cursor:
		e.out = append(e.out, "\x1b["...)
		e.out = strconv.AppendInt(e.out, int64(i-e.cursor), 10)
		e.out = append(e.out, 'C')
	}
	e.cursor = i
}

func (e *editor) moveBack(n int) {
	if n > 0 {
		e.out = append(e.out, "\x1b["...)
		e.out = strconv.AppendInt(e.out, int64(n), 10)
		e.out = append(e.out, 'D')
	}
}

// redraw rewrites the prompt's line: back to its start, the prompt and the
// line, the rest of the row cleared, the cursor put back.
func (e *editor) redraw() {
	e.out = append(e.out, '\r')
	e.out = append(e.out, e.prompt...)
	e.out = append(e.out, string(e.line)...)
	e.out = append(e.out, "\x1b[K"...)
	e.moveBack(len(e.line) - e.cursor)
}
