package agentos

import (
	"strings"
	"testing"
	"time"
)

// TestCodeContext: the engine's retained contexts keep state between runs,
// in Python and JavaScript; a run that raises is a failed result with its
// traceback, and the context stays usable; output streams before the end.
func TestCodeContext(t *testing.T) {
	vm := newVM(t, VMOptions{})
	for _, c := range []struct {
		lang            Language
		set, use, raise string
		want, errWord   string
		stream          string
	}{
		{LanguagePython, "x = 6", "print(x * 7)", "def f():\n    raise ValueError('boom')\nf()", "42\n", "ValueError",
			"print('first', flush=True)\nn = 0\nfor i in range(3000000):\n    n += i\nprint('second')"},
		{LanguageJavaScript, "globalThis.x = 6", "console.log(x * 7)", "function f() { throw new TypeError('boom') }\nf()", "42\n", "TypeError",
			"console.log('first'); let n = 0; for (let i = 0; i < 1e8; i++) n += i; console.log('second')"},
	} {
		t.Run(string(c.lang), func(t *testing.T) {
			cc, err := vm.CreateCodeContext(testContext(t, 30*time.Second), CodeContextOptions{Language: c.lang})
			if err != nil {
				t.Fatal(err)
			}
			run := func(code string, o RunOptions) *RunResult {
				t.Helper()
				r, err := cc.Run(testContext(t, 90*time.Second), code, o)
				if err != nil {
					t.Fatalf("%q: %v", code, err)
				}
				return r
			}
			if r := run(c.set, RunOptions{}); r.Outcome != RunSucceeded {
				t.Fatalf("set: %+v", r)
			}
			start := time.Now()
			if r := run(c.use, RunOptions{}); r.Outcome != RunSucceeded || string(r.Stdout) != c.want {
				t.Fatalf("use: %+v stdout %q stderr %q", r, r.Stdout, r.Stderr)
			}
			t.Logf("a run in a warm context: %s", time.Since(start))
			r := run(c.raise, RunOptions{})
			all := string(r.Stderr)
			if r.Error != nil {
				all += r.Error.Name + r.Error.Message + r.Error.Stack
			}
			if r.Outcome != RunFailed || !strings.Contains(all, c.errWord) || !strings.Contains(all, "boom") {
				t.Fatalf("raise: %+v stderr %q error %+v", r, r.Stderr, r.Error)
			}
			if r := run(c.use, RunOptions{}); r.Outcome != RunSucceeded || string(r.Stdout) != c.want {
				t.Fatalf("after the failure: %+v stdout %q", r, r.Stdout)
			}
			var first time.Time
			r = run(c.stream, RunOptions{OnOutput: func(o Output) {
				if first.IsZero() && strings.Contains(string(o.Data), "first") {
					first = time.Now()
				}
			}})
			end := time.Now()
			if r.Outcome != RunSucceeded || first.IsZero() {
				t.Fatalf("stream: %+v stdout %q", r, r.Stdout)
			}
			// Buffered output would arrive with the end.
			if end.Sub(first) < 200*time.Millisecond {
				t.Fatalf("stream: the first output came %s before the end", end.Sub(first))
			}
			if err := cc.Close(testContext(t, 30*time.Second)); err != nil {
				t.Fatal(err)
			}
		})
	}
}
