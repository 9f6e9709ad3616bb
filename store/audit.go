package store

import (
	"context"
	"database/sql"
	"strconv"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

const auditColumns = `id, at, node, tenant_id, key_id, token_id, method, route, vm_id, status, request_id`

// RecordAudit appends records to the audit trail, all or none, in one
// transaction (the audit writer hands them over in batches); a record's ID
// and, when zero, its time are the store's.
func (db *DB) RecordAudit(ctx context.Context, recs ...gateway.AuditRecord) error {
	if len(recs) == 0 {
		return nil
	}
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		for _, a := range recs {
			if a.At.IsZero() {
				a.At = db.now()
			}
			if _, err := db.exec(ctx, tx, `INSERT INTO audit_log (at, node, tenant_id, key_id, token_id, method, route, vm_id, status, request_id)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
				db.d.ts(a.At), a.Node, a.TenantID, a.KeyID, a.TokenID, a.Method, a.Route, a.VMID, a.Status, a.RequestID); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return dbError(err, "store: record audit")
	}
	return nil
}

// ListAudit returns a page of audit records, oldest first, as f selects
// them. The cursor is the last record's id.
func (db *DB) ListAudit(ctx context.Context, f gateway.AuditFilter) (gateway.Page[gateway.AuditRecord], error) {
	limit := listLimit(f.Limit)
	query := `SELECT ` + auditColumns + ` FROM audit_log WHERE 1 = 1`
	var args []any
	if f.TenantID != "" {
		query += ` AND tenant_id = ?`
		args = append(args, f.TenantID)
	}
	if f.VMID != "" {
		query += ` AND vm_id = ?`
		args = append(args, f.VMID)
	}
	if !f.After.IsZero() {
		query += ` AND at >= ?`
		args = append(args, db.d.ts(f.After))
	}
	if f.Cursor != "" {
		after, err := strconv.ParseInt(f.Cursor, 10, 64)
		if err != nil || after < 0 {
			return gateway.Page[gateway.AuditRecord]{}, gateway.Errorf(gateway.CodeInvalidArgument, "invalid cursor").WithDetail("field", "cursor")
		}
		query += ` AND id > ?`
		args = append(args, after)
	}
	query += ` ORDER BY id LIMIT ?`
	args = append(args, limit+1)
	rows, err := db.query(ctx, db.r, query, args...)
	if err != nil {
		return gateway.Page[gateway.AuditRecord]{}, dbError(err, "store: list audit")
	}
	defer rows.Close()
	out := gateway.Page[gateway.AuditRecord]{Items: []gateway.AuditRecord{}}
	for rows.Next() {
		var a gateway.AuditRecord
		if err := rows.Scan(&a.ID, scanTime(&a.At), &a.Node, &a.TenantID, &a.KeyID, &a.TokenID, &a.Method, &a.Route, &a.VMID, &a.Status, &a.RequestID); err != nil {
			return gateway.Page[gateway.AuditRecord]{}, dbError(err, "store: list audit")
		}
		out.Items = append(out.Items, a)
	}
	if err := rows.Err(); err != nil {
		return gateway.Page[gateway.AuditRecord]{}, dbError(err, "store: list audit")
	}
	if len(out.Items) > limit {
		out.Items = out.Items[:limit]
		out.NextCursor = strconv.FormatInt(out.Items[limit-1].ID, 10)
	}
	return out, nil
}

// PurgeAudit removes the audit records older than before, and returns how
// many.
func (db *DB) PurgeAudit(ctx context.Context, before time.Time) (int, error) {
	res, err := db.exec(ctx, db.w, `DELETE FROM audit_log WHERE at < ?`, db.d.ts(before))
	if err != nil {
		return 0, dbError(err, "store: purge audit")
	}
	return int(rowsAffected(res)), nil
}
