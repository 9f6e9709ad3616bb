package notify

import (
	"errors"
	"testing"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/webhook"
	"go.uber.org/goleak"
)

// TestCheck: a subscription names an http(s) URL the target policy admits
// and known events, each once, or "*" alone; a refusal names its field.
func TestCheck(t *testing.T) {
	targets, err := webhook.ParseTargets([]string{"127.0.0.1", "hooks.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{}, nil, webhook.NewClient(targets, []byte("0123456789abcdef")))
	for _, c := range []struct {
		name   string
		url    string
		events []gateway.EventType
		field  string // "" when accepted
	}{
		{"all", "http://127.0.0.1:8080/h", []gateway.EventType{"*"}, ""},
		{"some", "https://hooks.example.com/h", []gateway.EventType{gateway.EventVMState, gateway.EventExecDone}, ""},
		{"no events", "https://hooks.example.com/h", nil, "events"},
		{"unknown", "https://hooks.example.com/h", []gateway.EventType{"vm.exploded"}, "events[0]"},
		{"star with others", "https://hooks.example.com/h", []gateway.EventType{gateway.EventVMState, "*"}, "events[1]"},
		{"twice", "https://hooks.example.com/h", []gateway.EventType{gateway.EventVMState, gateway.EventVMState}, "events[1]"},
		{"not allowed", "https://evil.example.net/h", []gateway.EventType{"*"}, "url"},
		{"not http", "ftp://127.0.0.1/h", []gateway.EventType{"*"}, "url"},
		{"no host", "http:///h", []gateway.EventType{"*"}, "url"},
		{"not a URL", "://", []gateway.EventType{"*"}, "url"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := s.check(&gateway.Webhook{URL: c.url, Events: c.events})
			if c.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ge *gateway.Error
			if gateway.ErrorCode(err) != gateway.CodeInvalidArgument || !errors.As(err, &ge) || ge.Details["field"] != c.field {
				t.Fatalf("error %v; want invalid_argument naming %s", err, c.field)
			}
		})
	}
}

// TestBackoff: each failed attempt doubles the delay, within a tenth either
// way, up to the maximum.
func TestBackoff(t *testing.T) {
	s := New(Config{Backoff: time.Second, MaxBackoff: time.Minute}, nil, nil)
	for _, c := range []struct {
		n    int
		want time.Duration
	}{{1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {6, 32 * time.Second}, {7, time.Minute}, {30, time.Minute}} {
		for range 50 {
			got := s.backoff(c.n)
			if got < c.want-c.want/10 || got > c.want+c.want/10 {
				t.Fatalf("backoff(%d) = %s, want %s ± 10%%", c.n, got, c.want)
			}
		}
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
