package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"time"
)

// RetryPolicy says how the Follow* methods reconnect a dropped stream.
type RetryPolicy struct {
	// MaxAttempts bounds consecutive failed attempts (a connection that
	// delivers at least one event resets the count). Default 5.
	MaxAttempts int
	// MinBackoff and MaxBackoff bound the exponential, jittered wait between
	// attempts. Defaults 200 ms and 5 s.
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

// FollowProcessOutput streams a process's output to fn until its final
// event, reconnecting with Last-Event-ID after a dropped connection so that
// no event is lost or repeated (a "gap" event says when the gateway's buffer
// no longer held the resume point). fn sees every event, the final one
// included. It returns nil after an "exit" (or "end") event, the *Error of an
// "error" event, fn's error (which stops the stream), ctx's error, or the
// last error once the RetryPolicy gives up.
func (c *Client) FollowProcessOutput(ctx context.Context, vm string, pid uint32, fn func(Event) error) error {
	return c.follow(ctx, func(ctx context.Context, last string) (*Stream, error) {
		return c.ProcessOutput(ctx, vm, pid, StreamOptions{LastEventID: last, IdleTimeout: c.retry.IdleTimeout})
	}, fn)
}

// FollowShellOutput is FollowProcessOutput for a shell: it ends at the
// shell's "end" or "error" event.
func (c *Client) FollowShellOutput(ctx context.Context, vm, shell string, fn func(Event) error) error {
	return c.follow(ctx, func(ctx context.Context, last string) (*Stream, error) {
		return c.ShellOutput(ctx, vm, shell, StreamOptions{LastEventID: last, IdleTimeout: c.retry.IdleTimeout})
	}, fn)
}

// FollowVMEvents is FollowProcessOutput for a VM's events: it ends when the
// VM ends, with an "end" event (nil) or an "error" event (its *Error, code
// conflict with the VM's final state).
func (c *Client) FollowVMEvents(ctx context.Context, vm string, fn func(Event) error) error {
	return c.follow(ctx, func(ctx context.Context, last string) (*Stream, error) {
		return c.VMEvents(ctx, vm, StreamOptions{LastEventID: last, IdleTimeout: c.retry.IdleTimeout})
	}, fn)
}

// errStop carries fn's error out of a stream.
type errStop struct{ err error }

func (e errStop) Error() string { return e.err.Error() }

func (c *Client) follow(ctx context.Context, open func(context.Context, string) (*Stream, error), fn func(Event) error) error {
	p := c.retry
	last := ""
	failures := 0
	for {
		s, err := open(ctx, last)
		if err == nil {
			var final bool
			var progressed bool
			final, progressed, err = consume(ctx, s, fn)
			last = s.LastEventID()
			_ = s.Close()
			if final {
				return err
			}
			var stop errStop
			if errors.As(err, &stop) {
				return stop.err
			}
			if progressed {
				failures = 0
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !retryable(err) {
			return err
		}
		failures++
		if failures >= p.MaxAttempts {
			return fmt.Errorf("client: stream lost, giving up after %d attempts: %w", failures, err)
		}
		if err := sleep(ctx, backoff(p, failures, err)); err != nil {
			return err
		}
	}
}

// consume hands s's events to fn until the stream's final event (final is
// then true and err is nil or the error event's *Error) or an error.
func consume(ctx context.Context, s *Stream, fn func(Event) error) (final, progressed bool, err error) {
	for {
		ev, err := s.Next(ctx)
		if err != nil {
			if err == io.EOF {
				// The connection ended cleanly but before a final event.
				err = io.ErrUnexpectedEOF
			}
			return false, progressed, err
		}
		progressed = true
		if err := fn(ev); err != nil {
			return false, progressed, errStop{err}
		}
		switch ev.Type {
		case EventExit, EventEnd:
			return true, progressed, nil
		case EventError:
			perr, derr := ev.Problem()
			if derr != nil {
				return true, progressed, derr
			}
			return true, progressed, perr
		}
	}
}

// retryable says whether reconnecting could help.
func retryable(err error) bool {
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
