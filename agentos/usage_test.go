package agentos

import (
	"os"
	"testing"
	"time"
)

func TestParseProcStatCPU(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
		err  bool
	}{
		// A real line of the sidecar (utime 269, stime 126).
		{in: "8955 (agentos-sidecar) S 8948 8955 7461 0 -1 4194304 303024 31600 17 4 269 126 103 9 20 0 16 0 3348560 2692431872 81160", want: 3950 * time.Millisecond},
		// A command name with spaces and parentheses.
		{in: "7 (a) b (c) R 1 7 7 0 -1 0 0 0 0 0 5 6 0 0 20 0 1 0 0", want: 110 * time.Millisecond},
		{in: "7 no name", err: true},
		{in: "7 (x) R 1 2", err: true},
		{in: "7 (x) R 1 7 7 0 -1 0 0 0 0 0 x 6 0 0", err: true},
	} {
		got, err := parseProcStatCPU([]byte(c.in))
		if (err != nil) != c.err || got != c.want {
			t.Errorf("parseProcStatCPU(%q) = %v, %v; want %v, error %v", c.in, got, err, c.want, c.err)
		}
	}
}

func TestParseStatusRSS(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		err  bool
	}{
		{in: "Name:\tx\nVmSize:\t  9 kB\nVmRSS:\t  324756 kB\nThreads: 16\n", want: 324756 << 10},
		{in: "Name:\tx\nState:\tZ (zombie)\n", want: 0},
		{in: "VmRSS:\t12 MB\n", err: true},
		{in: "VmRSS:\tlots kB\n", err: true},
	} {
		got, err := parseStatusRSS([]byte(c.in))
		if (err != nil) != c.err || got != c.want {
			t.Errorf("parseStatusRSS(%q) = %v, %v; want %v, error %v", c.in, got, err, c.want, c.err)
		}
	}
}

// The parsers read this process's own /proc files as the kernel writes them.
func TestProcUsageOfSelf(t *testing.T) {
	u, err := procUsage(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if u.RSS <= 0 || u.CPU < 0 {
		t.Fatalf("usage of the test process: %+v", u)
	}
	if _, err := procUsage(-1); err == nil {
		t.Fatal("usage of pid -1: no error")
	}
}
