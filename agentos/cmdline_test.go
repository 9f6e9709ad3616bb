package agentos

import (
	"slices"
	"strings"
	"sync"
	"testing"

	"mvdan.cc/sh/v3/syntax"
)

// commandLines are command lines and the argv each must launch; a nil want
// means the line runs as `sh -c <line>`.
var commandLines = []struct {
	in   string
	want []string
}{
	// Simple commands run directly, with their quotes removed.
	{"true", []string{"true"}},
	{"  echo  hi  ", []string{"echo", "hi"}},
	{`grep -r "hello world" /workspace`, []string{"grep", "-r", "hello world", "/workspace"}},
	{"ls --color=never /", []string{"ls", "--color=never", "/"}},
	{"echo '' x", []string{"echo", "", "x"}},
	{"echo 'quoted'", []string{"echo", "quoted"}},
	{`echo a\ b`, []string{"echo", "a b"}},
	{`echo "a\"b" 'c"d' e\'f`, []string{"echo", `a"b`, `c"d`, "e'f"}},
	{`echo "back\\slash" "keep\n"`, []string{"echo", `back\slash`, `keep\n`}},
	{`echo 'mi'"xed"quo\ ting`, []string{"echo", "mixedquo ting"}},
	{`printf $'a\tb\n'`, []string{"printf", "a\tb\n"}},
	{"echo hi # a comment", []string{"echo", "hi"}},
	{"echo a=b", []string{"echo", "a=b"}},
	{`echo '$HOME' "\$HOME"`, []string{"echo", "$HOME", "$HOME"}},
	{`echo '*' "?"`, []string{"echo", "*", "?"}},

	// A shell's -c script is never wrapped in a second shell, however it
	// is quoted; quoted expansions in it are the inner shell's.
	{"sh -c 'cat /etc/hostname; echo a'", []string{"sh", "-c", "cat /etc/hostname; echo a"}},
	{`sh -c "while read l; do echo got $l; done"`, []string{"sh", "-c", "while read l; do echo got $l; done"}},
	{`sh -c "echo \"q\" \$HOME \\ \x"`, []string{"sh", "-c", `echo "q" $HOME \ \x`}},
	{`sh -c "echo $(date +%s) ${HOME:-/} $((1+2)) ` + "`id`" + `"`, []string{"sh", "-c", "echo $(date +%s) ${HOME:-/} $((1+2)) `id`"}},
	{`sh -c 'echo '"$x"' done'`, []string{"sh", "-c", "echo $x done"}},
	{`bash -c 'echo $0 $1' name arg`, []string{"bash", "-c", "echo $0 $1", "name", "arg"}},
	{`bash -lc "echo $PATH"`, []string{"bash", "-lc", "echo $PATH"}},
	{`sh -ec "false; echo $?"`, []string{"sh", "-ec", "false; echo $?"}},
	{`sh -e -c "echo $1" x y`, []string{"sh", "-e", "-c", "echo $1", "x", "y"}},
	{`bash -o pipefail -c "a | b $x"`, []string{"bash", "-o", "pipefail", "-c", "a | b $x"}},
	{`bash --norc -c "echo $x"`, []string{"bash", "--norc", "-c", "echo $x"}},
	{`/bin/sh -c "echo $x"`, []string{"/bin/sh", "-c", "echo $x"}},
	{`/usr/bin/env sh -c 'x'`, []string{"/usr/bin/env", "sh", "-c", "x"}},
	{`sh -c $'echo a\necho b'`, []string{"sh", "-c", "echo a\necho b"}},
	{"sh -c \"echo a\\\nb\"", []string{"sh", "-c", "echo ab"}},
	{`sh -c`, []string{"sh", "-c"}},

	// Expansions outside the script word belong to a shell.
	{`sh -c "echo $1" "$x"`, nil},
	{`sh -c "echo" $x`, nil},
	{`$SHELL -c "echo $x"`, nil},
	{`sh -c echo$x`, nil},
	{`sh "$script"`, nil},
	{`sh -x "echo $x"`, nil},
	{`cat "$x"`, nil},
	{`sh -c "echo $x" | cat`, nil},
	{`FOO=1 sh -c "echo $FOO"`, nil},
	{`sh -c "echo $x" > out`, nil},
	{`echo $(sh -c "echo $x")`, nil},

	// Anything a shell interprets runs through it.
	{"echo a | cat", nil},
	{`echo "$HOME"`, nil},
	{"echo 'unterminated", nil},
	{"cat < f", nil},
	{"echo a; echo b", nil},
	{"echo a && echo b", nil},
	{"echo a\necho b", nil},
	{"FOO=1 env", nil},
	{"ls *.go", nil},
	{"ls ~", nil},
	{"echo {a,b}", nil},
	{"sleep 1 &", nil},
	{"! false", nil},
	{"(cd /tmp)", nil},
	{"{ echo a; }", nil},
	{"if true; then echo a; fi", nil},
	{"for i in 1 2; do echo $i; done", nil},
	{"while false; do :; done", nil},
	{"case a in a) echo a;; esac", nil},
	{"[[ -f x ]]", nil},
	{"[ -f x ]", nil},
	{"cat <<EOF\nx\nEOF", nil},

	// Builtins run through the shell.
	{"exit 7", nil},
	{"cd /tmp && pwd", nil},
	{"cd /tmp", nil},
	{"export A=1", nil},
	{"set -e", nil},
	{"umask", nil},
	{"ulimit -n", nil},
	{"read x", nil},
	{"type ls", nil},
	{". ./env.sh", nil},
	{"source ./env.sh", nil},
	{"alias ll='ls -l'", nil},
	{"unset A", nil},
	{"eval echo hi", nil},
	{"exec ls", nil},
	{"trap 'echo bye' EXIT", nil},
	{"wait", nil},
	{"shift", nil},
	{"return 1", nil},
	{`"exit" 3`, nil},
	{`'' x`, nil},
}

