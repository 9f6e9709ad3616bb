// Package store is the gateway's persistence: tenants, API keys, VM records
// with their state history, agent sessions with their events and permission
// requests, and idempotency records. It speaks SQLite (pure Go,
// embedded, the default) or PostgreSQL, chosen by the DSN given to Open, with
// the same behaviour on both; the tests run every case against each.
//
// Timestamps are UTC and kept to the microsecond (PostgreSQL's timestamptz
// precision; SQLite stores Unix microseconds in an INTEGER), so a time read
// back equals the time written after Truncate(time.Microsecond).
package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base32"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	sqlitedriver "modernc.org/sqlite"  // also registers the "sqlite" database/sql driver
	sqlite3 "modernc.org/sqlite/lib"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// DB is the gateway's database. It is safe for concurrent use.
type DB struct {
	d dialect
	// w runs every write and every transaction. On SQLite it holds a single
	// connection: SQLite has one writer at a time, and queueing writers in
	// the pool is cheaper and fairer than letting them spin on SQLITE_BUSY.
	w *sql.DB
	// r runs plain reads. On SQLite it is a separate pool of read-only
	// connections, so that reads (an API key lookup on every request) never
	// wait behind a write; WAL lets them run alongside it. On PostgreSQL it is
	// w.
	r *sql.DB
	// now is the clock, replaceable in tests. It returns UTC truncated to
	// the stored precision.
	now func() time.Time
}

// Open opens the database named by dsn and brings its schema up to date.
//
// A dsn starting with "postgres://" or "postgresql://" is a PostgreSQL
// connection URL (pgx syntax). Anything else is SQLite: a file path,
// optionally prefixed "sqlite:" ("sqlite:/var/lib/gw.db", "sqlite:///var/lib/gw.db"),
// or ":memory:" for a private in-memory database. The SQLite file's directory
// is created if missing.
func Open(ctx context.Context, dsn string) (*DB, error) {
	kind, target, err := parseDSN(dsn)
	if err != nil {
		return nil, err
	}
	var db *DB
	switch kind {
	case dialectPostgres:
		db, err = openPostgres(ctx, target)
	default:
		db, err = openSQLite(ctx, target)
	}
	if err != nil {
		return nil, err
	}
	if err := db.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// parseDSN tells which dialect dsn names and returns what its driver takes.
func parseDSN(dsn string) (kind, target string, err error) {
	dsn = strings.TrimSpace(dsn)
	switch {
	case dsn == "":
		return "", "", gateway.Errorf(gateway.CodeInvalidArgument, "store: empty database DSN")
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return dialectPostgres, dsn, nil
	}
	path := strings.TrimPrefix(dsn, "sqlite:")
	if strings.HasPrefix(path, "//") {
		path = path[2:]
	}
	switch {
	case path == "":
		return "", "", gateway.Errorf(gateway.CodeInvalidArgument, "store: DSN %q names no SQLite file", dsn)
	case strings.ContainsRune(path, '?'):
		// The driver would read the rest as its own options, overriding ours.
		return "", "", gateway.Errorf(gateway.CodeInvalidArgument, "store: SQLite path %q must not contain '?'", path)
	}
	return dialectSQLite, path, nil
}

func openPostgres(ctx context.Context, dsn string) (*DB, error) {
	pool, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, gateway.Wrap(gateway.CodeInvalidArgument, err, "store: invalid PostgreSQL DSN")
	}
	pool.SetMaxOpenConns(20)
	pool.SetMaxIdleConns(10)
	pool.SetConnMaxIdleTime(5 * time.Minute)
	if err := pool.PingContext(ctx); err != nil {
		pool.Close()
		return nil, gateway.Wrap(gateway.CodeUnavailable, err, "store: cannot reach PostgreSQL")
	}
	return &DB{d: postgres, w: pool, r: pool, now: utcNow}, nil
}

