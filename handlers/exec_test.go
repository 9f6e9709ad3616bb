package handlers

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
)

func TestEncodeBytes(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		enc  string
	}{
		{"text", []byte("hello\n"), "utf8"},
		{"empty", nil, "utf8"},
		{"tabs and line ends", []byte("a\tb\r\nc\n"), "utf8"},
		{"short lines", []byte("1\n2\n3\n4\n5\n"), "utf8"},
		{"multibyte", []byte("héllo wörld ✓"), "utf8"},
		{"a few escapes", []byte("\x1b[1mbold text here\x1b[0m and more text"), "utf8"},
		{"one NUL", []byte("text\x00text"), "base64"},
		{"all NUL", make([]byte, 1000), "base64"},
		{"invalid UTF-8", []byte{0xff, 0xfe, 'a'}, "base64"},
		{"mostly control", []byte("\x1b[1m\x1b[0m"), "base64"},
		{"a terminal prompt", []byte("\x1b[?2004h$ "), "utf8"},
		{"colored ls", []byte("\x1b[0m\x1b[01;34mdir\x1b[0m  file.txt\n"), "utf8"},
		{"bell and backspace", []byte("ab\x07\x08cd"), "base64"},
		{"DEL bytes", bytes.Repeat([]byte{0x7f, 'a', 'b', 'c'}, 10), "base64"},
		{"HTML-escaped runes", []byte("<<<<>>>>&&&&"), "base64"},
		{"some markup", []byte("<b>bold</b> and a lot more text around it"), "utf8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, enc := encodeBytes(tc.in)
			if enc != tc.enc {
				t.Fatalf("encoding %s, want %s", enc, tc.enc)
			}
			got := []byte(s)
			if enc == "base64" {
				var err error
				if got, err = base64.StdEncoding.DecodeString(s); err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(got, tc.in) {
				t.Fatalf("round trip %q, want %q", got, tc.in)
			}
			// Whatever the encoding, the JSON string is at most twice the
			// output (base64 is 4/3), plus its quotes.
			b, _ := json.Marshal(s)
			if len(b) > 2*len(tc.in)+2 && len(b) > 8 {
				t.Fatalf("%d bytes of output are %d bytes of JSON", len(tc.in), len(b))
			}
		})
	}
}

// FuzzEncodeBytes: any output round-trips through its encoding, and its
// JSON is never more than about twice its size.
func FuzzEncodeBytes(f *testing.F) {
	for _, s := range []string{"hello\n", "\x00", "<>&", "\xff", "\x1b[0m", "\"\\\"\\"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		s, enc := encodeBytes(in)
		got := []byte(s)
		if enc == "base64" {
			var err error
			if got, err = base64.StdEncoding.DecodeString(s); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(got, in) {
			t.Fatalf("round trip %q, want %q", got, in)
		}
		b, _ := json.Marshal(s)
		// U+2028 and U+2029 (3 bytes) are escaped to 6 without counting as
		// control bytes; they are the only runes that can exceed 2x.
		if bound := 2*len(in) + 2 + 3*bytes.Count(in, []byte("\u2028")) + 3*bytes.Count(in, []byte("\u2029")); len(b) > bound && len(b) > 8 {
			t.Fatalf("%d bytes of output are %d bytes of JSON", len(in), len(b))
		}
	})
}

func TestCommandResolve(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      api.Invocation
		command string
		argv    []string
		field   string
	}{
		{name: "command line", in: api.Invocation{Command: "ls -l"}, command: "ls -l"},
		{name: "command and args", in: api.Invocation{Command: "ls", Args: []string{"-l", "a b"}}, argv: []string{"ls", "-l", "a b"}},
		{name: "command and empty args", in: api.Invocation{Command: "ls", Args: []string{}}, argv: []string{"ls"}},
		{name: "argv", in: api.Invocation{Argv: []string{"ls", "-l"}}, argv: []string{"ls", "-l"}},
		{name: "argv and command", in: api.Invocation{Argv: []string{"ls"}, Command: "ls"}, field: "argv"},
		{name: "argv and args", in: api.Invocation{Argv: []string{"ls"}, Args: []string{"-l"}}, field: "argv"},
		{name: "args alone", in: api.Invocation{Args: []string{"-l"}}, field: "args"},
		{name: "empty argv", in: api.Invocation{Argv: []string{}}, field: "argv"},
		{name: "argv without a program", in: api.Invocation{Argv: []string{"", "x"}}, field: "argv"},
		{name: "blank command", in: api.Invocation{Command: " \t"}, field: "command"},
		{name: "nothing", field: "command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			command, argv, err := resolveInvocation(tc.in)
			var ge *gateway.Error
			switch {
			case tc.field != "":
				if !errors.As(err, &ge) || ge.Code != gateway.CodeInvalidArgument || ge.Details["field"] != tc.field {
					t.Fatalf("err %v, want invalid_argument on %s", err, tc.field)
				}
			case err != nil:
				t.Fatal(err)
			case command != tc.command || !slices.Equal(argv, tc.argv) || (argv == nil) != (tc.argv == nil):
				t.Fatalf("got %q %q, want %q %q", command, argv, tc.command, tc.argv)
			}
		})
	}
}
