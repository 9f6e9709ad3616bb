// Package webhook makes the gateway's calls to tenants' webhooks: the targets the
// gateway may reach (--webhook-allow), checked again at dial time, and the
// HMAC-SHA256 signature every request carries, with the check a receiver
// makes.
package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// Headers of every webhook request the gateway makes.
const (
	// HeaderTimestamp is the Unix time, in seconds, at which the request
	// was signed.
	HeaderTimestamp = "Agentos-Webhook-Timestamp"
	// HeaderSignature is "v1=" and the hex HMAC-SHA256, keyed with the
	// tenant's webhook secret, of the timestamp, a full stop and the body.
	HeaderSignature = "Agentos-Webhook-Signature"
	// HeaderID is the invocation (or permission request) id, the same for
	// every attempt, for receivers that deduplicate.
	HeaderID = "Agentos-Webhook-Id"
)

// signatureVersion prefixes the signature so that the scheme can change.
const signatureVersion = "v1="

// TenantSecret derives a tenant's webhook signing secret from the
// gateway's: each tenant verifies with its own, so that no tenant can sign
// requests another tenant's webhook would accept. Every node sharing the
// gateway secret derives the same one; changing the gateway secret rotates
// every tenant's.
func TenantSecret(gatewaySecret []byte, tenantID string) string {
	m := hmac.New(sha256.New, gatewaySecret)
	m.Write([]byte("agentos-gateway webhook secret\x00"))
	m.Write([]byte(tenantID))
	return "whsec_" + hex.EncodeToString(m.Sum(nil))
}

// Sign returns the HeaderSignature value of body signed at t.
func Sign(secret string, t time.Time, body []byte) string {
	return signatureVersion + hex.EncodeToString(mac(secret, strconv.FormatInt(t.Unix(), 10), body))
}

func mac(secret, timestamp string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(timestamp))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Verification failures.
var (
	ErrBadSignature = errors.New("webhook signature does not match")
	ErrStale        = errors.New("webhook timestamp is outside the tolerance")
)

// Verify checks a webhook request's timestamp and signature headers against
// its body, as a receiver does: the signature must match and the timestamp
// be within tolerance of now (replays of old requests fail).
func Verify(secret, timestamp, signature string, body []byte, now time.Time, tolerance time.Duration) error {
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return ErrStale
	}
	if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
		return ErrStale
	}
	got, ok := strings.CutPrefix(signature, signatureVersion)
	if !ok {
		return ErrBadSignature
	}
	sig, err := hex.DecodeString(got)
	if err != nil || !hmac.Equal(sig, mac(secret, timestamp, body)) {
		return ErrBadSignature
	}
	return nil
}
