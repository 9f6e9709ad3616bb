package vmspec

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

// engineRules writes a rule set as "default; mode ops patterns | ...", the
// order the engine reads it in.
func engineRules(s protocol.PatternPermissionScope) string {
	rs, ok := s.(protocol.PatternPermissionRuleSet)
	if !ok {
		return fmt.Sprint(s)
	}
	parts := []string{fmt.Sprint(*rs.Default)}
	for _, r := range rs.Rules {
		parts = append(parts, fmt.Sprintf("%v %s %s", r.Mode, strings.Join(r.Operations, ","), strings.Join(r.Patterns, " ")))
	}
	return strings.Join(parts, " | ")
}

// errField is the field an error of the gateway names.
func errField(err error) any {
	var e *gateway.Error
	if errors.As(err, &e) {
		return e.Details["field"]
	}
	return nil
}

// base is what every rule set starts with: the guest's own servers and its
// loopback, below the tenant's rules.
var base = fmt.Sprintf("%v listen ** | %v http tcp://localhost:* tcp://127.0.0.1:* tcp://::1:* | %v dns dns://localhost",
	protocol.PermissionModeAllow, protocol.PermissionModeAllow, protocol.PermissionModeAllow)

// TestNetworkScope: the gateway's egress rules reach the engine in reverse
// (the engine lets the last match win, the API the first), with a name
// lookup rule beside every connection rule that covers a whole host; bad
// rules are refused naming the part.
func TestNetworkScope(t *testing.T) {
	allow, deny := protocol.PermissionModeAllow, protocol.PermissionModeDeny
	for _, c := range []struct {
		name, in string
		want     string // engine rules, or the field of the error
	}{
		{"absent", `null`, fmt.Sprint(allow)},
		{"mode", `"deny"`, fmt.Sprint(deny)},
		{"ask", `"ask"`, fmt.Sprint(protocol.PermissionModeAsk)},
		{"empty rules deny all but loopback", `{"rules": []}`, fmt.Sprint(deny) + " | " + base},
		{"first match wins", `{"default": "allow", "rules": [
			{"mode": "deny", "hosts": ["a.localhost"], "ports": [81]},
			{"mode": "allow", "hosts": ["A.localhost.", "[::1]", "10.0.0.1"]}]}`,
			fmt.Sprint(allow) + " | " + base +
				fmt.Sprintf(" | %v http tcp://a.localhost:* tcp://::1:* tcp://10.0.0.1:* | %v dns dns://a.localhost dns://::1 dns://10.0.0.1", allow, allow) +
				fmt.Sprintf(" | %v http tcp://a.localhost:81", deny)},
		{"deny a whole host", `{"rules": [{"mode": "deny", "hosts": ["*.internal"]}, {"mode": "allow", "hosts": ["*"], "ports": [443, 80]}]}`,
			fmt.Sprint(deny) + " | " + base +
				fmt.Sprintf(" | %v http tcp://*:443 tcp://*:80 | %v dns dns://*", allow, allow) +
				fmt.Sprintf(" | %v http tcp://*.internal:* | %v dns dns://*.internal", deny, deny)},

		{"not a mode", `"sometimes"`, "permissions.network"},
		{"number", `7`, "permissions.network"},
		{"unknown field", `{"rules": [], "allow": ["x"]}`, "permissions.network.allow"},
		{"ask default", `{"default": "ask", "rules": []}`, "permissions.network.default"},
		{"rules not a list", `{"rules": {}}`, "permissions.network.rules"},
		{"rule not an object", `{"rules": ["x"]}`, "permissions.network.rules[0]"},
		{"rule unknown field", `{"rules": [{"mode": "allow", "hosts": ["a"], "port": 1}]}`, "permissions.network.rules[0].port"},
		{"rule ask", `{"rules": [{"mode": "ask", "hosts": ["a"]}]}`, "permissions.network.rules[0].mode"},
		{"no hosts", `{"rules": [{"mode": "allow"}]}`, "permissions.network.rules[0].hosts"},
		{"empty hosts", `{"rules": [{"mode": "allow", "hosts": []}]}`, "permissions.network.rules[0].hosts"},
		{"host with port", `{"rules": [{"mode": "allow", "hosts": ["a"]}, {"mode": "allow", "hosts": ["ok", "a.com:443"]}]}`, "permissions.network.rules[1].hosts[1]"},
		{"host with path", `{"rules": [{"mode": "allow", "hosts": ["a.com/x"]}]}`, "permissions.network.rules[0].hosts[0]"},
		{"host **", `{"rules": [{"mode": "allow", "hosts": ["**"]}]}`, "permissions.network.rules[0].hosts[0]"},
		{"host not a string", `{"rules": [{"mode": "allow", "hosts": [5]}]}`, "permissions.network.rules[0].hosts[0]"},
		{"empty ports", `{"rules": [{"mode": "allow", "hosts": ["a"], "ports": []}]}`, "permissions.network.rules[0].ports"},
		{"port 0", `{"rules": [{"mode": "allow", "hosts": ["a"], "ports": [80, 0]}]}`, "permissions.network.rules[0].ports[1]"},
		{"port too big", `{"rules": [{"mode": "allow", "hosts": ["a"], "ports": [65536]}]}`, "permissions.network.rules[0].ports[0]"},
		{"port fraction", `{"rules": [{"mode": "allow", "hosts": ["a"], "ports": [80.5]}]}`, "permissions.network.rules[0].ports[0]"},
		{"port string", `{"rules": [{"mode": "allow", "hosts": ["a"], "ports": ["80"]}]}`, "permissions.network.rules[0].ports[0]"},
		{"too many rules", `{"rules": [` + strings.Repeat(`{"mode": "allow", "hosts": ["a"]},`, maxEgressRules) + `{"mode": "allow", "hosts": ["a"]}]}`, "permissions.network.rules"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var v any
			if err := json.Unmarshal([]byte(c.in), &v); err != nil {
				t.Fatal(err)
			}
			got, err := networkScope(v)
			if err != nil {
				if gateway.ErrorCode(err) != gateway.CodeInvalidArgument || errField(err) != c.want {
					t.Fatalf("error %v (%v); want invalid_argument naming %s", err, errField(err), c.want)
				}
				return
			}
			if s := engineRules(got); s != c.want {
				t.Fatalf("engine rules\n%s\nwant\n%s", s, c.want)
			}
		})
	}
}

