package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
)

// follow iterates over the events of the streams open opens, reconnecting
// with the last event id after a dropped connection, as the RetryPolicy
// says. The iteration ends after the final event; an error ends it as its
// last value. For a VM's events, the conflict error event that says the VM
// ended is the normal end, not an error (its final state event came
// before).
func (c *Client) follow(ctx context.Context, open func(context.Context, StreamOptions) (*Stream, error), vmEvents bool) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		p := c.retry
		last := ""
		failures := 0
		for {
			s, err := open(ctx, StreamOptions{LastEventID: last, IdleTimeout: p.IdleTimeout, follow: true})
			if err == nil {
				progressed := false
				for {
					ev, nerr := s.Next(ctx)
					if nerr != nil {
						err = nerr
						break
					}
					progressed = true
					if !yield(ev, nil) {
						_ = s.Close()
						return
					}
				}
				last = s.LastEventID()
				_ = s.Close()
				var e *Error
				switch {
				case err == io.EOF:
					return
				case errors.As(err, &e) && e.Status == 0:
					// A final error event: the gateway said why the
					// stream ended, and reconnecting cannot change it.
					if !vmEvents || e.Code != CodeConflict {
						yield(nil, err)
					}
					return
				}
				if progressed {
					failures = 0
				}
			}
			if ctx.Err() != nil {
				yield(nil, ctx.Err())
				return
			}
			if !retryStream(err) {
				yield(nil, err)
				return
			}
			failures++
			if failures >= p.MaxAttempts {
				yield(nil, fmt.Errorf("client: stream lost, giving up after %d attempts: %w", failures, err))
				return
			}
			if err := sleep(ctx, backoff(p, failures, err)); err != nil {
				yield(nil, err)
				return
			}
		}
	}
}

// pages iterates over every item of a paged list, fetching the pages one
// by one with list as the iteration goes on.
func pages[T any, O interface{ withCursor(string) O }](ctx context.Context, opts O, list func(context.Context, O) (*List[T], error)) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		opts := opts.withCursor("")
		for {
			page, err := list(ctx, opts)
			if err != nil {
				var zero T
				yield(zero, err)
				return
			}
			for _, it := range page.Items {
				if !yield(it, nil) {
					return
				}
			}
			if page.NextCursor == "" {
				return
			}
			opts = opts.withCursor(page.NextCursor)
		}
	}
}
