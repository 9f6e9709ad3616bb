package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
)

// ErrTargetRefused is the cause (errors.Is) of every refusal of a webhook
// target by the gateway's policy, whether of its URL or of the address its
// name resolved to.
var ErrTargetRefused = errors.New("webhook target refused")

// Targets is the gateway's policy on webhook targets (--webhook-allow). An
// empty policy admits any host whose addresses are public; otherwise the
// host must match one of the patterns. Loopback, private, link-local and
// other non-public addresses are refused unless an IP or CIDR pattern
// covers them: a host name pattern never opens them, so that a name the
// tenant controls cannot be pointed at the gateway's own network.
type Targets struct {
	names    []string       // exact host names, lower case
	suffixes []string       // "*.example.com" as ".example.com"
	prefixes []netip.Prefix // IPs (as /32 or /128) and CIDRs
}

// ParseTargets parses host patterns: a host name ("hooks.example.com"), a
// wildcard of its subdomains ("*.example.com"), an IP address or a CIDR
// range ("10.0.0.0/8").
func ParseTargets(patterns []string) (Targets, error) {
	var t Targets
	for _, raw := range patterns {
		p := strings.ToLower(strings.TrimSpace(raw))
		switch {
		case p == "":
			continue
		case strings.Contains(p, "/"):
			pre, err := netip.ParsePrefix(p)
			if err != nil {
				return Targets{}, fmt.Errorf("webhook allow pattern %q: %w", raw, err)
			}
			t.prefixes = append(t.prefixes, pre.Masked())
		case strings.HasPrefix(p, "*."):
			if !validHostName(p[2:]) {
				return Targets{}, fmt.Errorf("webhook allow pattern %q is not a wildcard of a host name", raw)
			}
			t.suffixes = append(t.suffixes, p[1:])
		default:
			if ip, err := netip.ParseAddr(strings.Trim(p, "[]")); err == nil {
				t.prefixes = append(t.prefixes, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
				continue
			}
			if !validHostName(p) {
				return Targets{}, fmt.Errorf("webhook allow pattern %q is neither a host name, an IP address nor a CIDR range", raw)
			}
			t.names = append(t.names, p)
		}
	}
	return t, nil
}

func validHostName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

func (t Targets) empty() bool {
	return len(t.names) == 0 && len(t.suffixes) == 0 && len(t.prefixes) == 0
}

// hostAllowed reports whether a URL's host (a name or an IP literal) passes
// the patterns; addresses are checked again when dialled.
func (t Targets) hostAllowed(host string) bool {
	if t.empty() {
		return true
	}
	host = strings.ToLower(host)
	if ip, err := netip.ParseAddr(host); err == nil {
		return t.covers(ip)
	}
	for _, n := range t.names {
		if host == n {
			return true
		}
	}
	for _, s := range t.suffixes {
		if strings.HasSuffix(host, s) {
			return true
		}
	}
	return false
}

func (t Targets) covers(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, p := range t.prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// addrAllowed reports whether the gateway may connect to ip.
func (t Targets) addrAllowed(ip netip.Addr) bool {
	ip = ip.Unmap()
	return publicAddr(ip) || t.covers(ip)
}

// sharedAddressSpace is RFC 6598's carrier-grade NAT range, which
// netip.Addr.IsPrivate leaves out.
var sharedAddressSpace = netip.MustParsePrefix("100.64.0.0/10")

func publicAddr(ip netip.Addr) bool {
	return ip.IsValid() && ip.IsGlobalUnicast() && !ip.IsPrivate() && !sharedAddressSpace.Contains(ip)
}

// CheckURL checks a webhook URL as declared: an absolute http or https URL
// without credentials whose host passes the patterns, and which is not an IP
// literal the policy refuses.
func (t Targets) CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("is not a URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return errors.New("must be an http or https URL")
	}
	if u.User != nil {
		return errors.New("must not carry credentials")
	}
	host := u.Hostname()
	if host == "" {
		return errors.New("has no host")
	}
	if !t.hostAllowed(host) {
		return fmt.Errorf("%w: host %s is not allowed by --webhook-allow", ErrTargetRefused, host)
	}
	if ip, err := netip.ParseAddr(host); err == nil && !t.addrAllowed(ip) {
		return fmt.Errorf("%w: %s is a loopback, private or otherwise non-public address; allow it with --webhook-allow", ErrTargetRefused, host)
	}
	return nil
}

// checkResolved refuses a URL whose host name resolves (with lookup) to an
// address the policy refuses; an IP literal was checked by CheckURL, and a
// lookup that fails admits the URL.
func (t Targets) checkResolved(ctx context.Context, raw string, lookup func(ctx context.Context, network, host string) ([]netip.Addr, error)) error {
	u, err := url.Parse(raw)
	if err != nil {
		return nil // CheckURL said so
	}
	host := u.Hostname()
	if _, err := netip.ParseAddr(host); err == nil {
		return nil
	}
	addrs, err := lookup(ctx, "ip", host)
	if err != nil {
		return nil
	}
	for _, a := range addrs {
		if !t.addrAllowed(a) {
			return fmt.Errorf("%w: %s is a loopback, private or otherwise non-public address (it resolves to %s); allow it with --webhook-allow", ErrTargetRefused, host, a.Unmap())
		}
	}
	return nil
}

// control is the dialer's hook, called with the address actually being
// connected to after name resolution: checking it there, rather than the
// name before, is what defeats DNS rebinding.
func (t Targets) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: cannot parse dialled address %s", ErrTargetRefused, address)
	}
	if !t.addrAllowed(ap.Addr()) {
		return fmt.Errorf("%w: %s is a loopback, private or otherwise non-public address", ErrTargetRefused, ap.Addr())
	}
	return nil
}

// dialer returns the dial function of the webhook client.
func (t Targets) dialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Control: t.control}
	return d.DialContext
}
