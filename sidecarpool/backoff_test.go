package sidecarpool

import (
	"errors"
	"testing"
	"time"
)

func TestBackoffDelay(t *testing.T) {
	tests := []struct {
		name     string
		b        Backoff
		failures int
		want     time.Duration
	}{
		{"no failures", Backoff{}, 0, 0},
		{"negative failures", Backoff{}, -1, 0},
		{"first failure waits Initial", Backoff{}, 1, 200 * time.Millisecond},
		{"second doubles", Backoff{}, 2, 400 * time.Millisecond},
		{"third doubles again", Backoff{}, 3, 800 * time.Millisecond},
		{"capped at default Max", Backoff{}, 7, 10 * time.Second},
		{"long streak does not overflow", Backoff{}, 1000, 10 * time.Second},
		{"custom bounds", Backoff{Initial: time.Second, Max: 3 * time.Second}, 2, 2 * time.Second},
		{"custom cap", Backoff{Initial: time.Second, Max: 3 * time.Second}, 3, 3 * time.Second},
		{"Max below Initial is raised to Initial", Backoff{Initial: 5 * time.Second, Max: time.Second}, 4, 5 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.b.Delay(tc.failures); got != tc.want {
				t.Fatalf("Delay(%d) = %v, want %v", tc.failures, got, tc.want)
			}
		})
	}
}

// TestRestartTracker drives the spawn policy with a fake clock: every event
// carries its own time, and no process or sleep is involved.
func TestRestartTracker(t *testing.T) {
	const ms = time.Millisecond
	type event struct {
		kind  string        // "fail", "succeed" or "check"
		at    time.Duration // the clock, as an offset from the start
		began time.Duration // "fail": when the failed attempt began
		allow bool          // "check": whether a spawn may begin at at
	}
	fail := func(began, at time.Duration) event { return event{kind: "fail", began: began, at: at} }
	check := func(at time.Duration, allow bool) event { return event{kind: "check", at: at, allow: allow} }
	succeed := func(at time.Duration) event { return event{kind: "succeed", at: at} }

	tests := []struct {
		name    string
		backoff Backoff
		events  []event
	}{
		{"fresh tracker allows at once", Backoff{}, []event{check(0, true)}},
		{"one failure waits Initial from the failure", Backoff{}, []event{
			fail(0, 10*ms), check(10*ms, false), check(209*ms, false), check(210*ms, true),
		}},
		{"consecutive failures double the wait", Backoff{}, []event{
			fail(0, 0), check(199*ms, false),
			fail(200*ms, 200*ms), check(599*ms, false), check(600*ms, true),
			fail(600*ms, 600*ms), check(1399*ms, false), check(1400*ms, true),
		}},
		{"the wait is capped at Max", Backoff{Initial: 100 * ms, Max: 300 * ms}, []event{
			fail(0, 0), fail(100*ms, 100*ms), fail(300*ms, 300*ms), check(599*ms, false),
			fail(600*ms, 600*ms), check(899*ms, false), check(900*ms, true),
		}},
		{"a success resets to Initial", Backoff{}, []event{
			fail(0, 0), fail(200*ms, 200*ms), fail(600*ms, 600*ms), check(700*ms, false),
			succeed(1400 * ms), check(1400*ms, true),
			fail(1500*ms, 1500*ms), check(1699*ms, false), check(1700*ms, true),
		}},
		{"parallel attempts that fail together count once", Backoff{}, []event{
			fail(0, 10*ms), fail(0, 30*ms), // both began before the first failure
			check(229*ms, false), check(230*ms, true), // one round, timed from the latest failure
			fail(230*ms, 240*ms), check(639*ms, false), check(640*ms, true),
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
			tr := newRestartTracker(tc.backoff)
			for i, ev := range tc.events {
				now := base.Add(ev.at)
				switch ev.kind {
				case "fail":
					tr.failed(base.Add(ev.began), now, errors.New("boom"))
				case "succeed":
					tr.succeeded()
				case "check":
					if got := tr.allow(now); got != ev.allow {
						t.Fatalf("event %d: allow at %v = %v, want %v (retryAt %v)", i, ev.at, got, ev.allow, tr.retryAt().Sub(base))
					}
				}
			}
		})
	}
}

func TestRestartTrackerKeepsLastError(t *testing.T) {
	tr := newRestartTracker(Backoff{})
	now := time.Now()
	first, second := errors.New("first"), errors.New("second")
	tr.failed(now, now, first)
	tr.failed(now, now.Add(time.Millisecond), second)
	if tr.lastErr != second {
		t.Fatalf("lastErr = %v, want the latest failure", tr.lastErr)
	}
	tr.succeeded()
	if tr.lastErr != nil || !tr.retryAt().IsZero() {
		t.Fatalf("after success: lastErr %v, retryAt %v; want both cleared", tr.lastErr, tr.retryAt())
	}
}
