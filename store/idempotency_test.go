package store

import (
	"bytes"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

func TestIdempotency(t *testing.T) {
	const ttl = 24 * time.Hour
	t0 := time.Date(2025, 5, 1, 12, 0, 0, 0, time.UTC)

	// Each step calls one method at a clock offset from t0 and checks the
	// outcome; the steps of a case share a database.
	type step struct {
		at   time.Duration
		op   string // begin, complete, abandon
		key  string
		hash string
		body string

		code      gateway.Code // "" for success
		fresh     bool
		replay    bool // begin: the record is done with body as its outcome
		createdAt time.Duration
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"fresh then replay", []step{
			{op: "begin", key: "k", hash: "h1", fresh: true},
			{at: time.Second, op: "complete", key: "k", body: `{"id":"p1"}`},
			{at: time.Minute, op: "begin", key: "k", hash: "h1", replay: true, body: `{"id":"p1"}`},
			{at: ttl - time.Microsecond, op: "begin", key: "k", hash: "h1", replay: true, body: `{"id":"p1"}`},
		}},
		{"hash mismatch", []step{
			{op: "begin", key: "k", hash: "h1", fresh: true},
			{op: "complete", key: "k", body: "ok"},
			{at: time.Second, op: "begin", key: "k", hash: "h2", code: gateway.CodeUnprocessable},
		}},
		{"hash mismatch while pending", []step{
			{op: "begin", key: "k", hash: "h1", fresh: true},
			{op: "begin", key: "k", hash: "h2", code: gateway.CodeUnprocessable},
		}},
		{"in progress", []step{
			{op: "begin", key: "k", hash: "h1", fresh: true},
			{at: time.Second, op: "begin", key: "k", hash: "h1", code: gateway.CodeConflict},
		}},
		{"expired done record is replaced", []step{
			{op: "begin", key: "k", hash: "h1", fresh: true},
			{op: "complete", key: "k", body: "first"},
			{at: ttl + time.Microsecond, op: "begin", key: "k", hash: "h2", fresh: true, createdAt: ttl + time.Microsecond},
			{at: ttl + time.Second, op: "begin", key: "k", hash: "h2", code: gateway.CodeConflict},
		}},
		{"expired pending record is replaced", []step{
			{op: "begin", key: "k", hash: "h1", fresh: true},
			{at: ttl + time.Hour, op: "begin", key: "k", hash: "h1", fresh: true, createdAt: ttl + time.Hour},
		}},
		{"abandon lets the client retry", []step{
			{op: "begin", key: "k", hash: "h1", fresh: true},
			{op: "abandon", key: "k"},
			{op: "abandon", key: "k", code: gateway.CodeNotFound},
			{at: time.Second, op: "begin", key: "k", hash: "h1", fresh: true, createdAt: time.Second},
		}},
		{"a completed record is neither abandoned nor completed again", []step{
			{op: "begin", key: "k", hash: "h1", fresh: true},
			{op: "complete", key: "k", body: "ok"},
			{op: "abandon", key: "k", code: gateway.CodeConflict},
			{op: "complete", key: "k", body: "again", code: gateway.CodeConflict},
			{op: "begin", key: "k", hash: "h1", replay: true, body: "ok"},
		}},
		{"unknown key", []step{
			{op: "complete", key: "nope", code: gateway.CodeNotFound},
			{op: "abandon", key: "nope", code: gateway.CodeNotFound},
		}},
		{"keys are per key", []step{
			{op: "begin", key: "a", hash: "h", fresh: true},
			{op: "begin", key: "b", hash: "h", fresh: true},
		}},
		{"an empty outcome replays as empty", []step{
			{op: "begin", key: "k", hash: "h1", fresh: true},
			{op: "complete", key: "k"},
			{op: "begin", key: "k", hash: "h1", replay: true},
		}},
		{"empty key", []step{
			{op: "begin", key: "", hash: "h1", code: gateway.CodeInvalidArgument},
		}},
	}
	forEachBackend(t, func(t *testing.T, db *DB) {
		for i, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ctx := testContext(t)
				tenant := fmt.Sprintf("tenant_%d", i) // a namespace per case
				for j, s := range tt.steps {
					db.now = func() time.Time { return t0.Add(s.at) }
					var err error
					switch s.op {
					case "begin":
						var rec IdempotencyRecord
						var fresh bool
						rec, fresh, err = db.BeginIdempotent(ctx, tenant, s.key, s.hash, ttl)
						if err != nil || s.code != "" {
							break
						}
						if fresh != s.fresh {
							t.Fatalf("step %d: fresh = %v, want %v (%+v)", j, fresh, s.fresh, rec)
						}
						if rec.TenantID != tenant || rec.Key != s.key || rec.RequestHash != s.hash {
							t.Fatalf("step %d: record %+v", j, rec)
						}
						if fresh && (rec.Done || !rec.CreatedAt.Equal(t0.Add(s.createdAt))) {
							t.Fatalf("step %d: fresh record %+v, want pending, created at +%v", j, rec, s.createdAt)
						}
						if s.replay && (!rec.Done || !bytes.Equal(rec.Outcome, []byte(s.body)) || !rec.CreatedAt.Equal(t0)) {
							t.Fatalf("step %d: replayed record %+v, want done with %q", j, rec, s.body)
						}
					case "complete":
						var body []byte
						if s.body != "" {
							body = []byte(s.body)
						}
						err = db.CompleteIdempotent(ctx, tenant, s.key, body)
					case "abandon":
						err = db.AbandonIdempotent(ctx, tenant, s.key)
					}
					if s.code != "" {
						wantCode(t, err, s.code)
					} else if err != nil {
						t.Fatalf("step %d (%s): %v", j, s.op, err)
					}
				}
			})
		}
	})
}

