package handlers

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
)

// A validation error names the field as the JSON body spells it: nested
// objects by their path, embedded structs not at all (JSON flattens them).
func TestValidateStructNamesJSONFields(t *testing.T) {
	for _, c := range []struct {
		name  string
		v     any
		field string
	}{
		{"embedded", &api.ExecRequest{Invocation: api.Invocation{Command: "true", Cwd: "relative"}}, "cwd"},
		{"embedded in spawn", &api.SpawnRequest{Invocation: api.Invocation{Command: "b", Cwd: "relative"}}, "cwd"},
		{"nested", &api.CreateTenantRequest{Name: "t", Quotas: api.QuotasUpdate{MaxVMs: ptr(-1)}}, "quotas.maxVms"},
		{"top level", &api.OpenSessionRequest{Agent: "pi", PermissionPolicy: "sometimes"}, "permissionPolicy"},
		{"pointer to struct", &api.OpenSessionRequest{Agent: "pi", PermissionDefault: &gateway.PermissionDefault{Decision: "maybe", TimeoutSeconds: 1}}, "permissionDefault.decision"},
		{"array item", &api.ExecRequest{Invocation: api.Invocation{Argv: []string{"a", "b", "c\x00"}}}, "argv[2]"},
		{"object key", &api.ExecRequest{Invocation: api.Invocation{Command: "true", Env: map[string]string{"A=B": "x"}}}, "env.A=B"},
		{"object value", &api.OpenShellRequest{Env: map[string]string{"A": "x\x00y"}}, "env.A"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := validateStruct(c.v)
			var ge *gateway.Error
			if !errors.As(err, &ge) || ge.Details["field"] != c.field {
				t.Fatalf("validateStruct = %v, want field %q", err, c.field)
			}
		})
	}
}

