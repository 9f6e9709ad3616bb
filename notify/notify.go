// Package notify tells tenants' backends what happened, by webhook: the
// subscriptions (which events, of which VM, to which URL), the outbox the
// events are written to in the step that records the change, and the
// dispatcher that delivers them at least once, in order per VM, with
// retries, from whichever node claims them first.
package notify

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/store"
	"github.com/agentos-gateway/agentos-gateway/tracing"
)

// Store is what the service needs of the store.
type Store interface {
	CreateWebhook(ctx context.Context, w gateway.Webhook) (gateway.Webhook, error)
	GetWebhook(ctx context.Context, tenantID, id string) (gateway.Webhook, error)
	ListWebhooks(ctx context.Context, tenantID, cursor string, limit int) (gateway.Page[gateway.Webhook], error)
	UpdateWebhook(ctx context.Context, tenantID, id string, change func(w *gateway.Webhook) error) (gateway.Webhook, error)
	DeleteWebhook(ctx context.Context, tenantID, id string) error
	PublishEvents(ctx context.Context, evs ...gateway.Event) (bool, error)
	ClaimDeliveries(ctx context.Context, node string, lease time.Duration, limit int) ([]gateway.Delivery, error)
	FinishAttempt(ctx context.Context, id, node string, a store.Attempt) (*gateway.Webhook, error)
	ListDeliveries(ctx context.Context, tenantID, subID string, f gateway.DeliveryFilter) (gateway.Page[gateway.Delivery], error)
	Redeliver(ctx context.Context, tenantID, subID, id string) (gateway.Delivery, error)
	PurgeDeliveries(ctx context.Context, before time.Time) (int, error)
	ReleaseLeases(ctx context.Context, node string) error
}

// Sender posts a signed delivery; webhook.Client is one.
type Sender interface {
	Deliver(ctx context.Context, tenantID, url, id, event string, body []byte) (int, error)
	CheckURL(raw string) error
}

// Config tunes a Service.
type Config struct {
	// Node names this node in the leases it takes.
	Node string
	// RetryFor is how long a delivery is retried (--webhook-retry-for); a
	// subscription whose deliveries failed that long is disabled.
	RetryFor time.Duration
	// Timeout bounds one attempt.
	Timeout time.Duration
	// Poll is how often the dispatcher looks for deliveries other nodes
	// wrote or that became due; events of this node wake it at once.
	Poll time.Duration
	// Lease is how long a claimed delivery is this node's: longer than an
	// attempt, so that no other node sends it meanwhile.
	Lease time.Duration
	// Workers bounds the attempts in flight.
	Workers int
	// Backoff is the delay after a first failed attempt; each next one
	// doubles it, up to MaxBackoff, with a fifth of jitter.
	Backoff, MaxBackoff time.Duration
	// Retention is how long done deliveries stay listed.
	Retention time.Duration
	Log       zerolog.Logger
}

func (c *Config) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.RetryFor, 24*time.Hour)
	def(&c.Timeout, 10*time.Second)
	def(&c.Poll, time.Second)
	def(&c.Lease, time.Minute)
	def(&c.Backoff, time.Second)
	def(&c.MaxBackoff, time.Hour)
	def(&c.Retention, 7*24*time.Hour)
	if c.Workers <= 0 {
		c.Workers = 8
	}
}

// Service keeps subscriptions and delivers events. Start runs its
// dispatcher; Close stops it and waits for it.
type Service struct {
	cfg    Config
	st     Store
	sender Sender
	wake   chan struct{}

	// ctx ends when Close is called: it bounds the dispatcher's work.
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	closing bool
	wg      sync.WaitGroup
}

// New returns a service; nothing runs until Start.
func New(cfg Config, st Store, sender Sender) *Service {
	cfg.defaults()
	ctx, cancel := context.WithCancel(context.Background())
	return &Service{cfg: cfg, st: st, sender: sender, wake: make(chan struct{}, 1), ctx: ctx, cancel: cancel}
}

// Start runs the dispatcher until Close.
func (s *Service) Start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.dispatch()
	}()
}

// Close stops the dispatcher and waits, at most until ctx ends, for the
// attempts in flight; a delivery cut short stays pending and is sent again
// (by this node after a restart, or another once its lease ends).
func (s *Service) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	s.cancel()
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("notify: close: %w", ctx.Err())
	}
}

