package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// Kind names a kind of operation the workers make.
type Kind string

// The kinds of operations.
const (
	KindCreateVM      Kind = "create_vm"
	KindExec          Kind = "exec"
	KindExecStream    Kind = "exec_stream"
	KindFileWrite     Kind = "file_write"
	KindFileRead      Kind = "file_read"
	KindProcessStream Kind = "process_stream"
	KindStreamResume  Kind = "stream_resume"
	KindOpenSession   Kind = "open_session"
	KindPiTurn        Kind = "pi_turn"
)

// allKinds are the kinds every run must make succeed at least once.
var allKinds = []Kind{KindCreateVM, KindExec, KindExecStream, KindFileWrite, KindFileRead,
	KindProcessStream, KindStreamResume, KindOpenSession, KindPiTurn}

// Error classes that are not gateway codes: what went wrong on the
// driver's side of a call.
const (
	// classHung is a stream that neither ended nor progressed within its
	// deadline.
	classHung = "hung_stream"
	// classStalled is a buffered call that did not answer within its
	// deadline.
	classStalled = "stalled_call"
	// classWrong is an answer that was 2xx but not what the operation must
	// give (other output, another exit code, a gap in a resumed stream).
	classWrong = "wrong_result"
	// classTransport is a call that failed without an answer (connection
	// refused or reset).
	classTransport = "transport"
)

// OpStats are the figures of one kind of operation.
type OpStats struct {
	Kind   Kind          `json:"kind"`
	OK     int           `json:"ok"`
	Failed int           `json:"failed"`
	P50    time.Duration `json:"p50Ns"`
	P99    time.Duration `json:"p99Ns"`
}

// ErrorCount counts the failed operations of one code: those the kills
// caused (on a VM that turned out lost, or a VM create that a kill
// overlapped) and the others.
type ErrorCount struct {
	Code      string `json:"code"`
	FromKills int    `json:"fromKills"`
	Other     int    `json:"other"`
}

// Report is what a soak run measured. The run passed when Failures is
// empty.
type Report struct {
	Duration      time.Duration `json:"durationNs"`
	Tenants       int           `json:"tenants"`
	SidecarKills  int           `json:"sidecarKills"`
	VMsLost       int           `json:"vmsLost"`
	Ops           []OpStats     `json:"ops"`
	Errors        []ErrorCount  `json:"errors"`
	Latency       OpStats       `json:"latency"`
	AckedWrites   int           `json:"ackedWrites"`
	VerifiedReads int           `json:"verifiedReads"`
	// LostWrites counts acknowledged writes to VMs that were not lost
	// whose read-back differed or failed.
	LostWrites int `json:"lostWrites"`
	// HungStreams counts streams that neither progressed nor ended within
	// their deadline.
	HungStreams int `json:"hungStreams"`
	// WrongResults counts 2xx answers that were not what the operation
	// must give.
	WrongResults int `json:"wrongResults"`
	// AgentRetries counts pi turns that ended well after pi retried a
	// failed model request on its own; their text carries the failed
	// attempt's partial reply before the whole one, as the engine reports
	// it. Not a failure of the gateway, but a sign of engine stalls.
	AgentRetries int `json:"agentRetries"`
	// GoroutinesBaseline and GoroutinesAfter are the gateway's
	// go_goroutines before the load and once it settled after it.
	GoroutinesBaseline int `json:"goroutinesBaseline"`
	GoroutinesAfter    int `json:"goroutinesAfter"`
	LeakedGoroutines   int `json:"leakedGoroutines"`
	// LeakedProcesses are the sidecars and their children alive after the
	// gateway stopped; LeakedTempDirs the temporary files and directories
	// left behind.
	LeakedProcesses []string `json:"leakedProcesses"`
	LeakedTempDirs  []string `json:"leakedTempDirs"`
	// GatewayExit is how the gateway ended after SIGTERM ("0" when clean).
	GatewayExit string `json:"gatewayExit"`
	// Samples are the first few failures, in words, for a human reader.
	Samples []string `json:"samples"`
	// Failures lists what makes the run fail; empty when it passed.
	Failures []string `json:"failures"`
}

