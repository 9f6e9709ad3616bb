package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/idempotency"
	"github.com/agentos-gateway/agentos-gateway/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func openStore(t *testing.T) *store.DB {
	t.Helper()
	db, err := store.Open(context.Background(), ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func keeper(t *testing.T, db *store.DB, cfg idempotency.Config) *idempotency.Keeper {
	t.Helper()
	k := idempotency.New(cfg, db)
	t.Cleanup(k.Close)
	return k
}

type result struct {
	ExitCode int    `json:"exitCode"`
	Stdout   string `json:"stdout"`
}

func TestValueReplays(t *testing.T) {
	ctx := t.Context()
	k := keeper(t, openStore(t), idempotency.Config{})
	hash := idempotency.Hash([]byte("POST /x"), []byte(`{"a":1}`))
	claim, outcome, err := k.Begin(ctx, "t1", "key", hash)
	if err != nil || claim == nil || outcome != nil {
		t.Fatalf("Begin = %v, %v, %v; want a claim", claim, outcome, err)
	}
	// The same key while the operation runs is in progress.
	if _, _, err := k.Begin(ctx, "t1", "key", hash); gateway.ErrorCode(err) != gateway.CodeConflict {
		t.Fatalf("a second Begin while running = %v, want conflict", err)
	}
	if err := claim.Complete(ctx, result{ExitCode: 3, Stdout: "hi\n"}, nil); err != nil {
		t.Fatal(err)
	}
	claim, outcome, err = k.Begin(ctx, "t1", "key", hash)
	if err != nil || claim != nil || outcome == nil || outcome.Err() != nil {
		t.Fatalf("retry = %v, %+v, %v; want the outcome", claim, outcome, err)
	}
	var got result
	if err := outcome.Decode(&got); err != nil || got != (result{ExitCode: 3, Stdout: "hi\n"}) {
		t.Fatalf("replayed %+v, %v", got, err)
	}
	// Another request under the key is refused; another tenant's key is
	// another key.
	if _, _, err := k.Begin(ctx, "t1", "key", idempotency.Hash([]byte("other"))); gateway.ErrorCode(err) != gateway.CodeUnprocessable {
		t.Fatalf("another request = %v, want unprocessable", err)
	}
	if claim, _, err := k.Begin(ctx, "t2", "key", hash); err != nil || claim == nil {
		t.Fatalf("another tenant = %v, %v; want a claim", claim, err)
	}
}

func TestErrorReplays(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		code    gateway.Code
		message string
		detail  any
	}{
		{"gateway error", gateway.Errorf(gateway.CodeDeadlineExceeded, "too slow").WithDetail("timeout", "2s"), gateway.CodeDeadlineExceeded, "too slow", "2s"},
		{"wrapped", fmt.Errorf("exec: %w", gateway.Errorf(gateway.CodeUnprocessable, "the agent refused")), gateway.CodeUnprocessable, "the agent refused", nil},
		{"with a cause", gateway.Wrap(gateway.CodeInvalidArgument, errors.New("secret cause"), "bad prompt"), gateway.CodeInvalidArgument, "bad prompt", nil},
		// A plain error's text may hold internals: it is not kept.
		{"plain", errors.New("dial tcp 10.0.0.1: refused"), gateway.CodeInternal, "internal error", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			db := openStore(t)
			k := keeper(t, db, idempotency.Config{})
			claim, _, err := k.Begin(ctx, "t1", "k", "h")
			if err != nil {
				t.Fatal(err)
			}
			if err := claim.Complete(ctx, nil, tc.err); err != nil {
				t.Fatal(err)
			}
			_, outcome, err := k.Begin(ctx, "t1", "k", "h")
			if err != nil || outcome == nil {
				t.Fatalf("retry = %v, %v", outcome, err)
			}
			if strings.Contains(outcome.Message, "secret") || strings.Contains(outcome.Message, "10.0.0.1") {
				t.Fatalf("the record keeps a cause: %+v", outcome)
			}
			var ge *gateway.Error
			if !errors.As(outcome.Err(), &ge) || ge.Code != tc.code || ge.Message != tc.message || ge.Details["replayed"] != true {
				t.Fatalf("replayed error %#v, want %s %q replayed", outcome.Err(), tc.code, tc.message)
			}
			if tc.detail != nil && ge.Details["timeout"] != tc.detail {
				t.Fatalf("details %v lost %v", ge.Details, tc.detail)
			}
		})
	}
}

func TestReleaseLetsTheClientRetry(t *testing.T) {
	ctx := t.Context()
	k := keeper(t, openStore(t), idempotency.Config{})
	claim, _, err := k.Begin(ctx, "t1", "k", "h")
	if err != nil {
		t.Fatal(err)
	}
	// A cancelled caller still releases: the write has its own deadline.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := claim.Release(cctx); err != nil {
		t.Fatal(err)
	}
	if claim, _, err := k.Begin(ctx, "t1", "k", "h"); err != nil || claim == nil {
		t.Fatalf("after release: %v, %v; want a fresh claim", claim, err)
	}
}

func TestUnreadableOutcome(t *testing.T) {
	ctx := t.Context()
	db := openStore(t)
	k := keeper(t, db, idempotency.Config{})
	for i, body := range []string{``, `{`, `[]`, `{}`, `null`} {
		key := fmt.Sprintf("k%d", i)
		if _, _, err := k.Begin(ctx, "t1", key, "h"); err != nil {
			t.Fatal(err)
		}
		if err := db.CompleteIdempotent(ctx, "t1", key, []byte(body)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := k.Begin(ctx, "t1", key, "h"); gateway.ErrorCode(err) != gateway.CodeInternal {
			t.Errorf("outcome %q: %v, want internal", body, err)
		}
	}
}

func TestPurgeOnTick(t *testing.T) {
	ctx := t.Context()
	db := openStore(t)
	if _, _, err := db.BeginIdempotent(ctx, "t1", "old", "h", idempotency.TTL); err != nil {
		t.Fatal(err)
	}
	// The keeper's clock runs a TTL and a minute ahead, so that the record
	// is expired for it.
	ahead := func() time.Time { return time.Now().Add(idempotency.TTL + time.Minute) }
	keeper(t, db, idempotency.Config{PurgeInterval: 10 * time.Millisecond, Now: ahead})
	deadline := time.Now().Add(10 * time.Second)
	for {
		// While the record exists, it is pending: a conflict.
		_, fresh, err := db.BeginIdempotent(ctx, "t1", "old", "h", idempotency.TTL)
		if err == nil && fresh {
			return
		}
		if gateway.ErrorCode(err) != gateway.CodeConflict {
			t.Fatalf("BeginIdempotent = %v, %v", fresh, err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the keeper did not purge the expired record")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestCheckKey(t *testing.T) {
	if err := idempotency.CheckKey(strings.Repeat("k", idempotency.MaxKeyLength), "Idempotency-Key"); err != nil {
		t.Fatal(err)
	}
	err := idempotency.CheckKey(strings.Repeat("k", idempotency.MaxKeyLength+1), "Idempotency-Key")
	var ge *gateway.Error
	if !errors.As(err, &ge) || ge.Code != gateway.CodeInvalidArgument || ge.Details["field"] != "Idempotency-Key" {
		t.Fatalf("CheckKey = %v", err)
	}
}

func TestHashSeparatesParts(t *testing.T) {
	if idempotency.Hash([]byte("ab"), []byte("c")) == idempotency.Hash([]byte("a"), []byte("bc")) {
		t.Fatal("parts that join alike hash alike")
	}
}
