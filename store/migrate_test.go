package store

import (
	"errors"
	"strings"
	"sync"
	"testing"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

func TestMigrationFiles(t *testing.T) {
	sq, err := loadMigrations(dialectSQLite)
	if err != nil {
		t.Fatalf("sqlite: %v", err)
	}
	pg, err := loadMigrations(dialectPostgres)
	if err != nil {
		t.Fatalf("postgres: %v", err)
	}
	if len(sq) == 0 || len(sq) != len(pg) {
		t.Fatalf("sqlite has %d migrations, postgres %d: the dialects must have the same ones", len(sq), len(pg))
	}
	for i := range sq {
		if sq[i].name != pg[i].name {
			t.Errorf("migration %d: sqlite %s, postgres %s", i+1, sq[i].name, pg[i].name)
		}
	}
}

func TestMigrationsIdempotent(t *testing.T) {
	forEachBackendDSN(t, func(t *testing.T, dsn string) {
		ctx := testContext(t)
		db := openTest(t, dsn)
		mustTenant(t, db, "kept")
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}

		db = openTest(t, dsn) // again: nothing to apply, nothing lost
		ms, _ := loadMigrations(db.Dialect())
		v, err := db.SchemaVersion(ctx)
		if err != nil || v != ms[len(ms)-1].version {
			t.Fatalf("SchemaVersion = %d, %v; want %d", v, err, ms[len(ms)-1].version)
		}
		var rows int
		if err := db.queryRow(ctx, db.r, `SELECT COUNT(*) FROM schema_migrations`).Scan(&rows); err != nil || rows != len(ms) {
			t.Fatalf("schema_migrations has %d rows (%v), want %d", rows, err, len(ms))
		}
		if _, err := db.GetTenant(ctx, "kept"); err != nil {
			t.Fatalf("GetTenant after reopening: %v", err)
		}
	})
}

func TestMigrationsConcurrentOpen(t *testing.T) {
	forEachBackendDSN(t, func(t *testing.T, dsn string) {
		const n = 4
		var wg sync.WaitGroup
		errs := make([]error, n)
		dbs := make([]*DB, n)
		for i := range n {
			wg.Go(func() { dbs[i], errs[i] = Open(testContext(t), dsn) })
		}
		wg.Wait()
		for i := range n {
			if errs[i] != nil {
				t.Errorf("Open %d: %v", i, errs[i])
				continue
			}
			dbs[i].Close()
		}
		db := openTest(t, dsn)
		ms, _ := loadMigrations(db.Dialect())
		var rows int
		if err := db.queryRow(testContext(t), db.r, `SELECT COUNT(*) FROM schema_migrations`).Scan(&rows); err != nil || rows != len(ms) {
			t.Fatalf("schema_migrations has %d rows (%v), want %d", rows, err, len(ms))
		}
	})
}

func TestMigrationsNewerSchemaRefused(t *testing.T) {
	forEachBackendDSN(t, func(t *testing.T, dsn string) {
		ctx := testContext(t)
		db := openTest(t, dsn)
		if _, err := db.exec(ctx, db.w, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
			9999, "9999_future.sql", db.d.ts(db.now())); err != nil {
			t.Fatal(err)
		}
		db.Close()

		_, err := Open(ctx, dsn)
		if !errors.Is(err, ErrSchemaTooNew) {
			t.Fatalf("Open = %v, want ErrSchemaTooNew", err)
		}
		wantCode(t, err, gateway.CodeInternal)
		if !strings.Contains(gateway.ErrorMessage(err), "9999") {
			t.Errorf("message %q does not name the database's version", gateway.ErrorMessage(err))
		}
	})
}
