package agentos_test

// Benchmarks of the Go client against the real sidecar. Each benchmark starts
// its own sidecar and VM outside the timer, warms the exact operation up once
// (the first process on a VM pays ~0.3-0.8 s of runtime warm-up), and reports,
// besides ns/op, the median and 95th percentile of the per-iteration latency
// ("p50-ms", "p95-ms") and, for transfers, "MiB/s". bench/run.sh reads those
// metrics to compare with the official Node SDK (bench/official.mjs), which
// runs the same operations with the same sizes.
//
//	go test -run '^$' -bench . ./agentos/
//
// The benchmarks use b.Loop, so setup runs once per benchmark whatever
// -benchtime is.

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/agentos"
	"github.com/agentos-gateway/agentos-gateway/internal/mockanthropic"
)

// benchTimeout bounds everything one benchmark does, setup included.
const benchTimeout = 15 * time.Minute

// benchSidecar starts a sidecar for one benchmark, or skips the benchmark when
// the engine is not installed. It is closed by b.Cleanup.
func benchSidecar(b *testing.B) (context.Context, *agentos.Sidecar) {
	b.Helper()
	if _, err := agentos.LocateEngine(); err != nil {
		b.Skipf("agentos engine not available (run `make setup`): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), benchTimeout)
	b.Cleanup(cancel)
	s, err := agentos.Start(ctx, agentos.Options{})
	if err != nil {
		b.Fatalf("start sidecar: %v", err)
	}
	b.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer ccancel()
		if err := s.Close(cctx); err != nil {
			b.Errorf("close sidecar: %v", err)
		}
	})
	return ctx, s
}

// benchVM starts a sidecar and one VM for a benchmark, both disposed by
// b.Cleanup, and warms the VM's runtime up with one untimed `true`.
func benchVM(b *testing.B) (context.Context, *agentos.VM) {
	b.Helper()
	ctx, s := benchSidecar(b)
	vm, err := s.CreateVM(ctx, agentos.VMOptions{})
	if err != nil {
		b.Fatalf("create vm: %v", err)
	}
	b.Cleanup(func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := vm.Dispose(dctx); err != nil {
			b.Errorf("dispose vm: %v", err)
		}
	})
	benchExec(ctx, b, vm, "true")
	return ctx, vm
}

// benchExec runs a command and fails the benchmark unless it exits 0.
func benchExec(ctx context.Context, b *testing.B, vm *agentos.VM, cmd string) *agentos.ExecResult {
	res, err := vm.Exec(ctx, cmd, agentos.ExecOptions{})
	if err != nil {
		b.Fatalf("exec %q: %v", cmd, err)
	}
	if res.ExitCode != 0 {
		b.Fatalf("exec %q: exit %d, stderr %q", cmd, res.ExitCode, res.Stderr)
	}
	return res
}

// benchLatencies records per-iteration durations and reports their median and
// 95th percentile in milliseconds.
type benchLatencies []time.Duration

func (l benchLatencies) percentile(p float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	if p == 50 && len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	// Nearest rank, the same definition bench/official.mjs uses.
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

func (l benchLatencies) report(b *testing.B) {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(l.percentile(50)), "p50-ms")
	b.ReportMetric(ms(l.percentile(95)), "p95-ms")
}

// reportThroughput reports MiB/s over the whole run: bytes moved per
// iteration times iterations over the summed iteration durations.
func (l benchLatencies) reportThroughput(b *testing.B, bytesPerOp int64) {
	var total time.Duration
	for _, d := range l {
		total += d
	}
	if total > 0 {
		b.ReportMetric(float64(bytesPerOp)*float64(len(l))/(1<<20)/total.Seconds(), "MiB/s")
	}
}

// benchCreate times the creation of a VM with the default options followed
// by then (nil: nothing) on a sidecar of its own, whose first VM, created
// and disposed untimed, loads the software packages. Each VM is disposed
// outside the timer.
func benchCreate(b *testing.B, then func(ctx context.Context, vm *agentos.VM)) {
	ctx, s := benchSidecar(b)
	create := func() *agentos.VM {
		vm, err := s.CreateVM(ctx, agentos.VMOptions{})
		if err != nil {
			b.Fatalf("create vm: %v", err)
		}
		return vm
	}
	dispose := func(vm *agentos.VM) {
		if err := vm.Dispose(ctx); err != nil {
			b.Fatalf("dispose vm: %v", err)
		}
	}
	dispose(create())
	var lat benchLatencies
	for b.Loop() {
		start := time.Now()
		vm := create()
		if then != nil {
			then(ctx, vm)
		}
		lat = append(lat, time.Since(start))
		b.StopTimer()
		dispose(vm)
		b.StartTimer()
	}
	lat.report(b)
}