func TestIdempotencyConcurrentBegin(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		const n = 20
		var (
			wg     sync.WaitGroup
			fresh  atomic.Int32
			start  = make(chan struct{})
			errs   = make([]error, n)
			claims = make([]bool, n)
		)
		for i := range n {
			wg.Go(func() {
				<-start
				_, claims[i], errs[i] = db.BeginIdempotent(ctx, "acme", "race", "h", time.Hour)
				if claims[i] {
					fresh.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		if fresh.Load() != 1 {
			t.Fatalf("%d of %d concurrent calls got fresh=true, want exactly 1", fresh.Load(), n)
		}
		for i := range n {
			if claims[i] {
				if errs[i] != nil {
					t.Errorf("the fresh call failed: %v", errs[i])
				}
				continue
			}
			wantCode(t, errs[i], gateway.CodeConflict) // the winner is still in progress
		}

		// Once the winner completes, all retries replay it, concurrently too.
		if err := db.CompleteIdempotent(ctx, "acme", "race", []byte("done")); err != nil {
			t.Fatal(err)
		}
		for range n {
			wg.Go(func() {
				rec, fresh, err := db.BeginIdempotent(ctx, "acme", "race", "h", time.Hour)
				if err != nil || fresh || !rec.Done || string(rec.Outcome) != "done" {
					t.Errorf("replay = %+v, %v, %v", rec, fresh, err)
				}
			})
		}
		wg.Wait()
	})
}

// TestIdempotencyConcurrentBeginTwoHandles races two DB handles on one
// database, as two gateways would: on SQLite they contend for the file's
// write lock (busy_timeout), not just for one pool.
func TestIdempotencyConcurrentBeginTwoHandles(t *testing.T) {
	forEachBackendDSN(t, func(t *testing.T, dsn string) {
		ctx := testContext(t)
		dbs := []*DB{openTest(t, dsn), openTest(t, dsn)}
		for round := range 5 {
			key := fmt.Sprintf("race-%d", round)
			var wg sync.WaitGroup
			var fresh atomic.Int32
			for i := range 10 {
				wg.Go(func() {
					_, f, err := dbs[i%2].BeginIdempotent(ctx, "acme", key, "h", time.Hour)
					if f {
						fresh.Add(1)
					} else if gateway.ErrorCode(err) != gateway.CodeConflict {
						t.Errorf("BeginIdempotent: %v", err)
					}
				})
			}
			wg.Wait()
			if fresh.Load() != 1 {
				t.Fatalf("round %d: %d fresh, want 1", round, fresh.Load())
			}
		}
	})
}

func TestPurgeExpiredIdempotent(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		t0 := time.Date(2025, 5, 1, 12, 0, 0, 0, time.UTC)
		for i, key := range []string{"old-done", "old-pending", "new"} {
			db.now = func() time.Time { return t0.Add(time.Duration(i/2) * time.Hour) }
			if _, _, err := db.BeginIdempotent(ctx, "acme", key, "h", 48*time.Hour); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.CompleteIdempotent(ctx, "acme", "old-done", []byte("x")); err != nil {
			t.Fatal(err)
		}
		n, err := db.PurgeExpiredIdempotent(ctx, t0.Add(time.Minute))
		if err != nil || n != 2 {
			t.Fatalf("PurgeExpiredIdempotent = %d, %v; want 2", n, err)
		}
		db.now = func() time.Time { return t0.Add(2 * time.Hour) }
		if _, fresh, err := db.BeginIdempotent(ctx, "acme", "old-done", "h", 48*time.Hour); err != nil || !fresh {
			t.Errorf("purged key: fresh = %v, %v; want a fresh record", fresh, err)
		}
		if _, _, err := db.BeginIdempotent(ctx, "acme", "new", "h", 48*time.Hour); gateway.ErrorCode(err) != gateway.CodeConflict {
			t.Errorf("kept key: %v, want it still pending", err)
		}
		if n, err := db.PurgeExpiredIdempotent(ctx, t0); err != nil || n != 0 {
			t.Errorf("second purge = %d, %v", n, err)
		}
	})
}

// TestIdempotencyMigrationOnExistingDatabase opens a database that a gateway
// of schema version 2 left with idempotency records of the old shape (an
// HTTP status and body): migration 0003 drops them, and keys work in the
// new shape.
func TestIdempotencyMigrationOnExistingDatabase(t *testing.T) {
	forEachBackendDSN(t, func(t *testing.T, dsn string) {
		ctx := testContext(t)
		old, ms := openAtVersion(t, dsn, 2)
		if _, err := old.exec(ctx, old.w, `INSERT INTO idempotency_keys (tenant_id, key, request_hash, status, body, done, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, "acme", "k", "h", 200, []byte(`{"exitCode":0}`), true, old.d.ts(old.now())); err != nil {
			t.Fatalf("insert a version 2 record: %v", err)
		}
		if err := old.Close(); err != nil {
			t.Fatal(err)
		}

		db := openTest(t, dsn)
		if v, err := db.SchemaVersion(ctx); err != nil || v != ms[len(ms)-1].version || v < 3 {
			t.Fatalf("SchemaVersion = %d, %v; want %d", v, err, ms[len(ms)-1].version)
		}
		_, fresh, err := db.BeginIdempotent(ctx, "acme", "k", "h", time.Hour)
		if err != nil || !fresh {
			t.Fatalf("a key of the old shape: fresh = %v, %v; want it dropped", fresh, err)
		}
		if err := db.CompleteIdempotent(ctx, "acme", "k", []byte(`{"value":1}`)); err != nil {
			t.Fatal(err)
		}
		if rec, fresh, err := db.BeginIdempotent(ctx, "acme", "k", "h", time.Hour); err != nil || fresh || string(rec.Outcome) != `{"value":1}` {
			t.Fatalf("replay = %+v, %v, %v", rec, fresh, err)
		}
	})
}