// TestPermissionsPolicyAllowsWhatIsLeftOut: a policy names every
// capability, so that the engine's own defaults (a narrow egress allowlist
// for the network) never apply to one its owner left out, at create or in
// a PATCH that takes a capability back to allow.
func TestPermissionsPolicyAllowsWhatIsLeftOut(t *testing.T) {
	p, err := Permissions(map[string]any{"fs": "deny"})
	if err != nil {
		t.Fatal(err)
	}
	allow := protocol.PermissionModeAllow
	for name, scope := range map[string]*protocol.PatternPermissionScope{"network": p.Network, "childProcess": p.ChildProcess, "process": p.Process, "env": p.Env, "hostFunction": p.HostFunction} {
		if scope == nil || *scope != protocol.PatternPermissionScope(allow) {
			t.Errorf("%s = %v, want allow", name, scope)
		}
	}
	if p.Fs == nil || *p.Fs != protocol.FsPermissionScope(protocol.PermissionModeDeny) {
		t.Errorf("fs = %v", p.Fs)
	}
	if _, err := Permissions(map[string]any{"net": "allow"}); errField(err) != "permissions.net" {
		t.Errorf("unknown capability: %v", err)
	}
}

// FuzzNetworkScope: any JSON as permissions.network is refused with an
// invalid_argument naming a field under it, or becomes a mode or a rule set
// whose patterns are all of the engine's forms.
func FuzzNetworkScope(f *testing.F) {
	for _, seed := range []string{`"allow"`, `{"rules": []}`, `{"default": "allow", "rules": [{"mode": "deny", "hosts": ["a.b", "*"], "ports": [1, 65535]}]}`,
		`{"rules": [{"mode": "allow", "hosts": ["[::1]", "1.2.3.4", "X.Y."]}]}`, `{"rules": [{"mode": "allow", "hosts": ["a:b/c"]}]}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var v any
		if json.Unmarshal(b, &v) != nil {
			return
		}
		got, err := networkScope(v)
		if err != nil {
			field, _ := errField(err).(string)
			if gateway.ErrorCode(err) != gateway.CodeInvalidArgument || !strings.HasPrefix(field, "permissions.network") {
				t.Fatalf("error %v, field %q", err, field)
			}
			return
		}
		rs, ok := got.(protocol.PatternPermissionRuleSet)
		if !ok {
			return
		}
		for _, r := range rs.Rules {
			if !slices.ContainsFunc(r.Operations, func(op string) bool { return op == "http" || op == "dns" || op == "listen" }) {
				t.Fatalf("operations %v", r.Operations)
			}
			for _, p := range r.Patterns {
				host, ok := strings.CutPrefix(p, "tcp://")
				if !ok {
					host, ok = strings.CutPrefix(p, "dns://")
				}
				if p != "**" && (!ok || strings.ContainsAny(host, "/ ") || host == "") {
					t.Fatalf("pattern %q", p)
				}
			}
		}
	})
}
