package agentos

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain doubles as the fake sidecar: when AGENTOS_FAKE_SIDECAR is set the
// test binary re-executed by a test plays a sidecar that misbehaves in a way
// the real one cannot be made to (hang, corrupt frames). Otherwise it runs the
// tests, closes the shared sidecar and checks that no goroutine leaked.
func TestMain(m *testing.M) {
	if mode := os.Getenv(fakeSidecarEnv); mode != "" {
		os.Exit(runFakeSidecar(mode))
	}
	code := m.Run()
	closeShared()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goroutine leak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

var (
	sharedOnce sync.Once
	shared     *Sidecar
	sharedErr  error
)

// sharedSidecar returns one real sidecar for the tests that do not need one
// of their own: spawning one per test would dominate the suite's run time.
func sharedSidecar(t testing.TB) *Sidecar {
	t.Helper()
	requireEngine(t)
	sharedOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		shared, sharedErr = Start(ctx, Options{})
	})
	if sharedErr != nil {
		t.Fatalf("start shared sidecar: %v", sharedErr)
	}
	return shared
}

func closeShared() {
	if shared != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = shared.Close(ctx)
	}
}

// requireEngine fails (not skips) without the engine: `make test` installs it.
func requireEngine(t testing.TB) Engine {
	t.Helper()
	e, err := LocateEngine()
	if err != nil {
		t.Fatalf("%v", err)
	}
	return e
}

// newVM creates a VM on the shared sidecar, disposed when the test ends.
func newVM(t testing.TB, opts VMOptions) *VM {
	t.Helper()
	s := sharedSidecar(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	vm, err := s.CreateVM(ctx, opts)
	if err != nil {
		t.Fatalf("create vm: %v\n%s", err, s.Stderr())
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := vm.Dispose(ctx); err != nil {
			t.Errorf("dispose: %v", err)
		}
	})
	return vm
}

// ownSidecar starts a sidecar for one test, closed when it ends.
func ownSidecar(t testing.TB, opts Options) *Sidecar {
	t.Helper()
	requireEngine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("start sidecar: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}

func testContext(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
