package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// largeObjectChunk is how many bytes one lo_put or lo_get moves: large
// enough that a 100 MiB snapshot is a hundred round trips, small enough
// that a chunk is no burden on either side.
const largeObjectChunk = 1 << 20

// ErrNoLargeObjects is returned by the large-object methods on SQLite,
// which has none.
var ErrNoLargeObjects = errors.New("store: large objects need PostgreSQL")

// LargeObjects reports whether the store keeps large objects (PostgreSQL).
func (db *DB) LargeObjects() bool { return db.d.name == dialectPostgres }

// PutLargeObject stores r as a new PostgreSQL large object and returns its
// oid (in decimal) and size. A failure removes what was written.
func (db *DB) PutLargeObject(ctx context.Context, r io.Reader) (_ string, _ int64, err error) {
	if !db.LargeObjects() {
		return "", 0, ErrNoLargeObjects
	}
	var oid int64
	if err := db.queryRow(ctx, db.w, `SELECT CAST(lo_create(0) AS BIGINT)`).Scan(&oid); err != nil {
		return "", 0, dbError(err, "store: create large object")
	}
	name := strconv.FormatInt(oid, 10)
	defer func() {
		if err != nil {
			_ = db.DeleteLargeObject(context.WithoutCancel(ctx), name)
		}
	}()
	buf := make([]byte, largeObjectChunk)
	var off int64
	for {
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			if _, err := db.exec(ctx, db.w, `SELECT lo_put(CAST(? AS BIGINT)::oid, ?, ?)`, oid, off, buf[:n]); err != nil {
				return "", 0, dbError(err, "store: write large object")
			}
			off += int64(n)
		}
		switch {
		case errors.Is(rerr, io.EOF), errors.Is(rerr, io.ErrUnexpectedEOF):
			return name, off, nil
		case rerr != nil:
			return "", 0, rerr
		}
	}
}

// OpenLargeObject returns a reader of the large object name, which reads it
// a chunk at a time until its end, from wherever it was last moved to.
func (db *DB) OpenLargeObject(ctx context.Context, name string) (io.ReadSeekCloser, error) {
	if !db.LargeObjects() {
		return nil, ErrNoLargeObjects
	}
	oid, err := strconv.ParseInt(name, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("store: large object name %q: %w", name, err)
	}
	return &largeObjectReader{ctx: ctx, db: db, oid: oid}, nil
}

// pgUndefinedObject is PostgreSQL's SQLSTATE for a large object that does
// not exist.
const pgUndefinedObject = "42704"

type largeObjectReader struct {
	ctx  context.Context
	db   *DB
	oid  int64
	off  int64
	buf  []byte
	done bool
}

func (l *largeObjectReader) Read(p []byte) (int, error) {
	if len(l.buf) == 0 {
		if l.done {
			return 0, io.EOF
		}
		var chunk []byte
		if err := l.db.queryRow(l.ctx, l.db.r, `SELECT lo_get(CAST(? AS BIGINT)::oid, ?, ?)`, l.oid, l.off, largeObjectChunk).Scan(&chunk); err != nil {
			if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == pgUndefinedObject {
				// Deleted while it was read (a snapshot removed during a
				// create from it): gone, as an unknown name is.
				return 0, gateway.Wrap(gateway.CodeNotFound, err, "store: large object %d no longer exists", l.oid)
			}
			return 0, dbError(err, "store: read large object")
		}
		l.off += int64(len(chunk))
		l.done = len(chunk) < largeObjectChunk
		l.buf = chunk
		if len(chunk) == 0 {
			return 0, io.EOF
		}
	}
	n := copy(p, l.buf)
	l.buf = l.buf[n:]
	return n, nil
}

// Seek moves the reader, relative to the object's start or to where it
// is: a tar reader skips the files it does not read this way, and a
// restore comes back for them (vms). A move within the chunk already read
// keeps it, so that skipping small files costs no query. The reader does
// not know the object's size, so it does not seek from the end.
func (l *largeObjectReader) Seek(offset int64, whence int) (int64, error) {
	pos := l.off - int64(len(l.buf))
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += pos
	default:
		return pos, errLargeObjectWhence
	}
	if offset < 0 {
		return pos, errLargeObjectOffset
	}
	if offset >= pos && offset <= l.off {
		l.buf = l.buf[offset-pos:]
		return offset, nil
	}
	l.off, l.buf, l.done = offset, nil, false
	return offset, nil
}

// The errors of largeObjectReader.Seek.
var (
	errLargeObjectWhence = errors.New("store: a large object reader seeks from the start or the current position only")
	errLargeObjectOffset = errors.New("store: seek before the start of a large object")
)

func (l *largeObjectReader) Close() error { return nil }

// DeleteLargeObject removes a large object; one that is already gone is no
// error.
func (db *DB) DeleteLargeObject(ctx context.Context, name string) error {
	if !db.LargeObjects() {
		return ErrNoLargeObjects
	}
	oid, err := strconv.ParseInt(name, 10, 64)
	if err != nil {
		return fmt.Errorf("store: large object name %q: %w", name, err)
	}
	var n int
	err = db.queryRow(ctx, db.w, `SELECT COUNT(*) FROM pg_largeobject_metadata WHERE oid = CAST(? AS BIGINT)::oid`, oid).Scan(&n)
	if err != nil {
		return dbError(err, "store: delete large object")
	}
	if n == 0 {
		return nil
	}
	if _, err := db.exec(ctx, db.w, `SELECT lo_unlink(CAST(? AS BIGINT)::oid)`, oid); err != nil {
		return dbError(err, "store: delete large object")
	}
	return nil
}
