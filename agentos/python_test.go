package agentos

import (
	"errors"
	"regexp"
	"slices"
	"testing"
	"time"
)

// TestPythonArgs: what the engine is sent for a Python command line.
func TestPythonArgs(t *testing.T) {
	for _, c := range []struct {
		argv []string
		want []string
		err  error
	}{
		{[]string{"python3", "-c", "print(1)"}, []string{"-c", "print(1)"}, nil},
		{[]string{"python3", "--version"}, []string{"-c", versionProgram}, nil},
		{[]string{"/usr/bin/python", "-u", "-V"}, []string{"-c", versionProgram}, nil},
		{[]string{"python3", "-VV"}, []string{"-c", longVersionProgram}, nil},
		{[]string{"python3", "s.py", "a"}, []string{"./s.py", "a"}, nil},
		{[]string{"python3", "-u", "s.py"}, []string{"-u", "./s.py"}, nil},
		{[]string{"python3", "./s.py"}, []string{"./s.py"}, nil},
		{[]string{"python3", "/w/s.py"}, []string{"/w/s.py"}, nil},
		{[]string{"python3", "-"}, []string{"-"}, nil},
		{[]string{"python3"}, []string{}, nil},
		{[]string{"python3", "-m", "json.tool"}, []string{"-m", "json.tool"}, nil},
		{[]string{"python3", "-W", "ignore", "x.py"}, []string{"-W", "ignore", "x.py"}, nil}, // the engine's to refuse
		{[]string{"pip", "list"}, []string{"list"}, nil},
		{[]string{"pip3", "install", "requests"}, nil, ErrPackageInstall},
		{[]string{"pip", "-q", "install", "requests"}, nil, ErrPackageInstall},
		{[]string{"python3", "-m", "pip", "install", "x"}, nil, ErrPackageInstall},
	} {
		got, err := pythonArgs(c.argv)
		if c.err != nil {
			if !errors.Is(err, c.err) || !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("%q: err %v, want %v", c.argv, err, c.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%q: %q, %v; want %q", c.argv, got, err, c.want)
		}
	}
	if _, ok := PythonLineArgv("python3 -c 'print(1)'"); !ok {
		t.Error("python3 -c is a direct line")
	}
	for _, line := range []string{"echo hi", "python3 -c 1 | cat", "cd /tmp && python3 x.py", "X=1 python3 x.py"} {
		if _, ok := PythonLineArgv(line); ok {
			t.Errorf("%q is not a direct Python line", line)
		}
	}
}

// TestPython runs Python programs through the real engine: -c with the
// standard library, --version (answered by the runtime), a script named
// without a directory that reads its stdin and arguments, -m with stdin,
// and the refusals that name their reason.
func TestPython(t *testing.T) {
	vm := newVM(t, VMOptions{})
	ctx := testContext(t, 10*time.Second)
	script := "import sys, statistics\nprint(sys.argv[1:], statistics.mean([1, 2, 3]), sys.stdin.read().strip().upper())\n"
	if err := vm.WriteFile(ctx, "/workspace/s.py", []byte(script)); err != nil {
		t.Fatal(err)
	}
	run := func(argv []string, stdin string) *ExecResult {
		t.Helper()
		ctx := testContext(t, 90*time.Second)
		o := ExecOptions{Timeout: 60 * time.Second}
		if stdin != "" {
			o.Stdin = []byte(stdin)
		}
		r, err := vm.ExecArgv(ctx, argv, o)
		if err != nil {
			t.Fatalf("%q: %v", argv, err)
		}
		if r.ExitCode != 0 {
			t.Fatalf("%q: exit %d, stderr %q", argv, r.ExitCode, r.Stderr)
		}
		return r
	}
	if r := run([]string{"python3", "-c", "import json,sys; print(json.dumps({'v': sys.version_info[0]}))"}, ""); string(r.Stdout) != "{\"v\": 3}\n" {
		t.Errorf("-c: stdout %q", r.Stdout)
	}
	if r := run([]string{"python3", "--version"}, ""); !regexp.MustCompile(`^Python 3\.\d+\.\d+\n$`).Match(r.Stdout) {
		t.Errorf("--version: stdout %q", r.Stdout)
	}
	if r := run([]string{"python3", "s.py", "a1"}, "hello"); string(r.Stdout) != "['a1'] 2 HELLO\n" {
		t.Errorf("script: stdout %q", r.Stdout)
	}
	if r := run([]string{"python3", "-m", "json.tool"}, `{"a":1}`); string(r.Stdout) != "{\n    \"a\": 1\n}\n" {
		t.Errorf("-m json.tool: stdout %q", r.Stdout)
	}

	_, err := vm.ExecArgv(testContext(t, 30*time.Second), []string{"python3", "-X", "dev", "s.py"}, ExecOptions{})
	var rej *RejectedError
	if !errors.As(err, &rej) || rej.CommandFault() != "unsupported python option: -X" {
		t.Errorf("-X: %v, want the engine's refusal naming the option", err)
	}
	if _, err := vm.ExecArgv(testContext(t, 30*time.Second), []string{"pip", "install", "requests"}, ExecOptions{}); !errors.Is(err, ErrPackageInstall) {
		t.Errorf("pip install: %v, want ErrPackageInstall", err)
	}
}
