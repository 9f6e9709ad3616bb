package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// DefaultIdempotencyTTL is how long an Idempotency-Key is remembered when
// BeginIdempotent is given no ttl.
const DefaultIdempotencyTTL = 24 * time.Hour

// IdempotencyRecord is what the gateway remembers of a request made with an
// idempotency key: a hash of the request, and once Done, the outcome of its
// operation (an opaque document of the idempotency package).
type IdempotencyRecord struct {
	TenantID    string
	Key         string
	RequestHash string
	Outcome     []byte
	Done        bool
	CreatedAt   time.Time
}

const idempotencyColumns = `tenant_id, key, request_hash, outcome, done, created_at`

func scanIdempotency(row interface{ Scan(...any) error }) (IdempotencyRecord, error) {
	var r IdempotencyRecord
	err := row.Scan(&r.TenantID, &r.Key, &r.RequestHash, &r.Outcome, &r.Done, scanTime(&r.CreatedAt))
	return r, err
}

// BeginIdempotent claims an idempotency key for a request.
//
// fresh is true when no live record of the key existed: a pending one has
// been inserted, and the caller runs the operation, then calls
// CompleteIdempotent with its outcome, or AbandonIdempotent if it failed
// before doing anything. Of concurrent calls with one key exactly one is
// fresh.
//
// Otherwise the key's record is returned with fresh false when it is Done and
// has the same request hash: the caller replays its Outcome. A
// different request hash is CodeUnprocessable; a record still pending is
// CodeConflict (a request with this key is in progress). A record older than
// ttl counts as absent and is replaced; ttl <= 0 means DefaultIdempotencyTTL.
func (db *DB) BeginIdempotent(ctx context.Context, tenantID, key, requestHash string, ttl time.Duration) (rec IdempotencyRecord, fresh bool, err error) {
	if key == "" {
		return IdempotencyRecord{}, false, gateway.Errorf(gateway.CodeInvalidArgument, "idempotency key is required")
	}
	if ttl <= 0 {
		ttl = DefaultIdempotencyTTL
	}
	now := db.now()
	err = db.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := db.exec(ctx, tx, `DELETE FROM idempotency_keys WHERE tenant_id = ? AND key = ? AND created_at < ?`,
			tenantID, key, db.d.ts(now.Add(-ttl))); err != nil {
			return dbError(err, "store: begin idempotent request")
		}
		// The primary key decides between concurrent calls: on PostgreSQL
		// a second insert waits for the first transaction and then does
		// nothing; on SQLite the transactions don't overlap at all.
		res, err := db.exec(ctx, tx, `INSERT INTO idempotency_keys (`+idempotencyColumns+`) VALUES (?, ?, ?, NULL, ?, ?)
			ON CONFLICT (tenant_id, key) DO NOTHING`,
			tenantID, key, requestHash, false, db.d.ts(now))
		if err != nil {
			return dbError(err, "store: begin idempotent request")
		}
		if rowsAffected(res) == 1 {
			rec = IdempotencyRecord{TenantID: tenantID, Key: key, RequestHash: requestHash, CreatedAt: now}
			fresh = true
			return nil
		}
		rec, err = scanIdempotency(db.queryRow(ctx, tx, `SELECT `+idempotencyColumns+` FROM idempotency_keys
			WHERE tenant_id = ? AND key = ?`, tenantID, key))
		if err != nil {
			return dbError(err, "store: begin idempotent request")
		}
		switch {
		case rec.RequestHash != requestHash:
			return gateway.Errorf(gateway.CodeUnprocessable, "idempotency key reused with a different request")
		case !rec.Done:
			return gateway.Errorf(gateway.CodeConflict, "a request with this idempotency key is in progress")
		}
		return nil
	})
	if err != nil {
		return IdempotencyRecord{}, false, err
	}
	return rec, fresh, nil
}

