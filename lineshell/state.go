package lineshell

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// lineState is what a line left behind for the next: see wrapper.
type lineState struct {
	status int
	cwd    string
	env    map[string]string
}

// notCarried are exported variables the shell sets for itself in every
// line, so carrying them over would be wrong (PWD follows the working
// directory) or meaningless.
var notCarried = map[string]bool{"PWD": true, "SHLVL": true, "_": true, "COLUMNS": true, "LINES": true}

// parseState reads the state file a line wrote. mine is false when the
// file is not line n's: the line ended the shell before writing it. A file
// that is line n's but garbled past its status is an error, with what could
// be read.
func parseState(raw []byte, n int) (st lineState, mine bool, err error) {
	head, rest, _ := bytes.Cut(raw, []byte("\n"))
	if string(head) != strconv.Itoa(n) {
		return lineState{}, false, nil
	}
	head, rest, _ = bytes.Cut(rest, []byte("\n"))
	if st.status, err = strconv.Atoi(string(head)); err != nil {
		return lineState{}, true, fmt.Errorf("lineshell: the line's status %q", head)
	}
	cwd, rest, found := bytes.Cut(rest, []byte("\n"))
	if !found || len(cwd) == 0 || cwd[0] != '/' {
		return st, true, fmt.Errorf("lineshell: the line's directory %q", cwd)
	}
	st.cwd = string(cwd)
	if st.env, err = parseEnv(string(rest)); err != nil {
		return st, true, err
	}
	return st, true, nil
}

// parseEnv reads the exported variables as the wrapper writes them: each
// NAME=value followed by a NUL byte. (brush's `export -p` does not escape
// quotes in values, so it cannot be read back.)
func parseEnv(s string) (map[string]string, error) {
	env := map[string]string{}
	for len(s) > 0 {
		kv, rest, found := strings.Cut(s, "\x00")
		if !found {
			return nil, fmt.Errorf("lineshell: the variables end in %q", trim(kv))
		}
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("lineshell: a variable %q", trim(kv))
		}
		if !notCarried[name] {
			env[name] = value
		}
		s = rest
	}
	return env, nil
}

// trim shortens text quoted in an error.
func trim(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
