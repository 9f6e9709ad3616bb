package sessions

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

var validContentCases = []struct {
	name    string
	content string
}{
	{"text", `[{"type":"text","text":"hello"}]`},
	{"empty text", `[{"type":"text","text":""}]`},
	{"text with annotations", `[{"type":"text","text":"hi","annotations":{"priority":1}}]`},
	{"image", `[{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"}]`},
	{"audio", `[{"type":"audio","data":"UklGRg==","mimeType":"audio/wav"}]`},
	{"resource_link", `[{"type":"resource_link","uri":"file:///home/agentos/a.txt","name":"a.txt"}]`},
	{"resource", `[{"type":"resource","resource":{"uri":"file:///a.txt","text":"x","mimeType":"text/plain"}}]`},
	{"every type", `[
		{"type":"text","text":"look at these"},
		{"type":"image","data":"AA==","mimeType":"image/png"},
		{"type":"audio","data":"AA==","mimeType":"audio/wav"},
		{"type":"resource_link","uri":"file:///b","name":"b"},
		{"type":"resource","resource":{"uri":"file:///c","blob":"AA=="}}
	]`},
	{"whitespace around", " \n\t[ { \"type\" : \"text\" , \"text\" : \"x\" } ] \n"},
	{"escaped type", `[{"type":"t\u0065xt","text":"x"}]`},
	{"unicode text", `[{"type":"text","text":"h\u00e9llo \ud83d\ude00"}]`},
}

var invalidContentCases = []struct {
	name    string
	content string
	field   string
}{
	{"empty input", ``, "content"},
	{"not JSON", `{`, "content"},
	{"not JSON text", `hello`, "content"},
	{"object, not an array", `{"type":"text","text":"x"}`, "content"},
	{"string, not an array", `"text"`, "content"},
	{"number, not an array", `42`, "content"},
	{"null", `null`, "content"},
	{"empty array", `[]`, "content"},
	{"array of numbers", `[1]`, "content"},
	{"array of strings", `["text"]`, "content"},
	{"array of arrays", `[[{"type":"text","text":"x"}]]`, "content"},
	{"object then number", `[{"type":"text","text":"x"},1]`, "content"},
	{"trailing garbage", `[{"type":"text","text":"x"}] x`, "content"},
	{"two arrays", `[{"type":"text","text":"x"}][{"type":"text","text":"y"}]`, "content"},
	{"nested garbage", `[{"type":"text","text":"x","extra":{]}]`, "content"},
	{"unterminated string", `[{"type":"text","text":"x}]`, "content"},
	{"null block", `[null]`, "content[0].type"},
	{"block without type", `[{"text":"x"}]`, "content[0].type"},
	{"second block without type", `[{"type":"text","text":"a"},{"text":"b"}]`, "content[1].type"},
	{"numeric type", `[{"type":5,"text":"x"}]`, "content[0].type"},
	{"array type", `[{"type":["text"],"text":"x"}]`, "content[0].type"},
	{"object type", `[{"type":{"name":"text"},"text":"x"}]`, "content[0].type"},
	{"boolean type", `[{"type":true,"text":"x"}]`, "content[0].type"},
	{"null type", `[{"type":null,"text":"x"}]`, "content[0].type"},
	{"empty type", `[{"type":"","text":"x"}]`, "content[0].type"},
	{"unknown type", `[{"type":"video","data":"AA=="}]`, "content[0].type"},
	{"type is case-sensitive", `[{"type":"Text","text":"x"}]`, "content[0].type"},
	{"duplicate type key, last wins", `[{"type":"text","text":"x","type":"bogus"}]`, "content[0].type"},
	{"text without text", `[{"type":"text"}]`, "content[0].text"},
	{"image without data", `[{"type":"image","mimeType":"image/png"}]`, "content[0].data"},
	{"audio without data", `[{"type":"audio","mimeType":"audio/wav"}]`, "content[0].data"},
	{"resource_link without uri", `[{"type":"resource_link","name":"a"}]`, "content[0].uri"},
	{"resource without resource", `[{"type":"resource","uri":"file:///a"}]`, "content[0].resource"},
	{"third block without data", `[{"type":"text","text":"a"},{"type":"text","text":"b"},{"type":"image","mimeType":"image/png"}]`, "content[2].data"},
	{"null text", `[{"type":"text","text":null}]`, "content[0].text"},
	{"null text with spaces", `[{"type":"text","text" :  null  }]`, "content[0].text"},
	{"null data", `[{"type":"image","data":null,"mimeType":"image/png"}]`, "content[0].data"},
	{"null uri", `[{"type":"resource_link","uri":null,"name":"a"}]`, "content[0].uri"},
	{"null resource", `[{"type":"resource","resource":null}]`, "content[0].resource"},
	{"numeric text", `[{"type":"text","text":5}]`, "content[0].text"},
	{"object text", `[{"type":"text","text":{"a":"b"}}]`, "content[0].text"},
	{"array text", `[{"type":"text","text":["a"]}]`, "content[0].text"},
	{"boolean text", `[{"type":"text","text":false}]`, "content[0].text"},
	{"image without mimeType", `[{"type":"image","data":"AA=="}]`, "content[0].mimeType"},
	{"numeric data", `[{"type":"image","data":5,"mimeType":"image/png"}]`, "content[0].data"},
	{"numeric mimeType", `[{"type":"audio","data":"AA==","mimeType":1}]`, "content[0].mimeType"},
	{"resource_link without name", `[{"type":"resource_link","uri":"file:///a"}]`, "content[0].name"},
	{"string resource", `[{"type":"resource","resource":"file:///a"}]`, "content[0].resource"},
	{"array resource", `[{"type":"resource","resource":[]}]`, "content[0].resource"},
	{"first error wins", `[{"type":"text","text":"a"},{"type":"text","text":1},{"type":"nope"}]`, "content[1].text"},
}

