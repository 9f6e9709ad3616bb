package vmspec

import (
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

// Egress rules bounds: enough for any allowlist a person writes, and few
// enough patterns that the engine's first-to-last scan stays cheap.
const (
	maxEgressRules = 64
	maxRuleHosts   = 32
	maxRulePorts   = 16
)

// Permissions turns a VM's permissions into the engine's policy:
// {"fs": mode, "network": mode or egress rules, "childProcess": mode,
// "process": mode, "env": mode, "hostFunction": mode}, each mode "allow",
// "ask" or "deny". A capability left out is allowed: the engine, given a
// policy, would apply defaults of its own to it (for the network, a narrow
// allowlist of model providers), which a VM's owner never asked for.
func Permissions(m map[string]any) (*protocol.PermissionsPolicy, error) {
	for k := range m {
		switch k {
		case "fs", "network", "childProcess", "process", "env", "hostFunction":
		default:
			return nil, gateway.Errorf(gateway.CodeInvalidArgument, "unknown permission %q", k).WithDetail("field", "permissions."+k)
		}
	}
	allow := protocol.PermissionModeAllow
	mode := func(field string) (protocol.PermissionMode, error) {
		v, ok := m[field]
		if !ok {
			return allow, nil
		}
		return permissionMode(v, "permissions."+field, true)
	}
	var p protocol.PermissionsPolicy
	fs, err := mode("fs")
	if err != nil {
		return nil, err
	}
	var fsScope protocol.FsPermissionScope = fs
	p.Fs = &fsScope
	for field, dst := range map[string]**protocol.PatternPermissionScope{
		"childProcess": &p.ChildProcess, "process": &p.Process, "env": &p.Env, "hostFunction": &p.HostFunction,
	} {
		pm, err := mode(field)
		if err != nil {
			return nil, err
		}
		var scope protocol.PatternPermissionScope = pm
		*dst = &scope
	}
	network, err := networkScope(m["network"])
	if err != nil {
		return nil, err
	}
	p.Network = &network
	return &p, nil
}

// permissionMode reads "allow", "deny" and, where ask is true, "ask".
func permissionMode(v any, field string, ask bool) (protocol.PermissionMode, error) {
	switch s, _ := v.(string); s {
	case "allow":
		return protocol.PermissionModeAllow, nil
	case "deny":
		return protocol.PermissionModeDeny, nil
	case "ask":
		if ask {
			return protocol.PermissionModeAsk, nil
		}
	}
	want := "allow or deny"
	if ask {
		want = "allow, ask or deny"
	}
	return 0, gateway.Errorf(gateway.CodeInvalidArgument, "%s must be %s", field, want).WithDetail("field", field)
}

// networkScope reads permissions.network: absent (allow), a mode, or egress
// rules:
//
//	{"default": "deny", "rules": [
//	  {"mode": "allow", "hosts": ["api.example.com", "*.github.com"], "ports": [443]},
//	  {"mode": "deny", "hosts": ["*"]}]}
//
// The first rule that matches a connection decides it; none matching, the
// default does (deny when absent: rules are an allowlist unless told).
//
// The engine matches a rule set's patterns against the resource a guest
// uses: tcp://<host>:<port> for a connection (host as the guest wrote it,
// a name or an address, IPv6 without brackets) and dns://<host> for a name
// lookup; "*" in a pattern matches within one path segment. Its rules are
// applied last match wins (checked on 0.2.21), so the gateway's rules go to
// it in reverse order. Two allowances come first, below every rule: the
// guest's own servers (listening is not egress) and its loopback names, so
// that a VM on an allowlist still reaches the servers it runs; a rule
// naming localhost still overrides the second.
func networkScope(v any) (protocol.PatternPermissionScope, error) {
	const field = "permissions.network"
	if v == nil {
		return protocol.PermissionModeAllow, nil
	}
	if _, ok := v.(string); ok {
		return permissionMode(v, field, true)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, gateway.Errorf(gateway.CodeInvalidArgument, "%s must be allow, ask, deny or an object of egress rules", field).WithDetail("field", field)
	}
	for k := range obj {
		if k != "default" && k != "rules" {
			return nil, gateway.Errorf(gateway.CodeInvalidArgument, "unknown field %q in %s (it takes default and rules)", k, field).WithDetail("field", field+"."+k)
		}
	}
	def := protocol.PermissionModeDeny
	if d, ok := obj["default"]; ok {
		m, err := permissionMode(d, field+".default", false)
		if err != nil {
			return nil, err
		}
		def = m
	}
	list, ok := obj["rules"].([]any)
	if _, present := obj["rules"]; present && !ok {
		return nil, gateway.Errorf(gateway.CodeInvalidArgument, "%s.rules must be an array", field).WithDetail("field", field+".rules")
	}
	if len(list) > maxEgressRules {
		return nil, gateway.Errorf(gateway.CodeInvalidArgument, "%s.rules has %d rules; at most %d are allowed", field, len(list), maxEgressRules).WithDetail("field", field+".rules")
	}
	allow := protocol.PermissionModeAllow
	engine := []protocol.PatternPermissionRule{
		{Mode: allow, Operations: []string{"listen"}, Patterns: []string{"**"}},
		{Mode: allow, Operations: []string{"http"}, Patterns: []string{"tcp://localhost:*", "tcp://127.0.0.1:*", "tcp://::1:*"}},
		{Mode: allow, Operations: []string{"dns"}, Patterns: []string{"dns://localhost"}},
	}
	rules := make([][]protocol.PatternPermissionRule, len(list))
	for i, r := range list {
		er, err := egressRule(r, fmt.Sprintf("%s.rules[%d]", field, i))
		if err != nil {
			return nil, err
		}
		rules[i] = er
	}
	for i := len(rules) - 1; i >= 0; i-- {
		engine = append(engine, rules[i]...)
	}
	return protocol.PatternPermissionRuleSet{Default: &def, Rules: engine}, nil
}

// egressRule reads one rule {"mode", "hosts", "ports"} and returns the
// engine's rules for it: the connections it matches and, unless it denies
// some ports only, the name lookups of its hosts.
func egressRule(v any, field string) ([]protocol.PatternPermissionRule, error) {
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, gateway.Errorf(gateway.CodeInvalidArgument, "%s must be an object {mode, hosts, ports}", field).WithDetail("field", field)
	}
	for k := range obj {
		switch k {
		case "mode", "hosts", "ports":
		default:
			return nil, gateway.Errorf(gateway.CodeInvalidArgument, "unknown field %q in %s (it takes mode, hosts and ports)", k, field).WithDetail("field", field+"."+k)
		}
	}
	mode, err := permissionMode(obj["mode"], field+".mode", false)
	if err != nil {
		return nil, err
	}
	hostList, ok := obj["hosts"].([]any)
	if !ok || len(hostList) == 0 || len(hostList) > maxRuleHosts {
		return nil, gateway.Errorf(gateway.CodeInvalidArgument, "%s.hosts must be an array of 1 to %d host patterns", field, maxRuleHosts).WithDetail("field", field+".hosts")
	}
	hosts := make([]string, len(hostList))
	for i, h := range hostList {
		s, _ := h.(string)
		host, err := hostPattern(s)
		if err != nil {
			f := fmt.Sprintf("%s.hosts[%d]", field, i)
			return nil, gateway.Errorf(gateway.CodeInvalidArgument, "%s: %v", f, err).WithDetail("field", f)
		}
		hosts[i] = host
	}
	ports := []string{"*"}
	if raw, present := obj["ports"]; present {
		list, ok := raw.([]any)
		if !ok || len(list) == 0 || len(list) > maxRulePorts {
			return nil, gateway.Errorf(gateway.CodeInvalidArgument, "%s.ports must be an array of 1 to %d ports (leave it out for every port)", field, maxRulePorts).WithDetail("field", field+".ports")
		}
		ports = ports[:0]
		for i, p := range list {
			n, ok := p.(float64)
			if !ok || n != float64(int(n)) || n < 1 || n > 65535 {
				f := fmt.Sprintf("%s.ports[%d]", field, i)
				return nil, gateway.Errorf(gateway.CodeInvalidArgument, "%s must be a port number from 1 to 65535", f).WithDetail("field", f)
			}
			ports = append(ports, strconv.Itoa(int(n)))
		}
	}
	var tcp, dns []string
	for _, h := range hosts {
		for _, p := range ports {
			tcp = append(tcp, "tcp://"+h+":"+p)
		}
		dns = append(dns, "dns://"+h)
	}
	out := []protocol.PatternPermissionRule{{Mode: mode, Operations: []string{"http"}, Patterns: tcp}}
	// A host denied on some ports may still be looked up for the others.
	if mode == protocol.PermissionModeAllow || ports[0] == "*" {
		out = append(out, protocol.PatternPermissionRule{Mode: mode, Operations: []string{"dns"}, Patterns: dns})
	}
	return out, nil
}

// hostLabels is a host name pattern: labels of letters, digits, "-" and
// "_", any of which may hold "*" wildcards.
var hostLabels = regexp.MustCompile(`^[a-z0-9_*-]+(\.[a-z0-9_*-]+)*$`)

// hostPattern checks and normalizes a host pattern: a name pattern in lower
// case, "*", or an IP address (IPv6 without brackets, as the engine writes
// it).
func hostPattern(s string) (string, error) {
	s = strings.ToLower(strings.TrimSuffix(s, "."))
	if ip := net.ParseIP(strings.Trim(s, "[]")); ip != nil {
		return ip.String(), nil
	}
	switch {
	case s == "" || len(s) > 253:
		return "", fmt.Errorf("a host pattern has 1 to 253 characters")
	case strings.Contains(s, "**"):
		return "", fmt.Errorf("%q: one * matches any run of characters; ** is not a host pattern", s)
	case !hostLabels.MatchString(s):
		return "", fmt.Errorf("%q is not a host name pattern (letters, digits, -, _ and * in dot-separated labels; the port goes in ports)", s)
	}
	return s, nil
}