// sqliteOptions are the modernc.org/sqlite DSN options of every connection.
// synchronous=NORMAL is the usual WAL setting: a power cut may drop the last
// commits but never corrupts the file, and an application crash loses nothing.
const sqliteOptions = "_busy_timeout=10000&_foreign_keys=1&_synchronous=NORMAL"

func openSQLite(ctx context.Context, path string) (*DB, error) {
	if path == ":memory:" {
		// Each connection to ":memory:" is a database of its own, so a single
		// connection serves reads and writes, and must never be closed.
		pool, err := sql.Open("sqlite", ":memory:?_txlock=immediate&"+sqliteOptions)
		if err != nil {
			return nil, gateway.Wrap(gateway.CodeInternal, err, "store: open in-memory SQLite")
		}
		pool.SetMaxOpenConns(1)
		pool.SetMaxIdleConns(1)
		pool.SetConnMaxLifetime(0)
		pool.SetConnMaxIdleTime(0)
		if err := pool.PingContext(ctx); err != nil {
			pool.Close()
			return nil, gateway.Wrap(gateway.CodeInternal, err, "store: open in-memory SQLite")
		}
		return &DB{d: sqlite, w: pool, r: pool, now: utcNow}, nil
	}

	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, gateway.Wrap(gateway.CodeInternal, err, "store: create the database directory")
		}
	}
	// _txlock=immediate takes the write lock at BEGIN: a deferred transaction
	// that reads and then writes can fail with SQLITE_BUSY without waiting when
	// another process wrote in between; an immediate one waits busy_timeout.
	w, err := sql.Open("sqlite", path+"?_txlock=immediate&_journal_mode=WAL&"+sqliteOptions)
	if err != nil {
		return nil, gateway.Wrap(gateway.CodeInternal, err, "store: open SQLite %s", path)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	// Open the writer first: it switches the file to WAL, which the readers
	// need to run beside it.
	if err := pingSQLite(ctx, w); err != nil {
		w.Close()
		return nil, gateway.Wrap(gateway.CodeInternal, err, "store: open SQLite %s", path)
	}
	r, err := sql.Open("sqlite", path+"?_query_only=1&"+sqliteOptions)
	if err != nil {
		w.Close()
		return nil, gateway.Wrap(gateway.CodeInternal, err, "store: open SQLite %s", path)
	}
	n := max(4, runtime.GOMAXPROCS(0))
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)
	return &DB{d: sqlite, w: w, r: r, now: utcNow}, nil
}

// pingSQLite opens the first connection, retrying while the file is busy:
// SQLite answers a switch to WAL with SQLITE_BUSY, without waiting for the
// busy timeout, while another process opens the same file at that moment.
func pingSQLite(ctx context.Context, db *sql.DB) error {
	for attempt := 1; ; attempt++ {
		err := db.PingContext(ctx)
		if err == nil || attempt == 40 || !isBusy(err) {
			return err
		}
		select {
		case <-time.After(time.Duration(attempt) * 5 * time.Millisecond):
		case <-ctx.Done():
			return err
		}
	}
}

// isBusy reports SQLite's SQLITE_BUSY (any of its extended codes): another
// connection holds the lock.
func isBusy(err error) bool {
	var se *sqlitedriver.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}

// Close closes the database.
func (db *DB) Close() error {
	err := db.w.Close()
	if db.r != db.w {
		err = errors.Join(err, db.r.Close())
	}
	return err
}

// Ping checks that the database answers.
func (db *DB) Ping(ctx context.Context) error {
	if err := db.w.PingContext(ctx); err != nil {
		return dbError(err, "store: ping")
	}
	if db.r != db.w {
		if err := db.r.PingContext(ctx); err != nil {
			return dbError(err, "store: ping")
		}
	}
	return nil
}

// Dialect returns "sqlite" or "postgres".
func (db *DB) Dialect() string { return db.d.name }

