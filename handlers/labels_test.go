package handlers

import (
	"maps"
	"strings"
	"testing"

	"github.com/agentos-gateway/agentos-gateway"
)

func TestParseLabelSelectors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values []string
		eq, ne map[string]string
		bad    bool
	}{
		{name: "one", values: []string{"team=ml"}, eq: map[string]string{"team": "ml"}},
		{name: "comma-separated, as Kubernetes spells them", values: []string{"team=ml,env!=dev"},
			eq: map[string]string{"team": "ml"}, ne: map[string]string{"env": "dev"}},
		{name: "repeated and comma-separated together", values: []string{"team=ml,env=dev", "zone:eu"},
			eq: map[string]string{"team": "ml", "env": "dev", "zone": "eu"}},
		{name: "an escaped comma inside a value", values: []string{`note=a\,b,team=ml`},
			eq: map[string]string{"note": "a,b", "team": "ml"}},
		{name: "an escaped backslash", values: []string{`path=c:\\x`}, eq: map[string]string{"path": `c:\x`}},
		{name: "an empty value", values: []string{"team="}, eq: map[string]string{"team": ""}},
		{name: "none", values: nil},
		{name: "trailing comma", values: []string{"team=ml,"}, bad: true},
		{name: "doubled comma", values: []string{"team=ml,,env=dev"}, bad: true},
		{name: "no operator", values: []string{"team=ml,env"}, bad: true},
		{name: "no key", values: []string{"=x"}, bad: true},
		{name: "a lone backslash at the end", values: []string{`team=ml\`}, bad: true},
		{name: "one key, two values", values: []string{"team=a,team=b"}, bad: true},
		{name: "65 requirements in one value", values: []string{strings.TrimSuffix(strings.Repeat("k=v,", 65), ",")}, bad: true},
		{name: "64 requirements", values: []string{strings.TrimSuffix(strings.Repeat("k=v,", 64), ",")}, eq: map[string]string{"k": "v"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eq, ne, err := parseLabelSelectors(tc.values)
			if tc.bad {
				if gateway.ErrorCode(err) != gateway.CodeInvalidArgument {
					t.Fatalf("err = %v, want invalid_argument", err)
				}
				return
			}
			if err != nil || !maps.Equal(eq, tc.eq) || !maps.Equal(ne, tc.ne) {
				t.Fatalf("= %v, %v, %v; want %v, %v", eq, ne, err, tc.eq, tc.ne)
			}
		})
	}
}
