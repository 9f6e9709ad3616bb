package agentos

import (
	"path"
	"strings"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"
)

// commandArgv turns a command line into the argv to launch.
//
// A simple command, literal words with any quoting and nothing a shell must
// interpret, is launched directly, as the official client does: going
// through the guest shell costs several times more, and on 0.2.21 a
// grandchild of a guest shell never gets to run, so a user's own
// `sh -c '…'` must never be wrapped in a second shell. That is why a line of
// the form `<shell> [options] -c <script> [args]` is launched directly even
// when its script word holds quoted expansions (`sh -c "echo $x"`): they are
// the inner shell's to expand, and it sees the same environment. A line
// whose first word is a shell builtin or keyword, and anything else a shell
// must interpret, runs as `sh -c <line>`.
func commandArgv(line string) []string {
	if strings.TrimSpace(line) == "" {
		return nil
	}
	if argv, ok := directArgv(line); ok {
		return argv
	}
	return []string{"sh", "-c", line}
}

// directArgv returns the argv of line when it can be launched without a
// shell, and false when it needs one.
func directArgv(line string) ([]string, bool) {
	call, ok := simpleCall(line)
	if !ok {
		return nil, false
	}
	argv := make([]string, len(call.Args))
	literal := make([]bool, len(call.Args))
	allLiteral := true
	for i, w := range call.Args {
		if literal[i] = isLiteral(w); literal[i] {
			s, ok := unquote(line, w)
			if !ok {
				return nil, false
			}
			argv[i] = s
		}
		allLiteral = allLiteral && literal[i]
	}
	if !literal[0] || needsShell(argv[0]) {
		return nil, false
	}
	if allLiteral {
		return argv, true
	}
	// Only the script word of a shell invocation may hold expansions: every
	// other word would have been expanded by the shell this line bypasses.
	script, ok := shellScriptIndex(argv, literal)
	if !ok {
		return nil, false
	}
	for i := range argv {
		if i != script && !literal[i] {
			return nil, false
		}
	}
	s, ok := unquote(line, call.Args[script])
	if !ok {
		return nil, false
	}
	argv[script] = s
	return argv, true
}

// simpleCall parses line and returns its command when the line is one
// simple command: no operators, redirections, assignments, background or
// negation.
func simpleCall(line string) (*syntax.CallExpr, bool) {
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(line), "")
	if err != nil || len(f.Stmts) != 1 {
		return nil, false
	}
	st := f.Stmts[0]
	if st.Negated || st.Background || st.Coprocess || st.Disown || len(st.Redirs) > 0 {
		return nil, false
	}
	call, ok := st.Cmd.(*syntax.CallExpr)
	if !ok || len(call.Assigns) > 0 || len(call.Args) == 0 {
		return nil, false
	}
	return call, true
}

// unquotedSpecial are the characters that make an unquoted word subject to
// tilde, brace or pathname expansion.
const unquotedSpecial = "~*?[]{}"

// isLiteral reports whether w means the same to every shell once its quotes
// are removed: literal text, single quotes, ANSI-C quotes, and double quotes
// holding no expansion.
func isLiteral(w *syntax.Word) bool {
	for _, p := range w.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			if strings.ContainsAny(p.Value, unquotedSpecial) {
				return false
			}
		case *syntax.SglQuoted:
		case *syntax.DblQuoted:
			for _, q := range p.Parts {
				if _, ok := q.(*syntax.Lit); !ok {
					return false
				}
			}
			if p.Dollar {
				// $"…" is a locale translation.
				return false
			}
		default:
			return false
		}
	}
	return true
}

// shells are the programs whose `-c` script is launched without a second
// shell around them.
var shells = map[string]bool{"sh": true, "bash": true, "dash": true, "ash": true, "ksh": true, "mksh": true, "zsh": true}