// CompleteIdempotent records the outcome of the operation a fresh
// BeginIdempotent claimed, for retries to replay, with evs (the events
// that tell of it) in the same transaction. No pending record is
// CodeNotFound; an already completed one CodeConflict.
func (db *DB) CompleteIdempotent(ctx context.Context, tenantID, key string, outcome []byte, evs ...gateway.Event) error {
	if outcome == nil {
		outcome = []byte{} // a completed record's outcome is never NULL
	}
	const query = `UPDATE idempotency_keys SET outcome = ?, done = ? WHERE tenant_id = ? AND key = ? AND done = ?`
	if len(evs) == 0 {
		res, err := db.exec(ctx, db.w, query, outcome, true, tenantID, key, false)
		if err != nil {
			return dbError(err, "store: complete idempotent request")
		}
		if rowsAffected(res) == 1 {
			return nil
		}
		return db.idempotencyMiss(ctx, tenantID, key)
	}
	// The outcome and the events that tell of it commit together: a
	// webhook hears of an outcome a retry would replay, and of no other.
	errMiss := errors.New("no pending record")
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		res, err := db.exec(ctx, tx, query, outcome, true, tenantID, key, false)
		if err != nil {
			return dbError(err, "store: complete idempotent request")
		}
		if rowsAffected(res) != 1 {
			return errMiss
		}
		_, err = db.publishTx(ctx, tx, evs)
		return err
	})
	if errors.Is(err, errMiss) {
		return db.idempotencyMiss(ctx, tenantID, key)
	}
	return err
}

// GetIdempotent returns a tenant's record of a key, pending or done; none
// (or one older than ttl) is CodeNotFound.
func (db *DB) GetIdempotent(ctx context.Context, tenantID, key string, ttl time.Duration) (IdempotencyRecord, error) {
	if ttl <= 0 {
		ttl = DefaultIdempotencyTTL
	}
	rec, err := scanIdempotency(db.queryRow(ctx, db.r, `SELECT `+idempotencyColumns+` FROM idempotency_keys WHERE tenant_id = ? AND key = ? AND created_at >= ?`,
		tenantID, key, db.d.ts(db.now().Add(-ttl))))
	if errors.Is(err, sql.ErrNoRows) {
		return IdempotencyRecord{}, gateway.Errorf(gateway.CodeNotFound, "no request with idempotency key %q", key)
	}
	if err != nil {
		return IdempotencyRecord{}, dbError(err, "store: get idempotent request")
	}
	return rec, nil
}

// AbandonIdempotent deletes the pending record of a key whose operation
// failed before doing anything, so that the client may retry with it. No
// pending record is CodeNotFound; a completed one is kept and CodeConflict.
func (db *DB) AbandonIdempotent(ctx context.Context, tenantID, key string) error {
	res, err := db.exec(ctx, db.w, `DELETE FROM idempotency_keys WHERE tenant_id = ? AND key = ? AND done = ?`, tenantID, key, false)
	if err != nil {
		return dbError(err, "store: abandon idempotent request")
	}
	if rowsAffected(res) == 1 {
		return nil
	}
	return db.idempotencyMiss(ctx, tenantID, key)
}

// idempotencyMiss tells why no pending record of a key was found.
func (db *DB) idempotencyMiss(ctx context.Context, tenantID, key string) error {
	var done bool
	err := db.queryRow(ctx, db.w, `SELECT done FROM idempotency_keys WHERE tenant_id = ? AND key = ?`, tenantID, key).Scan(&done)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return gateway.Errorf(gateway.CodeNotFound, "no pending request with this idempotency key")
	case err != nil:
		return dbError(err, "store: get idempotency record")
	}
	return gateway.Errorf(gateway.CodeConflict, "the request with this idempotency key is already complete")
}

// PurgeExpiredIdempotent deletes the records created before olderThan,
// pending or not, and returns how many.
func (db *DB) PurgeExpiredIdempotent(ctx context.Context, olderThan time.Time) (int, error) {
	res, err := db.exec(ctx, db.w, `DELETE FROM idempotency_keys WHERE created_at < ?`, db.d.ts(olderThan))
	if err != nil {
		return 0, dbError(err, "store: purge idempotency records")
	}
	return int(rowsAffected(res)), nil
}