// Publish writes evs into the outbox and wakes the dispatcher when any
// subscription wants one.
func (s *Service) Publish(ctx context.Context, evs ...gateway.Event) error {
	written, err := s.st.PublishEvents(ctx, evs...)
	if err != nil {
		return err
	}
	if written {
		s.Wake()
	}
	return nil
}

// Wake tells the dispatcher that deliveries may be due: events written in
// another transaction (an exec's outcome with its exec.done).
func (s *Service) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Subscribe creates a tenant's subscription after checking it.
func (s *Service) Subscribe(ctx context.Context, w gateway.Webhook) (gateway.Webhook, error) {
	if err := s.check(&w); err != nil {
		return gateway.Webhook{}, err
	}
	return s.st.CreateWebhook(ctx, w)
}

// Change is a change of a subscription: the fields set replace its own.
type Change struct {
	URL         *string
	Events      []gateway.EventType
	VMID        *string
	Description *string
	// Enabled turns a subscription on (its failure run is forgotten) or
	// off.
	Enabled *bool
}

// Update applies c to a tenant's subscription.
func (s *Service) Update(ctx context.Context, tenantID, id string, c Change) (gateway.Webhook, error) {
	return s.st.UpdateWebhook(ctx, tenantID, id, func(w *gateway.Webhook) error {
		if c.URL != nil {
			w.URL = *c.URL
		}
		if c.Events != nil {
			w.Events = c.Events
		}
		if c.VMID != nil {
			w.VMID = *c.VMID
		}
		if c.Description != nil {
			w.Description = *c.Description
		}
		if c.Enabled != nil {
			w.State = gateway.WebhookDisabled
			if *c.Enabled {
				w.State = gateway.WebhookActive
			} else {
				w.DisabledReason = "disabled by request"
			}
		}
		return s.check(w)
	})
}

// Get, List, Delete, Deliveries and Redeliver pass to the store.
func (s *Service) Get(ctx context.Context, tenantID, id string) (gateway.Webhook, error) {
	return s.st.GetWebhook(ctx, tenantID, id)
}

func (s *Service) List(ctx context.Context, tenantID, cursor string, limit int) (gateway.Page[gateway.Webhook], error) {
	return s.st.ListWebhooks(ctx, tenantID, cursor, limit)
}

func (s *Service) Delete(ctx context.Context, tenantID, id string) error {
	return s.st.DeleteWebhook(ctx, tenantID, id)
}

func (s *Service) Deliveries(ctx context.Context, tenantID, id string, f gateway.DeliveryFilter) (gateway.Page[gateway.Delivery], error) {
	return s.st.ListDeliveries(ctx, tenantID, id, f)
}

func (s *Service) Redeliver(ctx context.Context, tenantID, id, delivery string) (gateway.Delivery, error) {
	d, err := s.st.Redeliver(ctx, tenantID, id, delivery)
	if err == nil {
		s.Wake()
	}
	return d, err
}

// check validates a subscription: a URL the target policy admits and
// known events, each once.
func (s *Service) check(w *gateway.Webhook) error {
	u, err := url.Parse(w.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return gateway.Errorf(gateway.CodeInvalidArgument, "url must be an http or https URL").WithDetail("field", "url")
	}
	if err := s.sender.CheckURL(w.URL); err != nil {
		return gateway.Errorf(gateway.CodeInvalidArgument, "url: %v", err).WithDetail("field", "url")
	}
	if len(w.Events) == 0 {
		return gateway.Errorf(gateway.CodeInvalidArgument, `events must name at least one event, or be ["*"]`).WithDetail("field", "events")
	}
	for i, e := range w.Events {
		field := fmt.Sprintf("events[%d]", i)
		switch {
		case e == "*" && len(w.Events) > 1:
			return gateway.Errorf(gateway.CodeInvalidArgument, `"*" names every event: it comes alone`).WithDetail("field", field)
		case e != "*" && !gateway.KnownEventType(e):
			return gateway.Errorf(gateway.CodeInvalidArgument, "unknown event %q", e).WithDetail("field", field)
		case slices.Index(w.Events, e) != i:
			return gateway.Errorf(gateway.CodeInvalidArgument, "event %q is named twice", e).WithDetail("field", field)
		}
	}
	return nil
}

