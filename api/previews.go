package api

import "time"

// CreatePreviewRequest is the body of POST /v1/vms/{vm}/previews.
// TTLSeconds 0 (or absent) is an hour.
type CreatePreviewRequest struct {
	Port       int   `json:"port" validate:"gte=1,lte=65535"`
	TTLSeconds int64 `json:"ttlSeconds,omitempty" validate:"gte=0,lte=604800"`
}

// Preview is a preview URL of a VM port as the API shows it. URL (and
// HostURL, with --preview-domain) carry the token and are given only in
// the answer to the create: the gateway keeps only the token's hash.
type Preview struct {
	ID        string    `json:"id"`
	VMID      string    `json:"vmId"`
	Port      int       `json:"port"`
	URL       string    `json:"url,omitempty"`
	HostURL   string    `json:"hostUrl,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	ExpiresAt time.Time `json:"expiresAt"`
}
