package api

import (
	"encoding/json"
	"time"
)

// CreateWebhookRequest is the body of POST /v1/webhooks.
type CreateWebhookRequest struct {
	// URL receives the deliveries; it must pass the gateway's
	// --webhook-allow.
	URL string `json:"url" validate:"required,max=2048,nonul"`
	// Events are the events to deliver, or ["*"] for all.
	Events []string `json:"events" validate:"required,min=1,max=16,dive,min=1,max=64"`
	// VM limits the subscription to one VM's events (empty: every VM's).
	VM          string `json:"vm,omitempty" validate:"omitempty,max=64,nonul"`
	Description string `json:"description,omitempty" validate:"omitempty,max=256,nonul"`
}

// UpdateWebhookRequest is the body of PATCH /v1/webhooks/{webhook}: the
// fields set replace the subscription's.
type UpdateWebhookRequest struct {
	URL         *string  `json:"url,omitempty" validate:"omitnil,min=1,max=2048,nonul"`
	Events      []string `json:"events,omitempty" validate:"omitempty,min=1,max=16,dive,min=1,max=64"`
	VM          *string  `json:"vm,omitempty" validate:"omitnil,max=64,nonul"`
	Description *string  `json:"description,omitempty" validate:"omitnil,max=256,nonul"`
	// Enabled turns delivery on (a disabled subscription's failures are
	// forgotten) or off.
	Enabled *bool `json:"enabled,omitempty"`
}

// Webhook is a subscription.
type Webhook struct {
	ID          string   `json:"id"`
	URL         string   `json:"url"`
	Events      []string `json:"events"`
	VM          string   `json:"vm,omitempty"`
	Description string   `json:"description,omitempty"`
	// State is active or disabled; DisabledReason says why.
	State          string     `json:"state"`
	DisabledReason string     `json:"disabledReason,omitempty"`
	FailingSince   *time.Time `json:"failingSince,omitempty"`
	CreatedAt      time.Time  `json:"createdAt"`
	UpdatedAt      time.Time  `json:"updatedAt"`
}

// Delivery is one event on its way to a subscription.
type Delivery struct {
	ID             string          `json:"id"`
	SubscriptionID string          `json:"subscriptionId"`
	Type           string          `json:"type"`
	Sequence       int64           `json:"sequence"`
	VM             string          `json:"vm,omitempty"`
	Status         string          `json:"status"`
	Attempts       int             `json:"attempts"`
	LastStatus     int             `json:"lastStatus,omitempty"`
	LastError      string          `json:"lastError,omitempty"`
	CreatedAt      time.Time       `json:"createdAt"`
	NextAttemptAt  *time.Time      `json:"nextAttemptAt,omitempty"`
	DoneAt         *time.Time      `json:"doneAt,omitempty"`
	Data           json.RawMessage `json:"data"`
}