// dispatch claims due deliveries and sends them, a bounded number at once,
// until Close; it also purges old done deliveries.
func (s *Service) dispatch() {
	ctx := s.ctx
	// What this node's previous run was sending when it stopped is due
	// again now.
	if err := s.st.ReleaseLeases(ctx, s.cfg.Node); err != nil && ctx.Err() == nil {
		s.cfg.Log.Warn().Err(err).Msg("releasing the webhook deliveries of this node's previous run")
	}
	poll := time.NewTicker(s.cfg.Poll)
	defer poll.Stop()
	purge := time.NewTicker(time.Hour)
	defer purge.Stop()
	sem := make(chan struct{}, s.cfg.Workers)
	var attempts sync.WaitGroup
	defer attempts.Wait()
	s.purge(ctx)
	for {
		// Claim as many as there are free workers; more are claimed as
		// they free up, so no lease waits behind a slow receiver.
		for free := s.cfg.Workers - len(sem); free > 0 && ctx.Err() == nil; free = s.cfg.Workers - len(sem) {
			ds, err := s.st.ClaimDeliveries(ctx, s.cfg.Node, s.cfg.Lease, free)
			if err != nil {
				if ctx.Err() == nil {
					s.cfg.Log.Warn().Err(err).Msg("claiming webhook deliveries")
				}
				break
			}
			for _, d := range ds {
				sem <- struct{}{}
				attempts.Add(1)
				go func() {
					defer attempts.Done()
					defer func() {
						<-sem
						// A delivery done may let the next of its VM go.
						s.Wake()
					}()
					s.attempt(ctx, d)
				}()
			}
			if len(ds) < free {
				break
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-poll.C:
		case <-purge.C:
			s.purge(ctx)
		}
	}
}

// attempt sends d once and records how it went.
func (s *Service) attempt(ctx context.Context, d gateway.Delivery) {
	body, err := d.Body()
	var status int
	if err == nil {
		actx := ctx
		if d.TraceParent != "" {
			actx = tracing.Extract(actx, http.Header{"Traceparent": {d.TraceParent}})
		}
		actx, cancel := context.WithTimeout(actx, s.cfg.Timeout)
		status, err = s.sender.Deliver(actx, d.TenantID, d.URL, d.ID, string(d.Type), body)
		cancel()
	}
	if ctx.Err() != nil {
		// Shutdown cut the attempt: it stays pending, and its lease ends.
		return
	}
	a := store.Attempt{Status: status, RetryFor: s.cfg.RetryFor}
	if err != nil {
		a.Err = err.Error()
		// Within the retry window, the next attempt is due after the
		// backoff, and the last one at the window's end; past it, the
		// delivery fails for good.
		now, end := time.Now(), d.WindowStart.Add(s.cfg.RetryFor)
		if now.Before(end) {
			a.Next = now.Add(s.backoff(d.Attempts + 1))
			if a.Next.After(end) {
				a.Next = end
			}
		}
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	disabled, ferr := s.st.FinishAttempt(fctx, d.ID, s.cfg.Node, a)
	if ferr != nil {
		s.cfg.Log.Warn().Err(ferr).Str("delivery", d.ID).Msg("recording a webhook attempt")
		return
	}
	if disabled != nil {
		s.cfg.Log.Warn().Str("webhook", disabled.ID).Str("tenant", disabled.TenantID).Str("reason", disabled.DisabledReason).Msg("webhook disabled")
		ev := gateway.NewEvent(gateway.EventWebhookDisabled, disabled.TenantID, "", time.Now(),
			gateway.WebhookDisabledData{WebhookID: disabled.ID, URL: disabled.URL, Reason: disabled.DisabledReason})
		if err := s.Publish(fctx, ev); err != nil {
			s.cfg.Log.Warn().Err(err).Msg("publishing webhook.disabled")
		}
	}
}

// backoff is the delay after the n-th failed attempt.
func (s *Service) backoff(n int) time.Duration {
	d := s.cfg.Backoff
	for i := 1; i < n && d < s.cfg.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, s.cfg.MaxBackoff)
	jitter := time.Duration(rand.Int64N(int64(d)/5 + 1))
	return d - d/10 + jitter
}

// purge removes done deliveries older than the retention.
func (s *Service) purge(ctx context.Context) {
	if _, err := s.st.PurgeDeliveries(ctx, time.Now().Add(-s.cfg.Retention)); err != nil && ctx.Err() == nil {
		s.cfg.Log.Warn().Err(err).Msg("purging webhook deliveries")
	}
}
