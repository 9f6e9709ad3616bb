package bindings

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/webhook"
)

// field is the field an invalid_argument error names.
func field(err error) any {
	var ge *gateway.Error
	if !errors.As(err, &ge) {
		return nil
	}
	return ge.Details["field"]
}

func testService(t testing.TB, patterns ...string) *Service {
	targets, err := webhook.ParseTargets(patterns)
	if err != nil {
		t.Fatal(err)
	}
	hooks := webhook.NewClient(targets, []byte("secret"))
	t.Cleanup(hooks.Close)
	return New(Config{}, nil, nil, hooks)
}

func TestValidateNamesTheField(t *testing.T) {
	s := testService(t)
	good := `{"name":"get","description":"d","inputSchema":{"type":"object"},"webhookUrl":"https://hooks.example.com/x"}`
	doc := func(bindings string) string {
		return `{"collections":[{"name":"weather","description":"d","bindings":[` + bindings + `]}]}`
	}
	for _, tc := range []struct {
		doc, field string
	}{
		{doc(good), ""},
		{doc(good + "," + good), "x.collections[0].bindings[1].name"},
		{doc(strings.Replace(good, `"get"`, `"Get"`, 1)), "x.collections[0].bindings[0].name"},
		{doc(strings.Replace(good, `"description":"d"`, `"description":""`, 1)), "x.collections[0].bindings[0].description"},
		{doc(strings.Replace(good, `{"type":"object"}`, `"object"`, 1)), "x.collections[0].bindings[0].inputSchema"},
		{doc(strings.Replace(good, `https://hooks.example.com/x`, `http://127.0.0.1/x`, 1)), "x.collections[0].bindings[0].webhookUrl"},
		{doc(strings.Replace(good, `"webhookUrl"`, `"timeoutMs":200000,"webhookUrl"`, 1)), "x.collections[0].bindings[0].timeoutMs"},
		{doc(""), "x.collections[0].bindings"},
		{`{"collections":[],"permissionWebhookUrl":"http://[::1]/"}`, "x.permissionWebhookUrl"},
		{`{"collections":[{"name":"a:b","description":"d","bindings":[` + good + `]}]}`, "x.collections[0].name"},
	} {
		var b gateway.Bindings
		if err := json.Unmarshal([]byte(tc.doc), &b); err != nil {
			t.Fatal(err)
		}
		err := s.Validate(&b, "x")
		if tc.field == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.doc, err)
			}
			continue
		}
		if gateway.ErrorCode(err) != gateway.CodeInvalidArgument || field(err) != tc.field {
			t.Errorf("%s: %v (details %v), want field %s", tc.doc, err, field(err), tc.field)
		}
	}
}

// FuzzValidate checks declarations from untrusted bytes: never a panic,
// and every refusal is invalid_argument naming a field.
func FuzzValidate(f *testing.F) {
	s := testService(f)
	f.Add([]byte(`{"collections":[{"name":"w","description":"d","bindings":[{"name":"g","description":"d","inputSchema":{},"webhookUrl":"https://a.example/x"}]}]}`))
	f.Add([]byte(`{"collections":[{"name":"w","bindings":[{"examples":[{"input":null}]}]}],"permissionWebhookUrl":"%"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var b gateway.Bindings
		if json.Unmarshal(data, &b) != nil {
			return
		}
		err := s.Validate(&b, "")
		if err != nil && (gateway.ErrorCode(err) != gateway.CodeInvalidArgument || field(err) == nil) {
			t.Fatalf("%s: %v", data, err)
		}
	})
}

// A collection read back from PostgreSQL's jsonb is respaced and reordered;
// it must still be the collection the engine registered.
func TestFingerprintIgnoresJSONLayout(t *testing.T) {
	c := func(schema string) gateway.BindingCollection {
		return gateway.BindingCollection{Name: "w", Description: "d", Bindings: []gateway.Binding{
			{Name: "g", Description: "d", InputSchema: json.RawMessage(schema), WebhookURL: "https://a.example/x"}}}
	}
	a := fingerprint(engineCollection(c(`{"type":"object","properties":{"city":{"type":"string"}}}`)))
	b := fingerprint(engineCollection(c(`{"properties": {"city": {"type": "string"}}, "type": "object"}`)))
	d := fingerprint(engineCollection(c(`{"type":"object"}`)))
	if string(a) != string(b) || string(a) == string(d) {
		t.Errorf("fingerprints %s %s %s", a, b, d)
	}
}
