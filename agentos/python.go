package agentos

import (
	"fmt"
	"path"
	"strings"
)

// The engine (agentos-sidecar 0.2.21) serves python, python3, pip and pip3
// with the Pyodide runtime compiled into its binary: CPython 3.13 built for
// WebAssembly, run by the engine's V8 with the Pyodide distribution
// (pyodide.asm.wasm, python_stdlib.zip, pyodide-lock.json and the numpy
// and pandas wheels) it unpacks into its own temporary folder and shows the
// guest at /__agentos_pyodide. Nothing is fetched: the runtime works
// offline. The engine parses the command line itself (-c, -m, a script,
// `-`, no argument for the REPL) and refuses what it does not know; the
// rewrites below cover what it refuses or gets wrong though a user of
// CPython would expect it to work.

// PreloadPackagesEnv names the engine's variable that loads the listed
// packages (a JSON array; the engine ships only numpy and pandas) before a
// Python program runs: without it `import numpy` fails.
const PreloadPackagesEnv = "AGENTOS_PYTHON_PRELOAD_PACKAGES"

// OfflinePythonPackages are the packages beyond the standard library that
// the engine's Pyodide loads without a network, by PreloadPackagesEnv
// (measured on 0.2.21: numpy 2.2.5, pandas 2.3.3; the engine refuses any
// other name).
var OfflinePythonPackages = []string{"numpy", "pandas"}

// ErrPackageInstall is the refusal of `pip install`: the engine's Pyodide
// has no package index to install from. errors.Is finds it in the launch's
// error, which also matches ErrInvalidArgument.
var ErrPackageInstall = fmt.Errorf("%w: pip install cannot work in this VM: its Python (the engine's Pyodide) has no package index to install from; beyond the standard library only %s load, by setting %s to a JSON list of them (for example [\"numpy\"]) in the process's environment",
	ErrInvalidArgument, strings.Join(OfflinePythonPackages, " and "), PreloadPackagesEnv)

// IsPythonCommand reports whether the engine serves name (a command or its
// path) with its Python runtime.
func IsPythonCommand(name string) bool {
	switch path.Base(name) {
	case "python", "python3", "pip", "pip3":
		return true
	}
	return false
}

// pythonIgnoredFlags are the value-less interpreter flags the engine skips
// before it looks for the program (read from its command parser).
var pythonIgnoredFlags = map[string]bool{
	"-B": true, "-E": true, "-I": true, "-O": true, "-OO": true, "-q": true, "-s": true,
	"-S": true, "-u": true, "-v": true, "-b": true, "-d": true, "-x": true,
}

// versionProgram prints what `python3 --version` prints, asked of the
// runtime itself: the engine refuses the option ("unsupported python
// option: --version"), and the answer must be the version that runs, not
// one written down here.
const (
	versionProgram     = "import sys; print('Python ' + sys.version.split()[0])"
	longVersionProgram = "import sys; print('Python ' + sys.version)"
)

// pythonArgs returns the arguments to send the engine for a Python runtime
// command argv, or an error for a command that cannot work. Anything else
// it leaves as it is, for the engine to run or refuse.
func pythonArgs(argv []string) ([]string, error) {
	args := argv[1:]
	if base := path.Base(argv[0]); base == "pip" || base == "pip3" {
		if pipInstalls(args) {
			return nil, ErrPackageInstall
		}
		return args, nil
	}
	i := 0
	for i < len(args) && pythonIgnoredFlags[args[i]] {
		i++
	}
	if i == len(args) {
		return args, nil
	}
	switch first := args[i]; {
	case first == "-V" || first == "--version":
		return []string{"-c", versionProgram}, nil
	case first == "-VV":
		return []string{"-c", longVersionProgram}, nil
	case first == "-m" && i+1 < len(args) && args[i+1] == "pip" && pipInstalls(args[i+2:]):
		return nil, ErrPackageInstall
	case !strings.HasPrefix(first, "-") && !strings.Contains(first, "/"):
		// A script named without a directory (`python3 s.py`): the engine
		// takes only ./, ../ and absolute paths for files and fails the
		// rest with "[object Object]". The program sees ./s.py as argv[0].
		out := append([]string{}, args[:i]...)
		out = append(out, "./"+first)
		return append(out, args[i+1:]...), nil
	}
	return args, nil
}

// pipInstalls reports whether pip's arguments ask it to install.
func pipInstalls(args []string) bool {
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			return a == "install"
		}
	}
	return false
}

// PythonLineArgv returns the argv of a command line that is one simple
// command of the Python runtime (python3 -c '…', python3 script.py), to be
// launched as a process of its own rather than inside a guest shell:
// measured on 0.2.21, python started by a guest shell stalls after loading
// Pyodide, before the program's first line, until the engine's CPU-time
// budget kills it 90 s later, while the same command launched directly
// answers in about 5 s.
func PythonLineArgv(line string) ([]string, bool) {
	argv, ok := directArgv(line)
	if !ok || !IsPythonCommand(argv[0]) {
		return nil, false
	}
	return argv, true
}