func utcNow() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// dbError wraps an error of the driver. Its message is safe to show; the
// cause stays in Err for logs. A context's end keeps its own code, so a
// timed-out request is not reported as a database fault.
func dbError(err error, format string, args ...any) error {
	var ge *gateway.Error
	switch {
	case errors.As(err, &ge):
		return err
	case errors.Is(err, context.DeadlineExceeded):
		return gateway.Wrap(gateway.CodeDeadlineExceeded, err, format, args...)
	case errors.Is(err, context.Canceled):
		return gateway.Wrap(gateway.CodeUnavailable, err, format, args...)
	}
	return gateway.Wrap(gateway.CodeInternal, err, format, args...)
}

// querier is what *sql.DB and *sql.Tx have in common.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// exec, query and queryRow run SQL written with "?" placeholders on q,
// rewritten for the dialect.
// Each is a span when the request it serves is traced (startOp); a query's
// span ends when its rows are there, before they are read.
func (db *DB) exec(ctx context.Context, q querier, query string, args ...any) (sql.Result, error) {
	span := db.startOp(ctx, q, query)
	res, err := q.ExecContext(ctx, db.d.rebind(query), args...)
	endOp(span, err)
	return res, err
}

func (db *DB) query(ctx context.Context, q querier, query string, args ...any) (*sql.Rows, error) {
	span := db.startOp(ctx, q, query)
	rows, err := q.QueryContext(ctx, db.d.rebind(query), args...)
	endOp(span, err)
	return rows, err
}

func (db *DB) queryRow(ctx context.Context, q querier, query string, args ...any) *sql.Row {
	span := db.startOp(ctx, q, query)
	row := q.QueryRowContext(ctx, db.d.rebind(query), args...)
	if span != nil {
		endOp(span, row.Err())
	}
	return row
}

// inTx runs fn in a transaction on the writer, committing if it returns nil.
// fn's error is returned as is. fn must not call other methods of db: on
// SQLite the transaction holds the only write connection, so a nested write
// would wait for itself.
func (db *DB) inTx(ctx context.Context, fn func(tx *sql.Tx) error) (err error) {
	if span := db.startTx(ctx); span != nil {
		defer func() { endOp(span, err) }()
	}
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return dbError(err, "store: begin transaction")
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return dbError(err, "store: commit")
	}
	return nil
}

// rowsAffected returns res's count, which both drivers always know.
func rowsAffected(res sql.Result) int64 {
	n, err := res.RowsAffected()
	if err != nil {
		return 0
	}
	return n
}

// idEncoding is lowercase Crockford base32: no i, l, o or u, so an ID or key
// read aloud or retyped cannot be misread.
var idEncoding = base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)

// randomString returns n random bytes in idEncoding.
func randomString(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails, per its documentation
	return idEncoding.EncodeToString(b)
}

// newID returns prefix followed by 80 random bits (16 characters).
func newID(prefix string) string { return prefix + randomString(10) }

// listLimit applies the page-size rule of every list: default 50, at most 500.
func listLimit(limit int) int {
	switch {
	case limit <= 0:
		return 50
	case limit > 500:
		return 500
	}
	return limit
}

// cursor is the position after which a page starts: the sort key of the
// last row returned. It travels as opaque base64 so that callers don't build
// or depend on it.
type cursor struct {
	At int64  `json:"t"` // Unix microseconds
	ID string `json:"id"`
}

func encodeCursor(at time.Time, id string) string {
	b, _ := json.Marshal(cursor{At: at.UnixMicro(), ID: id})
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeCursor parses s; ok is false for the empty cursor (the first page).
func decodeCursor(s string) (c cursor, ok bool, err error) {
	if s == "" {
		return cursor{}, false, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err == nil && c.ID == "" {
		err = errors.New("no id")
	}
	if err != nil {
		return cursor{}, false, &gateway.Error{Code: gateway.CodeInvalidArgument, Message: "invalid cursor", Err: err}
	}
	return c, true, nil
}

func (c cursor) time() time.Time { return time.UnixMicro(c.At).UTC() }

// jsonText marshals v for a JSON column.
func jsonText(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encode JSON column: %w", err)
	}
	return string(b), nil
}