// Passed reports whether the run met every must-be-zero figure.
func (r *Report) Passed() bool { return len(r.Failures) == 0 }

// maxSamples bounds the failures kept in words.
const maxSamples = 20

// recorder collects the figures of a run from every worker.
type recorder struct {
	mu         sync.Mutex
	ok         map[Kind][]time.Duration
	failed     map[Kind]int
	errKills   map[string]int
	errOther   map[string]int
	kills      int
	killTimes  []time.Time
	vmsLost    int
	acked      int
	verified   int
	lostWrites int
	hung       int
	wrong      int
	// agentRetries counts pi turns that passed after pi retried the model
	// request itself.
	agentRetries int
	samples      []string
}

func newRecorder() *recorder {
	return &recorder{ok: map[Kind][]time.Duration{}, failed: map[Kind]int{},
		errKills: map[string]int{}, errOther: map[string]int{}}
}

func (r *recorder) succeeded(k Kind, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ok[k] = append(r.ok[k], d)
}

// killed records a sidecar kill.
func (r *recorder) killed(at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.kills++
	r.killTimes = append(r.killTimes, at)
}

// killedBetween reports whether a kill happened from a little before from
// (the sidecar's death may be noticed late) to to.
func (r *recorder) killedBetween(from, to time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range r.killTimes {
		if !t.Before(from.Add(-time.Second)) && !t.After(to) {
			return true
		}
	}
	return false
}

// fail records a failed operation of class (a gateway code or one of the
// class constants); fromKill says whether a kill caused it.
func (r *recorder) fail(k Kind, class string, fromKill bool, what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed[k]++
	if fromKill {
		r.errKills[class]++
	} else {
		r.errOther[class]++
	}
	switch class {
	case classHung:
		r.hung++
	case classWrong:
		r.wrong++
	}
	// Failures from kills are what the soak intends; only the others are
	// worth a line of their own.
	if !fromKill && len(r.samples) < maxSamples {
		r.samples = append(r.samples, fmt.Sprintf("%s: %s: %s", k, class, what))
	}
}

func (r *recorder) lostWrite(what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lostWrites++
	if len(r.samples) < maxSamples {
		r.samples = append(r.samples, "lost write: "+what)
	}
}

func (r *recorder) count(n *int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	*n++
}

// classify names the class of a failed call's error.
func classify(err error) string {
	var ce *client.Error
	switch {
	case errors.As(err, &ce):
		return string(ce.Code)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, client.ErrIdleTimeout):
		return classStalled
	default:
		return classTransport
	}
}

// percentile returns the q-quantile of sorted durations (nearest rank).
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func stats(k Kind, durs []time.Duration, failed int) OpStats {
	s := slices.Clone(durs)
	slices.Sort(s)
	return OpStats{Kind: k, OK: len(s), Failed: failed, P50: percentile(s, 0.50), P99: percentile(s, 0.99)}
}

// fill copies the recorder's figures into rep.
func (r *recorder) fill(rep *Report) {
	r.mu.Lock()
	defer r.mu.Unlock()
	kinds := map[Kind]bool{}
	for k := range r.ok {
		kinds[k] = true
	}
	for k := range r.failed {
		kinds[k] = true
	}
	var all []time.Duration
	failed := 0
	for _, k := range slices.Sorted(maps.Keys(kinds)) {
		rep.Ops = append(rep.Ops, stats(k, r.ok[k], r.failed[k]))
		all = append(all, r.ok[k]...)
		failed += r.failed[k]
	}
	rep.Latency = stats("all", all, failed)
	codes := map[string]bool{}
	for c := range r.errKills {
		codes[c] = true
	}
	for c := range r.errOther {
		codes[c] = true
	}
	for _, c := range slices.Sorted(maps.Keys(codes)) {
		rep.Errors = append(rep.Errors, ErrorCount{Code: c, FromKills: r.errKills[c], Other: r.errOther[c]})
	}
	rep.SidecarKills, rep.VMsLost = r.kills, r.vmsLost
	rep.AckedWrites, rep.VerifiedReads, rep.LostWrites = r.acked, r.verified, r.lostWrites
	rep.HungStreams, rep.WrongResults, rep.AgentRetries = r.hung, r.wrong, r.agentRetries
	rep.Samples = slices.Clone(r.samples)
}

// judge lists the must-be-zero figures that are not.
func (rep *Report) judge() {
	check := func(n int, what string) {
		if n != 0 {
			rep.Failures = append(rep.Failures, fmt.Sprintf("%d %s", n, what))
		}
	}
	check(rep.LostWrites, "lost acknowledged writes")
	check(rep.HungStreams, "hung streams")
	check(rep.WrongResults, "wrong results")
	check(rep.LeakedGoroutines, "leaked gateway goroutines")
	check(len(rep.LeakedProcesses), "leaked processes")
	check(len(rep.LeakedTempDirs), "leaked temporary files")
	if rep.GatewayExit != "0" {
		rep.Failures = append(rep.Failures, "the gateway did not exit cleanly after SIGTERM: "+rep.GatewayExit)
	}
	if rep.SidecarKills == 0 {
		rep.Failures = append(rep.Failures, "no sidecar was killed")
	}
	ok := map[Kind]int{}
	for _, op := range rep.Ops {
		ok[op.Kind] = op.OK
	}
	for _, k := range allKinds {
		if ok[k] == 0 {
			rep.Failures = append(rep.Failures, fmt.Sprintf("no %s succeeded", k))
		}
	}
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

// Print writes the report as readable tables.
func (rep *Report) Print(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "soak: %s, %d tenants, %d sidecars killed, %d VMs lost\n\n",
		rep.Duration.Round(time.Second), rep.Tenants, rep.SidecarKills, rep.VMsLost)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "operation\tok\tfailed\tp50\tp99\t")
	for _, op := range append(slices.Clone(rep.Ops), rep.Latency) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t\n", op.Kind, op.OK, op.Failed, ms(op.P50), ms(op.P99))
	}
	tw.Flush()
	b.WriteString("\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "error code\tfrom kills\totherwise\t")
	errs := slices.Clone(rep.Errors)
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].FromKills+errs[i].Other > errs[j].FromKills+errs[j].Other })
	for _, e := range errs {
		fmt.Fprintf(tw, "%s\t%d\t%d\t\n", e.Code, e.FromKills, e.Other)
	}
	if len(errs) == 0 {
		fmt.Fprintln(tw, "none\t0\t0\t")
	}
	tw.Flush()
	b.WriteString("\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "must be zero\tvalue\t")
	fmt.Fprintf(tw, "lost acknowledged writes (of %d acked, %d read back)\t%d\t\n", rep.AckedWrites, rep.VerifiedReads, rep.LostWrites)
	fmt.Fprintf(tw, "hung streams\t%d\t\n", rep.HungStreams)
	fmt.Fprintf(tw, "wrong results\t%d\t\n", rep.WrongResults)
	fmt.Fprintf(tw, "leaked goroutines (%d before, %d after)\t%d\t\n", rep.GoroutinesBaseline, rep.GoroutinesAfter, rep.LeakedGoroutines)
	fmt.Fprintf(tw, "leaked processes\t%d\t\n", len(rep.LeakedProcesses))
	fmt.Fprintf(tw, "leaked temporary files\t%d\t\n", len(rep.LeakedTempDirs))
	tw.Flush()
	for _, p := range rep.LeakedProcesses {
		fmt.Fprintf(&b, "  process: %s\n", p)
	}
	for _, p := range rep.LeakedTempDirs {
		fmt.Fprintf(&b, "  temporary: %s\n", p)
	}
	fmt.Fprintf(&b, "gateway exit after SIGTERM: %s\n", rep.GatewayExit)
	if rep.AgentRetries > 0 {
		fmt.Fprintf(&b, "pi turns that passed after pi retried its model request: %d\n", rep.AgentRetries)
	}
	if len(rep.Samples) > 0 {
		b.WriteString("\nfailures not caused by a kill (first ones):\n")
		for _, s := range rep.Samples {
			fmt.Fprintf(&b, "  %s\n", s)
		}
	}
	if rep.Passed() {
		b.WriteString("\nPASS\n")
	} else {
		fmt.Fprintf(&b, "\nFAIL: %s\n", strings.Join(rep.Failures, "; "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
