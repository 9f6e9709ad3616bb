package sidecarpool

import "time"

// Default spawn backoff bounds.
const (
	DefaultBackoffInitial = 200 * time.Millisecond
	DefaultBackoffMax     = 10 * time.Second
)

// Backoff bounds how often the pool tries to spawn a sidecar after spawns
// failed: after n consecutive failed rounds it waits Initial·2^(n-1), never
// more than Max, counted from the last failure.
type Backoff struct {
	// Initial is the wait after the first failure (default 200 ms).
	Initial time.Duration
	// Max caps the wait (default 10 s).
	Max time.Duration
}

func (b Backoff) withDefaults() Backoff {
	if b.Initial <= 0 {
		b.Initial = DefaultBackoffInitial
	}
	if b.Max <= 0 {
		b.Max = DefaultBackoffMax
	}
	if b.Max < b.Initial {
		b.Max = b.Initial
	}
	return b
}

// Delay returns how long to wait after the given number of consecutive
// failures: none for zero failures, then Initial doubling up to Max. Zero
// fields take their defaults.
func (b Backoff) Delay(failures int) time.Duration {
	if failures <= 0 {
		return 0
	}
	b = b.withDefaults()
	d := b.Initial
	// Doubling in a loop rather than shifting keeps a long failure streak
	// from overflowing: the loop stops as soon as Max is reached.
	for i := 1; i < failures && d < b.Max; i++ {
		d *= 2
	}
	return min(d, b.Max)
}

// restartTracker decides when the pool may try to spawn again. It is a pure
// state machine, fed the clock by its caller, so the policy is tested without
// processes or sleeps (in the manner of nomad's restart tracker).
//
// Failures are counted per round, not per attempt: spawns that were already
// in flight when a failure was recorded belong to the same round, so a burst
// of parallel spawns that all fail for one reason (a missing binary, say)
// backs off like one failure instead of jumping straight to Max.
type restartTracker struct {
	backoff  Backoff
	failures int       // consecutive failed rounds
	last     time.Time // when the latest failure was recorded
	lastErr  error     // the latest failure, returned as the cause during backoff
}

func newRestartTracker(b Backoff) restartTracker {
	return restartTracker{backoff: b.withDefaults()}
}

// retryAt returns the earliest time a spawn may begin; the zero time when
// nothing failed since the last success.
func (t *restartTracker) retryAt() time.Time {
	if t.failures == 0 {
		return time.Time{}
	}
	return t.last.Add(t.backoff.Delay(t.failures))
}

// allow reports whether a spawn may begin at now.
func (t *restartTracker) allow(now time.Time) bool {
	return !now.Before(t.retryAt())
}

// failed records that a spawn which began at began failed at now.
func (t *restartTracker) failed(began, now time.Time, err error) {
	if t.failures == 0 || !began.Before(t.last) {
		t.failures++
	}
	if now.After(t.last) {
		t.last = now
	}
	t.lastErr = err
}

// succeeded records a successful spawn: the next failure starts from Initial.
func (t *restartTracker) succeeded() {
	t.failures = 0
	t.last = time.Time{}
	t.lastErr = nil
}