func BenchmarkCreateVM(b *testing.B) {
	b.ReportAllocs()
	benchCreate(b, nil)
}

// BenchmarkCreateExecEchoHi is create-to-first-output in the Go client:
// create a VM with the default options, then exec `echo hi`, whose first
// process pays the runtime's warm-up; the same operation as the official
// SDK's create_exec_echo_hi (bench/official.mjs), and the engine's share of
// the gateway's BenchmarkCreateFirstOutputCold.
func BenchmarkCreateExecEchoHi(b *testing.B) {
	benchCreate(b, func(ctx context.Context, vm *agentos.VM) {
		if res := benchExec(ctx, b, vm, "echo hi"); string(res.Stdout) != "hi\n" {
			b.Fatalf("echo hi: stdout %q", res.Stdout)
		}
	})
}

func benchExecLatency(b *testing.B, cmd string, check func(*agentos.ExecResult) error) {
	ctx, vm := benchVM(b)
	benchExecLatencyOn(ctx, b, vm, cmd, check, 0)
}

func BenchmarkExecTrue(b *testing.B) {
	benchExecLatency(b, "true", nil)
}

func BenchmarkExecEchoHi(b *testing.B) {
	benchExecLatency(b, "echo hi", func(r *agentos.ExecResult) error {
		if string(r.Stdout) != "hi\n" {
			return fmt.Errorf("echo hi: stdout %q, want %q", r.Stdout, "hi\n")
		}
		return nil
	})
}

// benchCatFile is 1 MiB of printable ASCII in 64-byte lines, so that the
// official SDK, which decodes exec output as UTF-8 text, returns the same
// length (bench/official.mjs writes identical bytes).
func benchCatFile() []byte {
	const line = 64
	data := make([]byte, 1<<20)
	for i := range data {
		if i%line == line-1 {
			data[i] = '\n'
		} else {
			data[i] = 'a' + byte((i/line+i%line)%26)
		}
	}
	return data
}

func BenchmarkExecCat1MiB(b *testing.B) {
	ctx, vm := benchVM(b)
	data := benchCatFile()
	if err := vm.WriteFile(ctx, "/workspace/1m.bin", data); err != nil {
		b.Fatalf("write 1m.bin: %v", err)
	}
	b.SetBytes(int64(len(data)))
	benchExecLatencyOn(ctx, b, vm, "cat /workspace/1m.bin", func(r *agentos.ExecResult) error {
		if !bytes.Equal(r.Stdout, data) {
			return fmt.Errorf("cat 1m.bin: %d bytes of stdout differ from the %d-byte file", len(r.Stdout), len(data))
		}
		return nil
	}, int64(len(data)))
}

// benchExecLatencyOn is benchExecLatency on a given VM, reporting throughput
// too when bytesPerOp > 0.
func benchExecLatencyOn(ctx context.Context, b *testing.B, vm *agentos.VM, cmd string, check func(*agentos.ExecResult) error, bytesPerOp int64) {
	if check == nil {
		check = func(*agentos.ExecResult) error { return nil }
	}
	if err := check(benchExec(ctx, b, vm, cmd)); err != nil { // warm-up
		b.Fatal(err)
	}
	b.ReportAllocs()
	var lat benchLatencies
	for b.Loop() {
		start := time.Now()
		res, err := vm.Exec(ctx, cmd, agentos.ExecOptions{})
		lat = append(lat, time.Since(start))
		if err != nil {
			b.Fatalf("exec %q: %v", cmd, err)
		}
		if res.ExitCode != 0 {
			b.Fatalf("exec %q: exit %d, stderr %q", cmd, res.ExitCode, res.Stderr)
		}
		if err := check(res); err != nil {
			b.Fatal(err)
		}
	}
	lat.report(b)
	if bytesPerOp > 0 {
		lat.reportThroughput(b, bytesPerOp)
	}
}

// benchStreamCmd writes exactly 50 MiB to stdout with the default software.
// A plain command (no shell): `yes | head` pipelines hang on this engine, and
// a pipeline would also add a shell to the measurement.
const (
	benchStreamBytes = 50 << 20
	benchStreamCmd   = "head -c 52428800 /dev/zero"
)

// benchStream runs cmd and consumes its stdout as a stream with Next,
// returning the number of stdout bytes.
func benchStream(ctx context.Context, vm *agentos.VM, cmd string) (int64, int, error) {
	p, err := vm.SpawnCommand(ctx, cmd, agentos.SpawnOptions{CloseStdin: true})
	if err != nil {
		return 0, 0, err
	}
	var n int64
	for {
		o, err := p.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return n, 0, err
		}
		if o.Stream == agentos.Stdout {
			n += int64(len(o.Data))
		}
	}
	st, err := p.Wait(ctx)
	return n, st.ExitCode, err
}

func BenchmarkStream50MiB(b *testing.B) {
	ctx, vm := benchVM(b)
	if _, _, err := benchStream(ctx, vm, "head -c 1024 /dev/zero"); err != nil { // warm-up
		b.Fatalf("warm-up stream: %v", err)
	}
	b.SetBytes(benchStreamBytes)
	b.ReportAllocs()
	var lat benchLatencies
	for b.Loop() {
		start := time.Now()
		n, code, err := benchStream(ctx, vm, benchStreamCmd)
		lat = append(lat, time.Since(start))
		if err != nil {
			b.Fatalf("stream: %v (after %d bytes)", err, n)
		}
		if code != 0 || n != benchStreamBytes {
			b.Fatalf("stream: exit %d, %d bytes, want exit 0 and %d bytes", code, n, benchStreamBytes)
		}
	}
	lat.report(b)
	lat.reportThroughput(b, benchStreamBytes)
}

// benchWriteRead writes size random bytes with WriteFileFrom, reads them back
// with ReadFileTo and checks their sha256 outside the timer.
func benchWriteRead(b *testing.B, size int) {
	ctx, vm := benchVM(b)
	data := make([]byte, size)
	if _, err := rand.Read(data); err != nil {
		b.Fatal(err)
	}
	want := sha256.Sum256(data)
	const path = "/workspace/wr.bin"
	var got bytes.Buffer
	got.Grow(size)
	round := func() error {
		if _, err := vm.WriteFileFrom(ctx, path, bytes.NewReader(data)); err != nil {
			return err
		}
		got.Reset()
		_, err := vm.ReadFileTo(ctx, path, &got)
		return err
	}
	check := func() {
		if sha256.Sum256(got.Bytes()) != want {
			b.Fatalf("read back %d bytes whose sha256 differs from the %d written", got.Len(), size)
		}
	}
	if err := round(); err != nil { // warm-up
		b.Fatalf("write/read: %v", err)
	}
	check()

	b.SetBytes(2 * int64(size))
	b.ReportAllocs()
	var lat benchLatencies
	for b.Loop() {
		start := time.Now()
		err := round()
		lat = append(lat, time.Since(start))
		if err != nil {
			b.Fatalf("write/read: %v", err)
		}
		b.StopTimer()
		check()
		b.StartTimer()
	}
	lat.report(b)
	lat.reportThroughput(b, 2*int64(size))
}

// BenchmarkWriteRead16MiB moves 32 MiB per iteration: 16 MiB in, 16 MiB out.
func BenchmarkWriteRead16MiB(b *testing.B) { benchWriteRead(b, 16<<20) }

// BenchmarkWriteRead4MiB is the largest round trip the official SDK can do
// (its writeFile/readFile send one frame; 8 MiB reads are rejected and a
// 16 MiB write kills the sidecar), so it is the comparable transfer.
func BenchmarkWriteRead4MiB(b *testing.B) { benchWriteRead(b, 4<<20) }

// BenchmarkPromptHello is one pi turn ("hello" → "Hello from the mock LLM."
// in 5 streamed deltas) against the offline mock of the Anthropic API:
// what an agent turn costs the engine, without the model's own time.
// bench/run.sh puts it next to the gateway's BenchmarkPromptHelloHTTP.
func BenchmarkPromptHello(b *testing.B) {
	ctx, s := benchSidecar(b)
	mock := mockanthropic.Start(b)
	vm, err := s.CreateVM(ctx, agentos.VMOptions{Agents: []string{"pi"}, LoopbackExemptPorts: []uint16{uint16(mock.Port())}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = vm.Dispose(dctx)
	})
	sess, err := vm.OpenSession(ctx, agentos.OpenSessionOptions{Agent: "pi", Env: mock.Env()})
	if err != nil {
		b.Fatal(err)
	}
	prompt := []byte(`[{"type":"text","text":"hello"}]`)
	turn := func() {
		res, err := sess.Prompt(ctx, prompt, "")
		if err != nil || res.StopReason != "end_turn" {
			b.Fatalf("prompt: %+v %v", res, err)
		}
	}
	turn() // the agent's first turn pays its start-up
	var lat benchLatencies
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		turn()
		lat = append(lat, time.Since(start))
	}
	lat.report(b)
}
