package gen

import "strings"

// initialisms maps a capitalised word to its idiomatic Go spelling. Only
// whole words are replaced: "Io" becomes "IO" but "Ios" stays as it is.
var initialisms = map[string]string{
	"Id": "ID", "Vm": "VM", "Acp": "ACP", "Pty": "PTY", "Json": "JSON",
	"Utf8": "UTF8", "Uid": "UID", "Gid": "GID", "Udp": "UDP", "Uds": "UDS",
	"Url": "URL", "Http": "HTTP", "Api": "API", "Io": "IO", "Rpc": "RPC",
	"Mcp": "MCP", "Js": "JS", "Os": "OS",
}

// typeRenames overrides the Go name of specific schema types where the
// mechanical conversion would read badly.
var typeRenames = map[string]string{
	"JsonUtf8": "JSONText",
}

// GoName converts a PascalCase or camelCase schema identifier into an
// exported Go identifier: "vmId" → "VMID", "ExecutionIoResponse" →
// "ExecutionIOResponse", "default" → "Default".
func GoName(name string) string {
	var b strings.Builder
	for _, w := range splitWords(name) {
		b.WriteString(goWord(w))
	}
	return b.String()
}

// GoTypeName is GoName plus the special renames for type names.
func GoTypeName(name string) string {
	if r, ok := typeRenames[name]; ok {
		return r
	}
	return GoName(name)
}

// EnumValueName converts a SCREAMING_SNAKE enum value to PascalCase words:
// "READ_DIR_RECURSIVE" → "ReadDirRecursive", "UTF8" → "UTF8", "PTY" → "PTY".
func EnumValueName(name string) string {
	var b strings.Builder
	for _, w := range strings.Split(name, "_") {
		if w != "" {
			b.WriteString(goWord(strings.ToLower(w)))
		}
	}
	return b.String()
}

func goWord(w string) string {
	w = strings.ToUpper(w[:1]) + w[1:]
	if r, ok := initialisms[w]; ok {
		return r
	}
	return w
}

// splitWords splits an identifier at camel-case boundaries. Digits stay with
// the word before them ("Utf8", "Base64"), and a run of capitals keeps its
// last capital for the next word ("HTTPServer" → "HTTP", "Server").
func splitWords(s string) []string {
	var words []string
	start := 0
	for i := 1; i < len(s); i++ {
		prev, c := s[i-1], s[i]
		if !isUpper(c) {
			continue
		}
		if isLower(prev) || isDigit(prev) || isUpper(prev) && i+1 < len(s) && isLower(s[i+1]) {
			words = append(words, s[start:i])
			start = i
		}
	}
	return append(words, s[start:])
}

func isUpper(c byte) bool { return c >= 'A' && c <= 'Z' }
func isLower(c byte) bool { return c >= 'a' && c <= 'z' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }
