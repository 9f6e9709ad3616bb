package soak

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
	"github.com/agentos-gateway/agentos-gateway/internal/mockanthropic"
)

func TestPercentile(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		var out []time.Duration
		for _, n := range ns {
			out = append(out, time.Duration(n)*time.Millisecond)
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	for _, tc := range []struct {
		sorted []time.Duration
		q      float64
		want   time.Duration
	}{
		{nil, 0.5, 0},
		{ms(7), 0.99, 7 * time.Millisecond},
		{ms(1, 2, 3, 4), 0.5, 2 * time.Millisecond},
		{ms(hundred...), 0.5, 50 * time.Millisecond},
		{ms(hundred...), 0.99, 99 * time.Millisecond},
		{ms(hundred...), 1, 100 * time.Millisecond},
	} {
		if got := percentile(tc.sorted, tc.q); got != tc.want {
			t.Errorf("percentile(%d values, %v) = %v, want %v", len(tc.sorted), tc.q, got, tc.want)
		}
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&client.Error{Status: 409, Code: client.CodeConflict}, "conflict"},
		{fmt.Errorf("wrapped: %w", &client.Error{Code: client.CodeUnavailable}), "unavailable"},
		{context.DeadlineExceeded, classStalled},
		{fmt.Errorf("read: %w", client.ErrIdleTimeout), classStalled},
		{errors.New("connection refused"), classTransport},
	} {
		if got := classify(tc.err); got != tc.want {
			t.Errorf("classify(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

func TestMetricValue(t *testing.T) {
	text := []byte("# HELP go_goroutines Number of goroutines.\n# TYPE go_goroutines gauge\ngo_goroutines_extra 3\ngo_goroutines 42\n")
	if v, ok := metricValue(text, "go_goroutines"); !ok || v != 42 {
		t.Fatalf("go_goroutines = %v %v", v, ok)
	}
	if _, ok := metricValue(text, "go_threads"); ok {
		t.Fatal("found a metric that is not there")
	}
}

// TestJudge holds the pass rule: every must-be-zero figure, a clean exit,
// at least one kill and a success of every kind.
func TestJudge(t *testing.T) {
	passing := func() *Report {
		rep := &Report{GatewayExit: "0", SidecarKills: 1}
		for _, k := range allKinds {
			rep.Ops = append(rep.Ops, OpStats{Kind: k, OK: 1})
		}
		return rep
	}
	for _, tc := range []struct {
		name   string
		change func(*Report)
		pass   bool
	}{
		{"clean", func(*Report) {}, true},
		{"lost write", func(r *Report) { r.LostWrites = 1 }, false},
		{"hung stream", func(r *Report) { r.HungStreams = 1 }, false},
		{"wrong result", func(r *Report) { r.WrongResults = 1 }, false},
		{"goroutines", func(r *Report) { r.LeakedGoroutines = 2 }, false},
		{"process", func(r *Report) { r.LeakedProcesses = []string{"pid 1"} }, false},
		{"temp dir", func(r *Report) { r.LeakedTempDirs = []string{"/tmp/x"} }, false},
		{"unclean exit", func(r *Report) { r.GatewayExit = "exit status 1" }, false},
		{"no kill", func(r *Report) { r.SidecarKills = 0 }, false},
		{"a kind never succeeded", func(r *Report) { r.Ops[0].OK = 0 }, false},
		{"failures from kills", func(r *Report) { r.Errors = []ErrorCount{{Code: "unavailable", FromKills: 9}} }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := passing()
			tc.change(rep)
			rep.judge()
			if rep.Passed() != tc.pass {
				t.Fatalf("passed %v, want %v: %v", rep.Passed(), tc.pass, rep.Failures)
			}
		})
	}
}

// TestAgentRetried checks which pi turn texts pass as pi's own retry of a
// failed model request, given how many requests the model received.
func TestAgentRetried(t *testing.T) {
	const hello = mockanthropic.HelloText
	for _, tc := range []struct {
		name     string
		text     string
		attempts int
		want     bool
	}{
		{"the text the run showed, two attempts", "Hello from" + hello, 2, true},
		{"two failed attempts", "HelloHello from the" + hello, 3, true},
		{"a failed attempt that streamed it all", hello + hello, 2, true},
		{"more partial replies than failed attempts", "HelloHello from" + hello, 2, false},
		{"a repeated chunk without a second request", "Hello from" + hello, 1, false},
		{"the whole reply alone is not a retry", hello, 2, false},
		{"a partial reply that is not a prefix", "Hello there" + hello, 2, false},
		{"text before the first attempt", "oops Hello" + hello, 2, false},
		{"a reply cut at its end", "Hello from" + "Hello from the mock", 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := agentRetried(tc.text, tc.attempts); got != tc.want {
				t.Errorf("agentRetried(%q, %d) = %v, want %v", tc.text, tc.attempts, got, tc.want)
			}
		})
	}
}
