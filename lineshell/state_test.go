package lineshell

import (
	"maps"
	"testing"
)

func TestParseState(t *testing.T) {
	for _, c := range []struct {
		name    string
		raw     string
		n       int
		mine    bool
		wantErr bool
		want    lineState
	}{
		{"a line's state", "3\n1\n/tmp\nA=1\x00B=x\ny\x00PWD=/tmp\x00SHLVL=1\x00", 3, true, false,
			lineState{status: 1, cwd: "/tmp", env: map[string]string{"A": "1", "B": "x\ny"}}},
		{"a value with = and quotes", "1\n0\n/\nQ=a=\"b\" $c\\d\x00", 1, true, false,
			lineState{status: 0, cwd: "/", env: map[string]string{"Q": "a=\"b\" $c\\d"}}},
		{"an earlier line's: this one ended the shell", "2\n0\n/tmp\n", 3, false, false, lineState{}},
		{"empty: the first line ended the shell", "", 1, false, false, lineState{}},
		{"bad status", "1\nx\n/tmp\n", 1, true, true, lineState{}},
		{"bad directory", "1\n0\ntmp\n", 1, true, true, lineState{status: 0}},
		{"variables cut short", "1\n0\n/tmp\nA=1", 1, true, true, lineState{status: 0, cwd: "/tmp"}},
		{"a variable without =", "1\n0\n/tmp\nA\x00", 1, true, true, lineState{status: 0, cwd: "/tmp"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, mine, err := parseState([]byte(c.raw), c.n)
			if mine != c.mine || (err != nil) != c.wantErr {
				t.Fatalf("mine %v, err %v; want %v, error %v", mine, err, c.mine, c.wantErr)
			}
			if st.status != c.want.status || st.cwd != c.want.cwd || !maps.Equal(st.env, c.want.env) {
				t.Fatalf("state %+v, want %+v", st, c.want)
			}
		})
	}
}

// FuzzParseState: the state file is written by guest code, so any bytes
// must parse or fail without a panic.
func FuzzParseState(f *testing.F) {
	f.Add([]byte("3\n1\n/tmp\nA=1\x00"), 3)
	f.Add([]byte("1\n0\n/\n"), 1)
	f.Fuzz(func(t *testing.T, raw []byte, n int) {
		st, mine, err := parseState(raw, n)
		if mine && err == nil && (st.cwd == "" || st.cwd[0] != '/') {
			t.Fatalf("accepted a directory %q", st.cwd)
		}
	})
}
