package store

import (
	"context"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// listRows runs a query on the readers and scans every row with scan.
func listRows[T any](ctx context.Context, db *DB, query string, args []any, scan func(interface{ Scan(...any) error }) (T, error), what string) (gateway.Page[T], error) {
	rows, err := db.query(ctx, db.r, query, args...)
	if err != nil {
		return gateway.Page[T]{}, dbError(err, "%s", what)
	}
	defer rows.Close()
	page := gateway.Page[T]{Items: []T{}}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return gateway.Page[T]{}, dbError(err, "%s", what)
		}
		page.Items = append(page.Items, v)
	}
	if err := rows.Err(); err != nil {
		return gateway.Page[T]{}, dbError(err, "%s", what)
	}
	return page, nil
}

// keysetPage returns the page of query's rows (a SELECT whose WHERE clause
// the keyset condition extends) after cursor, ordered by the time column
// at, then id: limit rows (see listLimit), and the cursor of the next page
// when there are more. pos gives a row's time and id, for that cursor.
func keysetPage[T any](ctx context.Context, db *DB, query string, args []any, at, cursor string, limit int,
	scan func(interface{ Scan(...any) error }) (T, error), pos func(T) (time.Time, string), what string) (gateway.Page[T], error) {
	limit = listLimit(limit)
	after, ok, err := decodeCursor(cursor)
	if err != nil {
		return gateway.Page[T]{}, err
	}
	if ok {
		query += ` AND (` + at + `, id) > (?, ?)`
		args = append(args, db.d.ts(after.time()), after.ID)
	}
	query += ` ORDER BY ` + at + `, id LIMIT ?`
	args = append(args, limit+1)
	page, err := listRows(ctx, db, query, args, scan, what)
	if err != nil {
		return page, err
	}
	if len(page.Items) > limit {
		page.Items = page.Items[:limit]
		t, id := pos(page.Items[limit-1])
		page.NextCursor = encodeCursor(t, id)
	}
	return page, nil
}
