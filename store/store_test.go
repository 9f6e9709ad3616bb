package store

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// postgresEnv names the DSN of a PostgreSQL server the tests may create
// databases on; `make test` starts one with scripts/postgres-test.sh.
const postgresEnv = "AGENTOS_GATEWAY_TEST_POSTGRES"

// backends are the databases every test runs against. dsn returns the DSN of
// a fresh, empty database of the kind, dropped when the test ends.
var backends = []struct {
	name string
	dsn  func(t *testing.T) string
}{
	{"sqlite", func(t *testing.T) string { return filepath.Join(t.TempDir(), "gateway.db") }},
	{"postgres", freshPostgres},
}

// forEachBackend runs fn as a parallel subtest per backend, each with a
// database of its own.
func forEachBackend(t *testing.T, fn func(t *testing.T, db *DB)) {
	t.Helper()
	forEachBackendDSN(t, func(t *testing.T, dsn string) {
		fn(t, openTest(t, dsn))
	})
}

// forEachBackendDSN is forEachBackend for tests that open the database
// themselves.
func forEachBackendDSN(t *testing.T, fn func(t *testing.T, dsn string)) {
	t.Helper()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			fn(t, b.dsn(t))
		})
	}
}

func openTest(t *testing.T, dsn string) *DB {
	t.Helper()
	db, err := Open(testContext(t), dsn)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return db
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

var (
	pgAdminOnce sync.Once
	pgAdmin     *sql.DB
	pgAdminErr  error
)

// freshPostgres creates a database with a random name on the server of
// postgresEnv and returns its DSN; the database is dropped at cleanup. With
// no server the test fails, as the suite is meant to cover both backends,
// unless -short.
func freshPostgres(t *testing.T) string {
	t.Helper()
	base := os.Getenv(postgresEnv)
	if base == "" {
		if testing.Short() {
			t.Skipf("%s is not set (-short: PostgreSQL tests skipped)", postgresEnv)
		}
		t.Fatalf("%s is not set: run the tests through `make test`, which starts a PostgreSQL server "+
			"(scripts/postgres-test.sh) and sets it, or set it to the DSN of a server you may create databases on", postgresEnv)
	}
	pgAdminOnce.Do(func() {
		pgAdmin, pgAdminErr = sql.Open("pgx", base)
		if pgAdminErr == nil {
			pgAdmin.SetMaxOpenConns(4)
			pgAdminErr = pgAdmin.PingContext(context.Background())
		}
	})
	if pgAdminErr != nil {
		t.Fatalf("connect to %s: %v", postgresEnv, pgAdminErr)
	}
	name := "agw_test_" + randomString(8)
	ctx := context.Background()
	if _, err := pgAdmin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		// Cleanups run last-in first-out, so the test's DB is closed by now;
		// FORCE ends any connection that outlived it anyway.
		if _, err := pgAdmin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parse %s: %v", postgresEnv, err)
	}
	u.Path = "/" + name
	return u.String()
}

// wantCode fails the test unless err is a *gateway.Error with code.
func wantCode(t *testing.T, err error, code gateway.Code) {
	t.Helper()
	var ge *gateway.Error
	if !errors.As(err, &ge) {
		t.Fatalf("error = %v, want a *gateway.Error with code %s", err, code)
	}
	if ge.Code != code {
		t.Fatalf("error code = %s (%v), want %s", ge.Code, err, code)
	}
}

func mustTenant(t *testing.T, db *DB, id string) gateway.Tenant {
	t.Helper()
	ten, err := db.CreateTenant(testContext(t), gateway.Tenant{ID: id, Name: "tenant " + id})
	if err != nil {
		t.Fatalf("CreateTenant(%s): %v", id, err)
	}
	return ten
}