// Bad bodies get a message in the gateway's words, naming the field as JSON
// does and the JSON type or range it wants.
func TestDecodeMessages(t *testing.T) {
	for _, c := range []struct {
		v       any
		body    string
		field   string
		message string
	}{
		{&api.CreateVMRequest{}, `[]`, "", "the body must be a JSON object"},
		{&api.CreateVMRequest{}, `"x"`, "", "the body must be a JSON object"},
		{&api.CreateVMRequest{}, `{"labels":`, "", "the body is not valid JSON: it ends in the middle of a value"},
		{&api.CreateVMRequest{}, `{"labels":{},}`, "", "the body is not valid JSON (error at byte 14)"},
		{&api.CreateVMRequest{}, `{"env":{"A=B":"x"}}`, "env.A=B", `env key "A=B" is not a valid environment variable name: it must not be empty or contain "=" or NUL bytes`},
		{&api.CreateVMRequest{}, `{"env":{"A\u0000":"x"}}`, "env.A\x00", `env key "A\x00" is not a valid environment variable name: it must not be empty or contain "=" or NUL bytes`},
		{&api.CreateVMRequest{}, `{"env":{"A":"x\u0000y"}}`, "env.A", `the value of env key "A" must not contain NUL bytes`},
		{&api.CreateVMRequest{}, `{"env":{"A":1}}`, "env", `field "env" must be an object whose values are strings`},
		{&api.CreateVMRequest{}, `{"limits":[]}`, "limits", `field "limits" must be an object`},
		{&api.CreateVMRequest{}, `{"labels":{"":"x"}}`, "labels.", `labels key "" must not be empty`},
		{&api.CreateVMRequest{}, `{"labels":{"a":"` + strings.Repeat("x", 257) + `"}}`, "labels.a", `the value of labels key "a" must be at most 256 characters long`},
		{&api.CreateVMRequest{}, `{"loopbackExemptPorts":[70000]}`, "loopbackExemptPorts", `field "loopbackExemptPorts" must be an array of integers from 1 to 65535`},
		{&api.CreateVMRequest{}, `{"loopbackExemptPorts":[0]}`, "loopbackExemptPorts[0]", `field "loopbackExemptPorts[0]" must be an integer from 1 to 65535`},
		{&api.CreateVMRequest{}, `{"idleTimeoutSeconds":1e400}`, "idleTimeoutSeconds", `field "idleTimeoutSeconds" must be an integer from 0 to 604800`},
		{&api.CreateVMRequest{}, `{"agents":["x"]}`, "agents[0]", `field "agents[0]" must be one of: pi, claude, codex, opencode`},
		{&api.CreateVMRequest{}, `{"software":[""]}`, "software[0]", `field "software[0]" must not be empty`},
		{&api.ExecRequest{}, `{"argv":["a","b\u0000"]}`, "argv[1]", `field "argv[1]" must not contain NUL bytes`},
		{&api.ExecRequest{}, `{"argv":[1]}`, "argv", `field "argv" must be an array of strings`},
		{&api.SpawnRequest{}, `{"argv":"ls"}`, "argv", `field "argv" must be an array of strings`},
		{&api.ExecRequest{}, `{"command":"ls","cwd":"x"}`, "cwd", `field "cwd" must be an absolute path`},
		{&api.ExecRequest{}, `{"command":"ls\u0000x"}`, "command", `field "command" must not contain NUL bytes`},
		{&api.ExecRequest{}, `{"command":"ls","timeoutMs":"x"}`, "timeoutMs", `field "timeoutMs" must be an integer from 0 to 86400000`},
		{&api.ExecRequest{}, `{"command":"ls","stdinEncoding":"hex"}`, "stdinEncoding", `field "stdinEncoding" must be one of: utf8, base64`},
		{&api.OpenShellRequest{}, `{"cols":70000}`, "cols", `field "cols" must be an integer from 1 to 1000`},
		{&api.OpenShellRequest{}, `{"cols":2000}`, "cols", `field "cols" must be an integer from 1 to 1000`},
		{&api.ResizeRequest{}, `{"rows":1}`, "cols", `field "cols" must be an integer from 1 to 1000`},
		{&api.CreateTenantRequest{}, `{"name":"x","quotas":{"maxVms":"x"}}`, "quotas.maxVms", `field "quotas.maxVms" must be an integer from 0 to 100000`},
		{&api.CreateTenantRequest{}, `{"name":"x","quotas":{"requestsPerSecond":-1}}`, "quotas.requestsPerSecond", `field "quotas.requestsPerSecond" must be a number from 0 to 100000`},
		{&api.CreateTenantRequest{}, `{}`, "name", `field "name" is required`},
		{&api.OpenSessionRequest{}, `{"agent":"pi","permissionDefault":{"decision":"allow","timeoutSeconds":"x"}}`, "permissionDefault.timeoutSeconds", `field "permissionDefault.timeoutSeconds" must be an integer from 1 to 604800`},
		{&api.OpenSessionRequest{}, `{"agent":"pi","additionalDirectories":["x"]}`, "additionalDirectories[0]", `field "additionalDirectories[0]" must be an absolute path`},
		{&api.SignalRequest{}, `{"signal":"SIGTERMSIGTERMSIGTERM"}`, "signal", `field "signal" must be at most 16 characters long`},
	} {
		t.Run(c.body, func(t *testing.T) {
			err := decodeJSONBytes([]byte(c.body), 1<<20, c.v)
			var ge *gateway.Error
			if !errors.As(err, &ge) || ge.Code != gateway.CodeInvalidArgument {
				t.Fatalf("decode = %v, want invalid_argument", err)
			}
			if ge.Message != c.message {
				t.Errorf("message %q, want %q", ge.Message, c.message)
			}
			if f, _ := ge.Details["field"].(string); f != c.field {
				t.Errorf("details.field %q, want %q", f, c.field)
			}
		})
	}
}

// internalWords are what a message must never show: Go types, the
// validator's tags, encoding/json's and the engine's wording.
var internalWords = regexp.MustCompile(`handlers\.|api\.|gateway\.|\[\]|map\[|uint|int8|int16|int32|int64|float|interface|\bstruct\b|json:|RawMessage|Go (value|struct)|` +
	`required_without|excluded_with|startswith|oneof|omitempty|dive|endkeys|\bgte\b|\blte\b|nonul|envkey|\bfails\b|\bmin=|\bmax=|` +
	`Request\b|Invocation|QuotasUpdate|SessionSettingsUpdate|ERR_AGENTOS|serde|sidecar path|storage stat|node_modules|/tmp|/root|/work`)