func TestValidateContentValid(t *testing.T) {
	for _, tc := range validContentCases {
		t.Run(tc.name, func(t *testing.T) {
			if err := ValidateContent(json.RawMessage(tc.content)); err != nil {
				t.Fatalf("ValidateContent(%s) = %v, want nil", tc.content, err)
			}
		})
	}
}

func TestValidateContentInvalid(t *testing.T) {
	for _, tc := range invalidContentCases {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateContent(json.RawMessage(tc.content))
			checkContentError(t, tc.content, err, tc.field)
		})
	}
}

func checkContentError(t *testing.T, content string, err error, field string) {
	t.Helper()
	var ge *gateway.Error
	if !errors.As(err, &ge) {
		t.Fatalf("ValidateContent(%q) = %v, want a *gateway.Error", content, err)
	}
	if ge.Code != gateway.CodeInvalidArgument {
		t.Errorf("ValidateContent(%q) code = %q, want %q", content, ge.Code, gateway.CodeInvalidArgument)
	}
	if ge.Message == "" {
		t.Errorf("ValidateContent(%q) has an empty message", content)
	}
	if got := ge.Details["field"]; got != field {
		t.Errorf("ValidateContent(%q) details.field = %v, want %q (message %q)", content, got, field, ge.Message)
	}
}

// contentOracle is an independent statement of the rules ValidateContent
// enforces: a single JSON value that is a non-empty array of objects, each
// with a string type among the ACP block types and that type's required
// fields present: strings, and an object for resource. It returns the field
// the first violation names; an element that is neither an object nor null
// makes the whole array undecodable ("content"), wherever it is.
func contentOracle(b []byte) (ok bool, field string) {
	if !json.Valid(b) {
		return false, "content"
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // numbers out of float64 range are still valid JSON
	var v any
	if err := dec.Decode(&v); err != nil {
		return false, "content"
	}
	arr, isArray := v.([]any)
	if !isArray {
		return false, "content"
	}
	for _, e := range arr {
		if _, isObject := e.(map[string]any); e != nil && !isObject {
			return false, "content"
		}
	}
	if len(arr) == 0 {
		return false, "content"
	}
	type need struct {
		name   string
		object bool
	}
	required := map[string][]need{
		"text": {{"text", false}}, "image": {{"data", false}, {"mimeType", false}}, "audio": {{"data", false}, {"mimeType", false}},
		"resource_link": {{"uri", false}, {"name", false}}, "resource": {{"resource", true}},
	}
	for i, e := range arr {
		f := fmt.Sprintf("content[%d]", i)
		m, _ := e.(map[string]any) // nil for a null element
		typ, isString := m["type"].(string)
		if !isString {
			return false, f + ".type"
		}
		needs, known := required[typ]
		if !known {
			return false, f + ".type"
		}
		for _, n := range needs {
			val := m[n.name]
			if n.object {
				if _, isObject := val.(map[string]any); !isObject {
					return false, f + "." + n.name
				}
			} else if _, isString := val.(string); !isString {
				return false, f + "." + n.name
			}
		}
	}
	return true, ""
}

func TestContentOracleAgreesWithTable(t *testing.T) {
	for _, tc := range validContentCases {
		if ok, field := contentOracle([]byte(tc.content)); !ok {
			t.Errorf("oracle rejects valid %q (field %s)", tc.name, field)
		}
	}
	for _, tc := range invalidContentCases {
		if ok, field := contentOracle([]byte(tc.content)); ok || field != tc.field {
			t.Errorf("oracle on invalid %q = %v, %q; want false, %q", tc.name, ok, field, tc.field)
		}
	}
}

// FuzzValidateContent feeds untrusted prompt bodies to ValidateContent: it
// must never panic, must accept exactly what the oracle accepts and must
// name the field the oracle names.
func FuzzValidateContent(f *testing.F) {
	for _, tc := range validContentCases {
		f.Add([]byte(tc.content))
	}
	for _, tc := range invalidContentCases {
		f.Add([]byte(tc.content))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		err := ValidateContent(json.RawMessage(b))
		wantOK, wantField := contentOracle(b)
		if err == nil {
			if !json.Valid(b) {
				t.Fatalf("accepted invalid JSON %q", b)
			}
			var arr []json.RawMessage
			if json.Unmarshal(b, &arr) != nil || len(arr) == 0 {
				t.Fatalf("accepted %q, which is not a non-empty array", b)
			}
			if !wantOK {
				t.Fatalf("accepted %q; the oracle rejects it at %s", b, wantField)
			}
			return
		}
		if wantOK {
			t.Fatalf("rejected %q (%v); the oracle accepts it", b, err)
		}
		checkContentError(t, string(b), err, wantField)
	})
}
