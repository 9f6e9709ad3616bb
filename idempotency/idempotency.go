// Package idempotency runs an operation at most once per key. The first
// request with a key claims it, runs the operation and records its outcome;
// a retry with the same key and the same request, within TTL, gets that
// outcome and runs nothing. Exec, spawn and agent session prompts share
// it: one record shape, one TTL, and one purge of expired records.
package idempotency

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/store"
)

// TTL is how long the outcome of a key is kept.
const TTL = store.DefaultIdempotencyTTL

// MaxKeyLength bounds a key as clients send it.
const MaxKeyLength = 255

// writeTimeout bounds recording an outcome: it happens after the
// operation, outside the deadline of the request that ran it.
const writeTimeout = 10 * time.Second

// Store is what the keeper needs of the database.
type Store interface {
	BeginIdempotent(ctx context.Context, tenantID, key, requestHash string, ttl time.Duration) (store.IdempotencyRecord, bool, error)
	CompleteIdempotent(ctx context.Context, tenantID, key string, outcome []byte, evs ...gateway.Event) error
	AbandonIdempotent(ctx context.Context, tenantID, key string) error
	PurgeExpiredIdempotent(ctx context.Context, olderThan time.Time) (int, error)
	GetIdempotent(ctx context.Context, tenantID, key string, ttl time.Duration) (store.IdempotencyRecord, error)
}

// Config tunes a Keeper.
type Config struct {
	// PurgeInterval is how often records older than TTL are deleted
	// (default 10 minutes).
	PurgeInterval time.Duration
	Log           zerolog.Logger
	Now           func() time.Time
}

