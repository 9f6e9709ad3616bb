package api

// WebhookSecret is the answer of GET /v1/webhook-secret: the secret the
// calling tenant's webhooks verify the gateway's signatures with.
type WebhookSecret struct {
	Secret string `json:"secret"`
	// SignatureHeader and TimestampHeader name the headers that carry the
	// signature and the time it was made.
	SignatureHeader string `json:"signatureHeader"`
	TimestampHeader string `json:"timestampHeader"`
}
