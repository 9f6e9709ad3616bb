package terminal

const esc = 0x1b

// Replies returns the kinds of the complete terminal replies in p, in
// order: for a control sequence (CSI) its final byte ('R' for a cursor
// position report, 'n' for a device status report, 'c' for device
// attributes, 'y' for a mode report), ']' for an operating system command
// and 'P' for a device control string. Keystrokes that are control
// sequences (arrows, function keys) come out too; they never match a query
// the Terminal waits on, except a modified F3 key, which terminals encode
// like a cursor position report and programs read as one.
func Replies(p []byte) []byte {
	var kinds []byte
	for i := 0; i < len(p); {
		if p[i] != esc {
			i++
			continue
		}
		kind, n := parseReply(p[i:])
		if n == 0 {
			i++
			continue
		}
		kinds = append(kinds, kind)
		i += n
	}
	return kinds
}

// replyKind is the kind of one answer of the emulator (0 when it is not
// a sequence Replies recognises).
func replyKind(b []byte) byte {
	kind, _ := parseReply(b)
	return kind
}

// parseReply parses the sequence that starts p (p[0] is ESC) and returns its
// kind and length, or 0, 0 when p does not start with a complete one.
func parseReply(p []byte) (kind byte, n int) {
	if len(p) < 2 || p[0] != esc {
		return 0, 0
	}
	switch p[1] {
	case '[':
		i := 2
		for i < len(p) && p[i] >= 0x30 && p[i] <= 0x3f { // parameters
			i++
		}
		for i < len(p) && p[i] >= 0x20 && p[i] <= 0x2f { // intermediates
			i++
		}
		if i < len(p) && p[i] >= 0x40 && p[i] <= 0x7e {
			return p[i], i + 1
		}
		return 0, 0
	case ']', 'P':
		// A string ends with BEL (OSC only) or ST (ESC \).
		for i := 2; i < len(p); i++ {
			switch {
			case p[i] == 0x07 && p[1] == ']':
				return ']', i + 1
			case p[i] == esc && i+1 < len(p) && p[i+1] == '\\':
				return p[1], i + 2
			case p[i] == esc:
				return 0, 0
			}
		}
	}
	return 0, 0
}
