package cluster

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ForwardedHeader marks a request one node forwards to another, and
// authenticates it: "<node id> <unix seconds> <signature>", the signature
// being base64url(HMAC-SHA256(cluster secret, what signedText covers)). A
// node serves a request that carries it itself, never forwarding it again,
// which is what prevents loops.
const ForwardedHeader = "X-AgentOS-Forwarded-By"

// NodeHeader names the node that served a response, on every response.
const NodeHeader = "X-AgentOS-Node"

// signatureWindow is how far a forwarded request's time may be from the
// receiver's clock: it bounds replays of a captured request.
const signatureWindow = time.Minute

// ErrBadSignature is the cause of Verify's error for a forwarded request
// whose header is malformed, stale or not signed with this cluster's secret.
var ErrBadSignature = errors.New("bad node signature")

// forwardedAuth is a parsed ForwardedHeader.
type forwardedAuth struct {
	node string
	at   int64
	sig  []byte
}

// parseForwarded parses a ForwardedHeader value. It is fed untrusted
// bytes, so it is fuzzed.
func parseForwarded(v string) (forwardedAuth, error) {
	parts := strings.Split(v, " ")
	if len(parts) != 3 {
		return forwardedAuth{}, fmt.Errorf("%w: want 3 fields, got %d", ErrBadSignature, len(parts))
	}
	node, ts, sig := parts[0], parts[1], parts[2]
	if !validNodeID(node) {
		return forwardedAuth{}, fmt.Errorf("%w: invalid node id", ErrBadSignature)
	}
	at, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || at <= 0 {
		return forwardedAuth{}, fmt.Errorf("%w: invalid time", ErrBadSignature)
	}
	mac, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || len(mac) != sha256.Size {
		return forwardedAuth{}, fmt.Errorf("%w: invalid signature encoding", ErrBadSignature)
	}
	return forwardedAuth{node: node, at: at, sig: mac}, nil
}

// validNodeID reports whether id can be a node id: what a host name or a
// Kubernetes pod name is made of.
func validNodeID(id string) bool {
	if id == "" || len(id) > 253 {
		return false
	}
	for _, c := range id {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '.', c == '_':
		default:
			return false
		}
	}
	return true
}

// ValidNodeID is validNodeID for the configuration.
func ValidNodeID(id string) bool { return validNodeID(id) }

// signedText is what a signature covers: the sender, the time, the method
// and the request target, so that a signature cannot be moved to another
// request.
func signedText(node string, at int64, method, target string) []byte {
	return fmt.Appendf(nil, "agentos-gateway forwarded v1\n%s\n%d\n%s\n%s", node, at, method, target)
}

func sign(secret []byte, text []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write(text)
	return m.Sum(nil)
}

// secretCheck is what nodes store to tell whether they share a secret
// without storing it: an HMAC of a fixed text; empty without a secret.
func secretCheck(secret []byte) string {
	if len(secret) == 0 {
		return ""
	}
	return hex.EncodeToString(sign(secret, []byte("agentos-gateway cluster secret check v1"))[:16])
}

// Sign marks r as forwarded by this node and signs it.
func (n *Node) Sign(r *http.Request) {
	at := time.Now().Unix()
	mac := sign(n.cfg.Secret, signedText(n.cfg.ID, at, r.Method, r.URL.RequestURI()))
	r.Header.Set(ForwardedHeader, n.cfg.ID+" "+strconv.FormatInt(at, 10)+" "+base64.RawURLEncoding.EncodeToString(mac))
}

// Forwarded reports whether r claims to come from another node.
func Forwarded(r *http.Request) bool { return r.Header.Get(ForwardedHeader) != "" }

// Verify checks the ForwardedHeader of r and returns the node that sent it.
// A node without a secret accepts no forwarded request.
func (n *Node) Verify(r *http.Request) (string, error) {
	if len(n.cfg.Secret) == 0 {
		return "", fmt.Errorf("%w: this node has no cluster secret", ErrBadSignature)
	}
	f, err := parseForwarded(r.Header.Get(ForwardedHeader))
	if err != nil {
		return "", err
	}
	if d := time.Since(time.Unix(f.at, 0)); d > signatureWindow || d < -signatureWindow {
		return "", fmt.Errorf("%w: signed %s away from this node's clock", ErrBadSignature, d.Round(time.Second))
	}
	want := sign(n.cfg.Secret, signedText(f.node, f.at, r.Method, r.URL.RequestURI()))
	if !hmac.Equal(want, f.sig) {
		return "", fmt.Errorf("%w: not signed with this cluster's secret", ErrBadSignature)
	}
	return f.node, nil
}
