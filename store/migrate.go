package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// migrationFS holds the schema, one directory a dialect. A file is named
// NNNN_what.sql; versions start at 1 and have no gaps, and both dialects have
// the same ones. A migration, once released, is never edited: changes go in a
// new file.
//
//go:embed migrations
var migrationFS embed.FS

// ErrSchemaTooNew is the cause (errors.Is) of Open's error when the database
// was migrated by a newer gateway than this one: running older code on it
// could corrupt what the newer schema means.
var ErrSchemaTooNew = errors.New("database schema is newer than this gateway")

// migrationLockID keys the PostgreSQL advisory lock that serialises gateways
// migrating the same database at once ("agos" in ASCII).
const migrationLockID = 0x61676f73

type migration struct {
	version int
	name    string // the file name
	sql     string
}

var migrationName = regexp.MustCompile(`^([0-9]{4})_[a-z0-9_]+\.sql$`)

// loadMigrations returns the migrations of a dialect in order.
func loadMigrations(dialectName string) ([]migration, error) {
	dir := path.Join("migrations", dialectName)
	entries, err := fs.ReadDir(migrationFS, dir)
	if err != nil {
		return nil, fmt.Errorf("store: read migrations: %w", err)
	}
	var ms []migration
	for _, e := range entries {
		m := migrationName.FindStringSubmatch(e.Name())
		if e.IsDir() || m == nil {
			return nil, fmt.Errorf("store: unexpected file %s in %s", e.Name(), dir)
		}
		v, _ := strconv.Atoi(m[1])
		b, err := fs.ReadFile(migrationFS, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("store: read migration: %w", err)
		}
		ms = append(ms, migration{version: v, name: e.Name(), sql: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	// Versions are numbered by the piece of work that adds them, so a
	// branch may lack another's number: gaps are allowed, repeats are not.
	for i, m := range ms {
		if m.version < 1 || (i > 0 && m.version == ms[i-1].version) {
			return nil, fmt.Errorf("store: migration %s: version %04d is below 1 or taken by another migration", m.name, m.version)
		}
	}
	return ms, nil
}

// SchemaVersion returns the version of the database's schema: the last
// migration applied.
func (db *DB) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := db.queryRow(ctx, db.r, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v)
	if err != nil {
		return 0, dbError(err, "store: read schema version")
	}
	return v, nil
}

// migrate applies the migrations the database lacks, all in one transaction:
// a failure leaves the schema as it was. Running it again, or from two
// gateways at once, applies each migration once.
func (db *DB) migrate(ctx context.Context) error {
	ms, err := loadMigrations(db.d.name)
	if err != nil {
		return gateway.Wrap(gateway.CodeInternal, err, "store: load migrations")
	}
	return db.applyMigrations(ctx, ms)
}

// applyMigrations is migrate with the migrations given: ms[:n] brings a
// test's database to version n.
func (db *DB) applyMigrations(ctx context.Context, ms []migration) error {
	latest := ms[len(ms)-1].version
	return db.inTx(ctx, func(tx *sql.Tx) error {
		// SQLite's BEGIN IMMEDIATE already excludes every other writer.
		if db.d.name == dialectPostgres {
			if _, err := db.exec(ctx, tx, `SELECT pg_advisory_xact_lock(?)`, int64(migrationLockID)); err != nil {
				return dbError(err, "store: lock for migration")
			}
		}
		_, err := db.exec(ctx, tx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version    INTEGER NOT NULL PRIMARY KEY,
			name       TEXT    NOT NULL,
			applied_at `+db.d.timeType+` NOT NULL
		)`)
		if err != nil {
			return dbError(err, "store: create schema_migrations")
		}
		var current int
		if err := db.queryRow(ctx, tx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
			return dbError(err, "store: read schema version")
		}
		applied, err := db.appliedVersions(ctx, tx)
		if err != nil {
			return err
		}
		if current > latest {
			return &gateway.Error{
				Code:    gateway.CodeInternal,
				Message: fmt.Sprintf("store: the database schema is at version %d, newer than this gateway's %d; run a newer gateway", current, latest),
				Err:     ErrSchemaTooNew,
			}
		}
		for _, m := range ms {
			if applied[m.version] {
				continue
			}
			if _, err := tx.ExecContext(ctx, m.sql); err != nil {
				return dbError(err, "store: apply migration %s", m.name)
			}
			if _, err := db.exec(ctx, tx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
				m.version, m.name, db.d.ts(db.now())); err != nil {
				return dbError(err, "store: record migration %s", m.name)
			}
		}
		return nil
	})
}

// appliedVersions returns the versions schema_migrations records.
func (db *DB) appliedVersions(ctx context.Context, tx *sql.Tx) (map[int]bool, error) {
	rows, err := db.query(ctx, tx, `SELECT version FROM schema_migrations`)
	if err != nil {
		return nil, dbError(err, "store: read schema versions")
	}
	defer rows.Close()
	out := map[int]bool{}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, dbError(err, "store: read schema versions")
		}
		out[v] = true
	}
	if err := rows.Err(); err != nil {
		return nil, dbError(err, "store: read schema versions")
	}
	return out, nil
}
