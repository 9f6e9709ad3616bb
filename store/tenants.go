package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

const tenantColumns = `id, name, isolated, max_vms, max_processes, requests_per_second,
	session_retention_days, permission_default, created_at, updated_at, max_schedules, max_snapshot_bytes`

func scanTenant(row interface{ Scan(...any) error }) (gateway.Tenant, error) {
	var (
		t  gateway.Tenant
		pd sql.NullString
	)
	err := row.Scan(&t.ID, &t.Name, &t.Isolated, &t.Quotas.MaxVMs, &t.Quotas.MaxProcesses,
		&t.Quotas.RequestsPerSecond, &t.Sessions.RetentionDays, &pd,
		scanTime(&t.CreatedAt), scanTime(&t.UpdatedAt), &t.Quotas.MaxSchedules, &t.Quotas.MaxSnapshotBytes)
	if err != nil {
		return gateway.Tenant{}, err
	}
	if t.Sessions.PermissionDefault, err = decodePermissionDefault(pd); err != nil {
		return gateway.Tenant{}, err
	}
	return t, nil
}

// CreateTenant stores a new tenant. An empty ID gets a fresh "ten_" one;
// CreatedAt and UpdatedAt are set to now. An existing ID is CodeConflict.
func (db *DB) CreateTenant(ctx context.Context, t gateway.Tenant) (gateway.Tenant, error) {
	if t.ID == "" {
		t.ID = newID("ten_")
	}
	t.CreatedAt = db.now()
	t.UpdatedAt = t.CreatedAt
	res, err := db.insertTenant(ctx, db.w, t)
	if err != nil {
		return gateway.Tenant{}, err
	}
	if rowsAffected(res) == 0 {
		return gateway.Tenant{}, gateway.Errorf(gateway.CodeConflict, "tenant %s already exists", t.ID)
	}
	return t, nil
}