// checkClean fails t if err is not a bad-input *gateway.Error whose message
// is in the gateway's words.
func checkClean(t testing.TB, err error) {
	t.Helper()
	var ge *gateway.Error
	if !errors.As(err, &ge) {
		t.Fatalf("error %v (%T) is not a *gateway.Error", err, err)
	}
	if ge.Code != gateway.CodeInvalidArgument && ge.Code != gateway.CodePayloadTooLarge {
		t.Fatalf("code %s for bad input: %v", ge.Code, err)
	}
	if w := internalWords.FindString(ge.Message); w != "" {
		t.Fatalf("message %q shows %q", ge.Message, w)
	}
}

// wrongValues are JSON values of every type, and numbers out of any Go
// integer range.
var wrongValues = []string{`"x"`, `1`, `-1`, `1.5`, `1e400`, `18446744073709551616`, `true`, `[]`, `[1]`, `["x"]`, `{}`, `{"a":1}`, `{"a":"b"}`, `"\u0000"`}

// Every field of every request body, sent every JSON type, decodes or gets
// a clean message; a value of the wrong JSON type never decodes.
func TestEveryRequestFieldWithWrongTypes(t *testing.T) {
	for _, body := range requestBodies {
		root := reflect.TypeOf(body)
		for _, f := range jsonFieldsOf(root, nil) {
			for _, v := range wrongValues {
				doc := v
				for i := len(f.path) - 1; i >= 0; i-- {
					name, _ := json.Marshal(f.path[i])
					doc = fmt.Sprintf("{%s:%s}", name, doc)
				}
				t.Run(root.Name()+"/"+strings.Join(f.path, ".")+"="+v, func(t *testing.T) {
					err := decodeJSONBytes([]byte(doc), 1<<20, reflect.New(root).Interface())
					if err != nil {
						checkClean(t, err)
						return
					}
					if wrongJSONType(f.typ, v) {
						t.Fatalf("%s decoded into %s", doc, f.typ)
					}
				})
			}
		}
	}
	for _, doc := range []string{``, ` `, `[]`, `"x"`, `1`, `null`, `true`, `{`, `}`, `{"a"}`, `{} {}`, `{}x`, "\xff"} {
		for _, body := range requestBodies {
			t.Run(fmt.Sprintf("%T/%q", body, doc), func(t *testing.T) {
				err := decodeJSONBytes([]byte(doc), 1<<20, reflect.New(reflect.TypeOf(body)).Interface())
				if err != nil {
					checkClean(t, err)
				}
			})
		}
	}
}

type jsonField struct {
	path []string
	typ  reflect.Type
}

// jsonFieldsOf lists the JSON fields of a struct type, nested objects
// included, as encoding/json sees them.
func jsonFieldsOf(t reflect.Type, prefix []string) []jsonField {
	t = derefType(t)
	var out []jsonField
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() && !f.Anonymous {
			continue
		}
		name := strings.SplitN(f.Tag.Get("json"), ",", 2)[0]
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			out = append(out, jsonFieldsOf(f.Type, prefix)...)
			continue
		}
		path := append(append([]string(nil), prefix...), jsonName(f))
		out = append(out, jsonField{path, f.Type})
		if ft := derefType(f.Type); ft.Kind() == reflect.Struct {
			out = append(out, jsonFieldsOf(ft, path)...)
		}
	}
	return out
}

// wrongJSONType reports whether the JSON value v cannot be of Go type t.
func wrongJSONType(t reflect.Type, v string) bool {
	if t == reflect.TypeFor[json.RawMessage]() {
		return false
	}
	t = derefType(t)
	switch t.Kind() {
	case reflect.String:
		return v[0] != '"'
	case reflect.Bool:
		return v != "true"
	case reflect.Slice:
		return v[0] != '['
	case reflect.Map, reflect.Struct:
		return v[0] != '{'
	case reflect.Interface:
		return false
	}
	return v[0] == '"' || v[0] == '[' || v[0] == '{' || v == "true"
}

func ptr[T any](v T) *T { return &v }