func TestParseDSN(t *testing.T) {
	tests := []struct {
		dsn        string
		kind, path string
		code       gateway.Code // "" if valid
	}{
		{dsn: "/var/lib/gw/gw.db", kind: dialectSQLite, path: "/var/lib/gw/gw.db"},
		{dsn: "data/gw.db", kind: dialectSQLite, path: "data/gw.db"},
		{dsn: "sqlite:/var/lib/gw.db", kind: dialectSQLite, path: "/var/lib/gw.db"},
		{dsn: "sqlite:///var/lib/gw.db", kind: dialectSQLite, path: "/var/lib/gw.db"},
		{dsn: "sqlite:gw.db", kind: dialectSQLite, path: "gw.db"},
		{dsn: ":memory:", kind: dialectSQLite, path: ":memory:"},
		{dsn: "postgres://u:p@localhost:5432/db?sslmode=disable", kind: dialectPostgres, path: "postgres://u:p@localhost:5432/db?sslmode=disable"},
		{dsn: "postgresql://localhost/db", kind: dialectPostgres, path: "postgresql://localhost/db"},
		{dsn: "", code: gateway.CodeInvalidArgument},
		{dsn: "sqlite:", code: gateway.CodeInvalidArgument},
		{dsn: "gw.db?_pragma=foo", code: gateway.CodeInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.dsn, func(t *testing.T) {
			kind, path, err := parseDSN(tt.dsn)
			if tt.code != "" {
				wantCode(t, err, tt.code)
				return
			}
			if err != nil {
				t.Fatalf("parseDSN: %v", err)
			}
			if kind != tt.kind || path != tt.path {
				t.Fatalf("parseDSN = %q, %q; want %q, %q", kind, path, tt.kind, tt.path)
			}
		})
	}
}

func TestRebind(t *testing.T) {
	tests := []struct {
		d        dialect
		in, want string
	}{
		{sqlite, "SELECT a FROM t WHERE b = ? AND c = ?", "SELECT a FROM t WHERE b = ? AND c = ?"},
		{postgres, "SELECT a FROM t WHERE b = ? AND c = ?", "SELECT a FROM t WHERE b = $1 AND c = $2"},
		{postgres, "SELECT 1", "SELECT 1"},
		{postgres, "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", "($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"},
	}
	for _, tt := range tests {
		if got := tt.d.rebind(tt.in); got != tt.want {
			t.Errorf("%s.rebind(%q) = %q, want %q", tt.d.name, tt.in, got, tt.want)
		}
	}
}

func TestCursor(t *testing.T) {
	at := time.Date(2025, 3, 4, 5, 6, 7, 123456000, time.UTC)
	c, ok, err := decodeCursor(encodeCursor(at, "vm_1"))
	if err != nil || !ok || !c.time().Equal(at) || c.ID != "vm_1" {
		t.Fatalf("round trip = %+v, %v, %v", c, ok, err)
	}
	if _, ok, err := decodeCursor(""); ok || err != nil {
		t.Fatalf("empty cursor = %v, %v", ok, err)
	}
	for _, bad := range []string{"!!", "bm90IGpzb24", "e30"} { // not base64; "not json"; "{}"
		_, _, err := decodeCursor(bad)
		wantCode(t, err, gateway.CodeInvalidArgument)
	}
}

func TestOpenInMemory(t *testing.T) {
	db := openTest(t, ":memory:")
	ctx := testContext(t)
	if db.Dialect() != "sqlite" {
		t.Fatalf("Dialect = %s", db.Dialect())
	}
	mustTenant(t, db, "t1")
	if _, err := db.GetTenant(ctx, "t1"); err != nil {
		t.Fatalf("GetTenant: %v", err)
	}
}

func TestOpenCreatesDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a", "b", "gw.db")
	db := openTest(t, "sqlite:"+path)
	if err := db.Ping(testContext(t)); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("database file: %v", err)
	}
}

func TestOpenUnreachablePostgres(t *testing.T) {
	// Port 1 on loopback: nothing listens there, so the connection is refused
	// at once.
	_, err := Open(testContext(t), "postgres://u:p@127.0.0.1:1/db?sslmode=disable&connect_timeout=5")
	wantCode(t, err, gateway.CodeUnavailable)
}

func TestDialectAndPing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		want := strings.Split(t.Name(), "/")[1]
		if db.Dialect() != want {
			t.Fatalf("Dialect = %s, want %s", db.Dialect(), want)
		}
		if err := db.Ping(testContext(t)); err != nil {
			t.Fatalf("Ping: %v", err)
		}
	})
}
