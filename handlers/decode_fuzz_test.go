package handlers

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/agentos-gateway/agentos-gateway/sse"
)

// FuzzDecodeJSON decodes and validates arbitrary bytes as every request
// body: it must never panic, and every refusal is a bad-input
// *gateway.Error in the gateway's words.
func FuzzDecodeJSON(f *testing.F) {
	for _, seed := range []string{
		``, `{}`, `[]`, `"x"`, `null`, `{"command":"ls"}`, `{"argv":["a","b\u0000"]}`, `{"env":{"A=B":"x"}}`,
		`{"env":{"A":"x\u0000"}}`, `{"cols":70000,"rows":-1}`, `{"limits":{"reactor":{"maxTasks":1}}}`,
		`{"quotas":{"maxVms":1e400}}`, `{"permissionDefault":{"decision":"maybe"}}`, `{"labels":{"":""}}`,
		`{"command":"a","argv":[]}`, `{"loopbackExemptPorts":[0,65536]}`, `{"agent":"pi","additionalDirectories":[1]}`,
		`{"sessions":{"retentionDays":"x"}}`, `{"a":1} {}`, "{\"cwd\":\"/\xff\"}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, b := range requestBodies {
			v := reflect.New(reflect.TypeOf(b)).Interface()
			if err := decodeJSONBytes(body, 4096, v); err != nil {
				checkClean(t, err)
			}
			r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
			v = reflect.New(reflect.TypeOf(b)).Interface()
			if err := decodeJSON(httptest.NewRecorder(), r, 4096, v); err != nil {
				checkClean(t, err)
			}
		}
	})
}

// FuzzQueryParams parses arbitrary query values with every query parameter
// parser: refusals are clean, and what is accepted keeps the promises
// (integers in range, absolute clean paths).
func FuzzQueryParams(f *testing.F) {
	for _, seed := range []string{"", "0", "1", "-1", "500", "501", "99999999999999999999", "1e3", "0x10", " 1", "true", "FALSE", "yes",
		"/", "/a/b", "a", "/a/../b", "/a\x00b", "//a//", "/%00", "/" + strings.Repeat("a", 5000)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		r := httptest.NewRequest(http.MethodGet, "/?"+url.Values{"limit": {v}, "flag": {v}, "path": {v}}.Encode(), nil)
		if n, err := queryInt(r, "limit", 50, 1, 500); err != nil {
			checkClean(t, err)
		} else if v != "" && (n < 1 || n > 500) {
			t.Fatalf("queryInt(%q) = %d, outside [1, 500]", v, n)
		}
		if _, err := queryBool(r, "flag"); err != nil {
			checkClean(t, err)
		}
		p, err := queryPath(r, "path")
		if err != nil {
			checkClean(t, err)
			return
		}
		if !strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) || strings.Contains("/"+p+"/", "/../") {
			t.Fatalf("queryPath(%q) = %q", v, p)
		}
	})
}

// FuzzLastEventID parses arbitrary Last-Event-ID headers: never a panic,
// and only a decimal event id is accepted, as the number it spells.
func FuzzLastEventID(f *testing.F) {
	for _, seed := range []string{"", "0", "1", "18446744073709551615", "18446744073709551616", "-1", "+1", "1.0", "abc", " 1", "0x1", "\x00"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header["Last-Event-Id"] = []string{v}
		n, ok, err := sse.LastEventID(r)
		if err != nil {
			checkClean(t, err)
			return
		}
		if !ok {
			if v != "" {
				t.Fatalf("sse.LastEventID(%q) accepted nothing", v)
			}
			return
		}
		if m, perr := strconv.ParseUint(v, 10, 64); perr != nil || m != n || strings.Trim(v, "0123456789") != "" {
			t.Fatalf("sse.LastEventID(%q) = %d", v, n)
		}
	})
}