func TestCommandArgv(t *testing.T) {
	for _, tc := range commandLines {
		want := tc.want
		if want == nil {
			want = []string{"sh", "-c", tc.in}
		}
		if got := commandArgv(tc.in); !slices.Equal(got, want) {
			t.Errorf("commandArgv(%q) = %q, want %q", tc.in, got, want)
		}
	}
	for _, blank := range []string{"", "  ", "\t"} {
		if got := commandArgv(blank); got != nil {
			t.Errorf("commandArgv(%q) = %q, want nil", blank, got)
		}
	}
}

// FuzzCommandArgv checks that any line gives an argv to launch (nil for a
// blank one), that a line launched directly never starts with a builtin, and
// that its argv survives being quoted and split again.
func FuzzCommandArgv(f *testing.F) {
	for _, tc := range commandLines {
		f.Add(tc.in)
	}
	f.Fuzz(func(t *testing.T, line string) {
		argv := commandArgv(line)
		if strings.TrimSpace(line) == "" {
			if argv != nil {
				t.Fatalf("blank line %q gave %q", line, argv)
			}
			return
		}
		if slices.Equal(argv, []string{"sh", "-c", line}) {
			return
		}
		if len(argv) == 0 || needsShell(argv[0]) {
			t.Fatalf("commandArgv(%q) = %q launches a builtin or nothing directly", line, argv)
		}
		quoted := make([]string, len(argv))
		for i, a := range argv {
			q, err := syntax.Quote(a, syntax.LangBash)
			if err != nil {
				return // a NUL byte cannot be quoted, nor be in an argument
			}
			quoted[i] = q
		}
		again := strings.Join(quoted, " ")
		// The quoted form may be handed to the shell (the classification is
		// conservative about lone glob characters), never split otherwise.
		if got := commandArgv(again); !slices.Equal(got, argv) && !slices.Equal(got, []string{"sh", "-c", again}) {
			t.Fatalf("commandArgv(%q) = %q, but its quoted form %q gives %q", line, argv, again, got)
		}
	})
}

// TestCommandArgvConcurrently splits command lines from many goroutines at
// once, as concurrent execs do; under -race it holds the splitter free of
// shared state.
func TestCommandArgvConcurrently(t *testing.T) {
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				if got := commandArgv(`printf '%s\n' 'a b' "c"`); len(got) != 4 {
					t.Errorf("commandArgv = %q", got)
					return
				}
			}
		})
	}
	wg.Wait()
}
