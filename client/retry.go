package client

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"time"
)

// RetryPolicy says how idempotent calls are retried and how the Follow
// methods reconnect a dropped stream.
//
// A call is retried when the gateway answered 429 or 503 (it did not run
// the call) and the call is idempotent: GET, HEAD, PUT and DELETE, and
// any call sent WithIdempotencyKey. GET, HEAD and keyed calls are also
// retried after a transport failure, since running them twice is harmless.
// A request whose body cannot be replayed (a streamed upload) is never
// retried.
type RetryPolicy struct {
	// MaxAttempts bounds the attempts of one call, and the consecutive
	// failed attempts of a followed stream (a connection that delivers at
	// least one event resets the count). Default 5; 1 disables retries.
	MaxAttempts int
	// MinBackoff and MaxBackoff bound the exponential, jittered wait between
	// attempts. Defaults 200 ms and 5 s. A longer Retry-After of the
	// gateway's answer is honoured, up to a minute.
	MinBackoff time.Duration
	MaxBackoff time.Duration
	// IdleTimeout is the idle timeout of the followed streams, so that a
	// connection that silently died is noticed (the gateway sends a
	// heartbeat every 15 s by default). Default 60 s; < 0 disables it.
	IdleTimeout time.Duration
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 5
	}
	if p.MinBackoff <= 0 {
		p.MinBackoff = 200 * time.Millisecond
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = 5 * time.Second
	}
	if p.MaxBackoff < p.MinBackoff {
		p.MaxBackoff = p.MinBackoff
	}
	if p.IdleTimeout == 0 {
		p.IdleTimeout = 60 * time.Second
	}
	return p
}

// retryCall says whether the failed call req may be sent again.
func retryCall(req *http.Request, err error) bool {
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return false
	}
	keyed := req.Header.Get("Idempotency-Key") != ""
	var e *Error
	if errors.As(err, &e) {
		switch e.Status {
		case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		default:
			return false
		}
		switch req.Method {
		case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete:
			return true
		}
		return keyed
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	// A transport failure: the call may or may not have run.
	return req.Method == http.MethodGet || req.Method == http.MethodHead || keyed
}

// retryStream says whether reconnecting a followed stream could help.
func retryStream(err error) bool {
	var e *Error
	switch {
	case errors.As(err, &e):
		switch e.Status {
		case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true
		}
		return false
	case errors.Is(err, ErrEventTooLarge), errors.Is(err, ErrNotEventStream), errors.Is(err, ErrClosed),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false
	}
	// Transport failures, a cut connection, an idle timeout.
	return true
}

// backoff is the wait before attempt failures+1.
func backoff(p RetryPolicy, failures int, err error) time.Duration {
	d := p.MinBackoff
	for i := 1; i < failures && d < p.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, p.MaxBackoff)
	// Full jitter on the upper half.
	d = d/2 + rand.N(d/2+1)
	var e *Error
	if errors.As(err, &e) && e.RetryAfter > d {
		d = min(e.RetryAfter, time.Minute)
	}
	return d
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