// Keeper claims keys, records outcomes and purges expired records.
type Keeper struct {
	st   Store
	cfg  Config
	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// New returns a keeper and starts its purge; Close stops it.
func New(cfg Config, st Store) *Keeper {
	if cfg.PurgeInterval <= 0 {
		cfg.PurgeInterval = 10 * time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	k := &Keeper{st: st, cfg: cfg, stop: make(chan struct{})}
	k.wg.Add(1)
	go k.purge()
	return k
}

// Close stops the purge and waits for it.
func (k *Keeper) Close() {
	k.once.Do(func() { close(k.stop) })
	k.wg.Wait()
}

func (k *Keeper) purge() {
	defer k.wg.Done()
	t := time.NewTicker(k.cfg.PurgeInterval)
	defer t.Stop()
	for {
		select {
		case <-k.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
		n, err := k.st.PurgeExpiredIdempotent(ctx, k.cfg.Now().Add(-TTL))
		cancel()
		switch {
		case err != nil:
			k.cfg.Log.Error().Err(err).Msg("purge expired idempotency records")
		case n > 0:
			k.cfg.Log.Debug().Int("records", n).Msg("purged expired idempotency records")
		}
	}
}

// Outcome is what a key's operation came to: a value (JSON), or an error's
// code, message and details.
type Outcome struct {
	Value   json.RawMessage `json:"value,omitempty"`
	Code    gateway.Code    `json:"code,omitempty"`
	Message string          `json:"message,omitempty"`
	Details map[string]any  `json:"details,omitempty"`
}

// Err returns the recorded error, marked with details.replayed, or nil when
// the operation succeeded.
func (o *Outcome) Err() error {
	if o.Code == "" {
		return nil
	}
	e := &gateway.Error{Code: o.Code, Message: o.Message, Details: map[string]any{}}
	for k, v := range o.Details {
		e.Details[k] = v
	}
	e.Details["replayed"] = true
	return e
}

// Decode decodes the recorded value into v.
func (o *Outcome) Decode(v any) error {
	if err := json.Unmarshal(o.Value, v); err != nil {
		return gateway.Wrap(gateway.CodeInternal, err, "the recorded outcome cannot be read")
	}
	return nil
}

// CheckKey refuses a key that is too long to be a client's key, naming the
// field it came in.
func CheckKey(key, field string) error {
	if len(key) > MaxKeyLength {
		return gateway.Errorf(gateway.CodeInvalidArgument, "%s is longer than %d characters", field, MaxKeyLength).WithDetail("field", field)
	}
	return nil
}

// Hash is the request hash of an operation's request: what a retry must
// repeat exactly.
func Hash(request ...[]byte) string {
	h := sha256.New()
	for _, part := range request {
		fmt.Fprintf(h, "%d:", len(part))
		h.Write(part)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// RequestHash is the hash a request to route (its method and path) with
// body is claimed under: the route's hash, a full stop, and the request's,
// so that Lookup can tell which route a key was used on.
func RequestHash(route string, body []byte) string {
	return Hash([]byte(route)) + "." + Hash([]byte(route), body)
}

// Lookup returns the outcome of a tenant's key used on route, or nil while
// its operation still runs. A key unknown, expired or used on another
// route is CodeNotFound.
func (k *Keeper) Lookup(ctx context.Context, tenantID, key, route string) (*Outcome, error) {
	rec, err := k.st.GetIdempotent(ctx, tenantID, key, TTL)
	if err != nil {
		return nil, err
	}
	if prefix, _, _ := strings.Cut(rec.RequestHash, "."); prefix != Hash([]byte(route)) {
		return nil, gateway.Errorf(gateway.CodeNotFound, "no request to %s with idempotency key %q", route, key)
	}
	if !rec.Done {
		return nil, nil
	}
	var o Outcome
	if err := json.Unmarshal(rec.Outcome, &o); err != nil || (o.Code == "" && o.Value == nil) {
		return nil, gateway.Wrap(gateway.CodeInternal, err, "the recorded outcome of this idempotency key cannot be read")
	}
	return &o, nil
}

// Claim is a key claimed by a request whose operation has not run yet.
type Claim struct {
	k             *Keeper
	tenantID, key string
	hash          string
}

// Key returns the claimed key.
func (c *Claim) Key() string { return c.key }

// Hash returns the hash of the request that claimed the key.
func (c *Claim) Hash() string { return c.hash }

// Begin claims key for the request with hash. A fresh key gives a Claim for
// the caller to run the operation and then Complete or Release; a key whose
// operation already ran gives its Outcome. The same key with another
// request is CodeUnprocessable, and a key whose operation still runs is
// CodeConflict.
func (k *Keeper) Begin(ctx context.Context, tenantID, key, hash string) (*Claim, *Outcome, error) {
	rec, fresh, err := k.st.BeginIdempotent(ctx, tenantID, key, hash, TTL)
	if err != nil {
		return nil, nil, err
	}
	if fresh {
		return &Claim{k: k, tenantID: tenantID, key: key, hash: hash}, nil, nil
	}
	var o Outcome
	if err := json.Unmarshal(rec.Outcome, &o); err != nil || (o.Code == "" && o.Value == nil) {
		return nil, nil, gateway.Wrap(gateway.CodeInternal, err, "the recorded outcome of this idempotency key cannot be read")
	}
	return nil, &o, nil
}

// Complete records the operation's outcome, value when err is nil and err's
// code, message and details otherwise, for retries to get, and evs, the
// events that tell of it, with it. It runs outside ctx's cancellation (the
// client that went away will retry) and is bounded by its own timeout.
func (c *Claim) Complete(ctx context.Context, value any, err error, evs ...gateway.Event) error {
	var o Outcome
	if err != nil {
		o = Outcome{Code: gateway.ErrorCode(err), Message: gateway.ErrorMessage(err)}
		if ge := (*gateway.Error)(nil); errors.As(err, &ge) {
			o.Details = ge.Details
		}
	} else {
		b, merr := json.Marshal(value)
		if merr != nil {
			return fmt.Errorf("idempotency: encode outcome: %w", merr)
		}
		o.Value = b
	}
	b, merr := json.Marshal(o)
	if merr != nil {
		return fmt.Errorf("idempotency: encode outcome: %w", merr)
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	return c.k.st.CompleteIdempotent(wctx, c.tenantID, c.key, b, evs...)
}

// Release gives the key up because the operation did not run (it was
// refused, or could not start): the client may retry with the same key. It
// is bounded like Complete.
func (c *Claim) Release(ctx context.Context) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	return c.k.st.AbandonIdempotent(wctx, c.tenantID, c.key)
}
