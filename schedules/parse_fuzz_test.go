package schedules

import (
	"testing"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// FuzzParse feeds arbitrary expressions and zones to Parse: it must never
// panic, refuse with anything but invalid_argument naming cron or timezone,
// or accept a schedule that ticks more often than once a second.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"*/5 * * * *", "*/2 * * * * *", "@every 2s", "@every 1ms", "@hourly", "0 9 * * 1-5", "61 * * * *", "CRON_TZ=UTC * * * * *", "TZ=", ""} {
		f.Add(s, "UTC")
	}
	f.Add("* * * * *", "Europe/Paris")
	f.Add("* * * * *", "../../etc/passwd")
	f.Fuzz(func(t *testing.T, expr, zone string) {
		sched, err := Parse(expr, zone)
		if err != nil {
			var ge *gateway.Error
			if !asError(err, &ge) || ge.Code != gateway.CodeInvalidArgument || (ge.Details["field"] != "cron" && ge.Details["field"] != "timezone") {
				t.Fatalf("Parse(%q, %q): %v", expr, zone, err)
			}
			return
		}
		from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		next := sched.Next(from)
		if !next.IsZero() && next.Sub(from) < time.Second {
			t.Fatalf("Parse(%q, %q) ticks after %s", expr, zone, next.Sub(from))
		}
	})
}