// insertTenant inserts t unless its ID exists, which leaves 0 rows affected.
func (db *DB) insertTenant(ctx context.Context, q querier, t gateway.Tenant) (sql.Result, error) {
	pd, err := encodePermissionDefault(t.Sessions.PermissionDefault)
	if err != nil {
		return nil, gateway.Wrap(gateway.CodeInvalidArgument, err, "tenant permission default cannot be stored")
	}
	res, err := db.exec(ctx, q, `INSERT INTO tenants (`+tenantColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO NOTHING`,
		t.ID, t.Name, t.Isolated, t.Quotas.MaxVMs, t.Quotas.MaxProcesses, t.Quotas.RequestsPerSecond,
		t.Sessions.RetentionDays, pd, db.d.ts(t.CreatedAt), db.d.ts(t.UpdatedAt), t.Quotas.MaxSchedules, t.Quotas.MaxSnapshotBytes)
	if err != nil {
		return nil, dbError(err, "store: create tenant")
	}
	return res, nil
}

// GetTenant returns a tenant, or CodeNotFound.
func (db *DB) GetTenant(ctx context.Context, id string) (gateway.Tenant, error) {
	return db.getTenant(ctx, db.r, id, "")
}

func (db *DB) getTenant(ctx context.Context, q querier, id, lock string) (gateway.Tenant, error) {
	t, err := scanTenant(db.queryRow(ctx, q, `SELECT `+tenantColumns+` FROM tenants WHERE id = ?`+lock, id))
	if errors.Is(err, sql.ErrNoRows) {
		return gateway.Tenant{}, gateway.Errorf(gateway.CodeNotFound, "tenant %s not found", id)
	}
	if err != nil {
		return gateway.Tenant{}, dbError(err, "store: get tenant")
	}
	return t, nil
}

// ListTenants returns a page of tenants, oldest first. cursor is the
// NextCursor of the previous page, or empty for the first; limit defaults to
// 50 and is at most 500.
func (db *DB) ListTenants(ctx context.Context, cursor string, limit int) (gateway.Page[gateway.Tenant], error) {
	limit = listLimit(limit)
	after, ok, err := decodeCursor(cursor)
	if err != nil {
		return gateway.Page[gateway.Tenant]{}, err
	}
	query := `SELECT ` + tenantColumns + ` FROM tenants`
	var args []any
	if ok {
		query += ` WHERE (created_at, id) > (?, ?)`
		args = append(args, db.d.ts(after.time()), after.ID)
	}
	query += ` ORDER BY created_at, id LIMIT ?`
	args = append(args, limit+1)

	rows, err := db.query(ctx, db.r, query, args...)
	if err != nil {
		return gateway.Page[gateway.Tenant]{}, dbError(err, "store: list tenants")
	}
	defer rows.Close()
	page := gateway.Page[gateway.Tenant]{Items: []gateway.Tenant{}}
	for rows.Next() {
		t, err := scanTenant(rows)
		if err != nil {
			return gateway.Page[gateway.Tenant]{}, dbError(err, "store: list tenants")
		}
		page.Items = append(page.Items, t)
	}
	if err := rows.Err(); err != nil {
		return gateway.Page[gateway.Tenant]{}, dbError(err, "store: list tenants")
	}
	// One row more than asked for tells that a next page exists.
	if len(page.Items) > limit {
		page.Items = page.Items[:limit]
		last := page.Items[limit-1]
		page.NextCursor = encodeCursor(last.CreatedAt, last.ID)
	}
	return page, nil
}

// UpdateTenant reads a tenant, lets update change it and writes it back, all
// in one transaction, so concurrent updates don't lose each other's changes.
// An error from update is returned as is and nothing is written. ID and
// CreatedAt cannot be changed; UpdatedAt is set to now. update must not call
// db.
func (db *DB) UpdateTenant(ctx context.Context, id string, update func(*gateway.Tenant) error) (gateway.Tenant, error) {
	var out gateway.Tenant
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		t, err := db.getTenant(ctx, tx, id, db.d.forUpdate)
		if err != nil {
			return err
		}
		created := t.CreatedAt
		if err := update(&t); err != nil {
			return err
		}
		t.ID, t.CreatedAt = id, created
		t.UpdatedAt = db.now()
		pd, err := encodePermissionDefault(t.Sessions.PermissionDefault)
		if err != nil {
			return gateway.Wrap(gateway.CodeInvalidArgument, err, "tenant permission default cannot be stored")
		}
		_, err = db.exec(ctx, tx, `UPDATE tenants SET name = ?, isolated = ?, max_vms = ?, max_processes = ?,
			requests_per_second = ?, session_retention_days = ?, permission_default = ?, updated_at = ?, max_schedules = ?, max_snapshot_bytes = ? WHERE id = ?`,
			t.Name, t.Isolated, t.Quotas.MaxVMs, t.Quotas.MaxProcesses, t.Quotas.RequestsPerSecond,
			t.Sessions.RetentionDays, pd, db.d.ts(t.UpdatedAt), t.Quotas.MaxSchedules, t.Quotas.MaxSnapshotBytes, id)
		if err != nil {
			return dbError(err, "store: update tenant")
		}
		out = t
		return nil
	})
	if err != nil {
		return gateway.Tenant{}, err
	}
	return out, nil
}

// EnsureTenant creates t if no tenant has its ID, and returns the stored
// tenant either way; an existing one is left as it is. It is how the built-in
// default tenant comes to exist, on every start-up. t.ID is required.
func (db *DB) EnsureTenant(ctx context.Context, t gateway.Tenant) (gateway.Tenant, error) {
	if t.ID == "" {
		return gateway.Tenant{}, gateway.Errorf(gateway.CodeInvalidArgument, "tenant id is required")
	}
	t.CreatedAt = db.now()
	t.UpdatedAt = t.CreatedAt
	var out gateway.Tenant
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := db.insertTenant(ctx, tx, t); err != nil {
			return err
		}
		var err error
		out, err = db.getTenant(ctx, tx, t.ID, "")
		return err
	})
	if err != nil {
		return gateway.Tenant{}, err
	}
	return out, nil
}

// encodePermissionDefault returns the permission_default column of pd: its
// JSON, or NULL (a nil any) for nil.
func encodePermissionDefault(pd *gateway.PermissionDefault) (any, error) {
	if pd == nil {
		return nil, nil
	}
	return jsonText(pd)
}

// decodePermissionDefault reads a permission_default column: NULL is nil.
func decodePermissionDefault(col sql.NullString) (*gateway.PermissionDefault, error) {
	if !col.Valid {
		return nil, nil
	}
	var pd gateway.PermissionDefault
	if err := json.Unmarshal([]byte(col.String), &pd); err != nil {
		return nil, fmt.Errorf("decode permission default: %w", err)
	}
	return &pd, nil
}