// shellScriptIndex returns the index of the script word of a
// `<shell> [options] -c <script> [args]` argv. Options are single words
// (-e, -lc, +x, --norc) except -o/+o, which take the next word.
func shellScriptIndex(argv []string, literal []bool) (int, bool) {
	if !shells[path.Base(argv[0])] {
		return 0, false
	}
	sawC := false
	i := 1
	for ; i < len(argv) && literal[i]; i++ {
		w := argv[i]
		if w == "--" || w == "-" {
			i++
			break
		}
		if len(w) < 2 || (w[0] != '-' && w[0] != '+') {
			break
		}
		if strings.HasPrefix(w, "--") {
			continue
		}
		if w[0] == '-' && strings.ContainsRune(w[1:], 'c') {
			sawC = true
		}
		if strings.ContainsRune(w[1:], 'o') {
			i++
		}
	}
	return i, sawC && i < len(argv)
}

// unquote returns the text of w with one level of quoting removed and
// nothing expanded: for a literal word its value, for a shell's script word
// what the user meant the inner shell to read. Expansions are allowed inside
// double quotes only; an unquoted one would have been expanded and split by
// the bypassed shell.
func unquote(line string, w *syntax.Word) (string, bool) {
	var b strings.Builder
	for _, p := range w.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			if strings.ContainsAny(p.Value, unquotedSpecial) {
				return "", false
			}
			b.WriteString(unescape(p.Value, ""))
		case *syntax.SglQuoted:
			// A config of its own each time: with nil, expand.Literal sets up
			// a config shared by every caller, which races.
			s, err := expand.Literal(&expand.Config{}, &syntax.Word{Parts: []syntax.WordPart{p}})
			if err != nil {
				return "", false
			}
			b.WriteString(s)
		case *syntax.DblQuoted:
			if p.Dollar {
				return "", false
			}
			for _, q := range p.Parts {
				if lit, ok := q.(*syntax.Lit); ok {
					b.WriteString(unescape(lit.Value, "$`\"\\"))
					continue
				}
				start, end := int(q.Pos().Offset()), int(q.End().Offset())
				if start < 0 || end > len(line) || start > end {
					return "", false
				}
				b.WriteString(line[start:end])
			}
		default:
			return "", false
		}
	}
	return b.String(), true
}

// unescape removes the backslashes of s that quote a character: every one
// outside quotes (special empty), or before one of special inside double
// quotes. A backslash-newline is a line continuation and disappears.
func unescape(s, special string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		next := s[i+1]
		switch {
		case next == '\n':
			i++
		case special == "" || strings.IndexByte(special, next) >= 0:
			b.WriteByte(next)
			i++
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// shellOnly are the builtins that exist only inside a shell, or mean
// something else there than a program of the same name would: a command line
// starting with one runs through the shell. Builtins that are also ordinary
// programs of the guest (echo, printf, pwd, true, false, test, kill) are
// launched directly.
var shellOnly = map[string]bool{
	".": true, ":": true, "alias": true, "bg": true, "bind": true, "break": true, "builtin": true,
	"cd": true, "command": true, "continue": true, "declare": true, "dirs": true, "disown": true,
	"enable": true, "eval": true, "exec": true, "exit": true, "export": true, "fc": true, "fg": true,
	"getopts": true, "hash": true, "history": true, "jobs": true, "let": true, "local": true,
	"logout": true, "popd": true, "pushd": true, "read": true, "readonly": true, "return": true,
	"set": true, "shift": true, "shopt": true, "source": true, "suspend": true, "times": true,
	"trap": true, "type": true, "typeset": true, "ulimit": true, "umask": true, "unalias": true,
	"unset": true, "wait": true,
	// Reserved words the parser takes for plain words in some positions.
	"if": true, "then": true, "else": true, "elif": true, "fi": true, "for": true, "while": true,
	"until": true, "do": true, "done": true, "case": true, "esac": true, "in": true, "function": true,
	"select": true, "time": true, "coproc": true, "{": true, "}": true, "!": true, "[[": true, "]]": true,
}

// needsShell reports whether a command line starting with name must run
// through the shell. An empty name is the shell's to report.
func needsShell(name string) bool { return name == "" || shellOnly[name] }
