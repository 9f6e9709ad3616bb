package gateway

import "time"

// Preview bounds: how many previews a VM may have at once, and how long one
// may live. Both keep a leaked or forgotten URL from staying useful.
const (
	MaxPreviewsPerVM  = 16
	DefaultPreviewTTL = time.Hour
	MaxPreviewTTL     = 7 * 24 * time.Hour
)

// PreviewTokenPrefix starts every preview token, so that a leaked one is
// recognisable.
const PreviewTokenPrefix = "pvt_"

// Preview is a URL that reaches a port of a VM without the API key, until it
// expires, is revoked or its VM ends. Only the SHA-256 of its token is
// stored: the token itself is shown once, when the preview is created.
type Preview struct {
	ID        string
	TenantID  string
	VMID      string
	Port      int
	CreatedAt time.Time
	ExpiresAt time.Time
}

// Expired reports whether the preview no longer works at now.
func (p Preview) Expired(now time.Time) bool { return !now.Before(p.ExpiresAt) }
