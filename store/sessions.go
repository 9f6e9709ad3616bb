package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// History page sizes: the default and the most SessionHistory returns.
const (
	defaultHistoryLimit = 100
	maxHistoryLimit     = 1000
)

const sessionColumns = `tenant_id, vm_id, id, agent, cwd, additional_directories, permission_policy,
	permission_default, state, latest_sequence, created_at, updated_at`

func scanSession(row interface{ Scan(...any) error }) (gateway.Session, error) {
	var (
		s    gateway.Session
		dirs []byte
		pd   sql.NullString
		seq  int64
	)
	err := row.Scan(&s.TenantID, &s.VMID, &s.ID, &s.Agent, &s.Cwd, &dirs, &s.PermissionPolicy,
		&pd, &s.State, &seq, scanTime(&s.CreatedAt), scanTime(&s.UpdatedAt))
	if err != nil {
		return gateway.Session{}, err
	}
	if err := json.Unmarshal(dirs, &s.AdditionalDirectories); err != nil {
		return gateway.Session{}, fmt.Errorf("decode additional directories: %w", err)
	}
	if s.AdditionalDirectories == nil {
		s.AdditionalDirectories = []string{}
	}
	if s.PermissionDefault, err = decodePermissionDefault(pd); err != nil {
		return gateway.Session{}, err
	}
	s.LatestSequence = uint64(max(seq, 0))
	return s, nil
}

// storedSessionState tells whether the store keeps state: only idle and
// unloaded are; the others describe a live session or its VM's end.
func storedSessionState(state gateway.SessionState) bool {
	return state == gateway.SessionIdle || state == gateway.SessionUnloaded
}

// seqArg converts a sequence number for a BIGINT column. Sequences above
// math.MaxInt64 cannot be stored.
func seqArg(seq uint64) (int64, error) {
	if seq > math.MaxInt64 {
		return 0, gateway.Errorf(gateway.CodeInvalidArgument, "sequence %d is out of range", seq)
	}
	return int64(seq), nil
}

// rawJSON returns the text of a JSON column holding m verbatim; nil or empty
// is JSON null.
func rawJSON(m json.RawMessage) string {
	if len(m) == 0 {
		return "null"
	}
	return string(m)
}

// CreateSession stores a new session. An empty State means idle; only idle
// and unloaded can be stored (anything else is CodeInvalidArgument). A zero
// CreatedAt or UpdatedAt means now; both are kept to the microsecond, in UTC.
// A nil AdditionalDirectories is stored, and returned, as an empty list.
// LatestSequence is stored as given (normally 0); PendingPermissions are not
// stored. An existing (VMID, ID) is CodeConflict; an unknown VM, or one of
// another tenant, CodeNotFound.
func (db *DB) CreateSession(ctx context.Context, s gateway.Session) (gateway.Session, error) {
	if s.ID == "" || s.VMID == "" || s.TenantID == "" {
		return gateway.Session{}, gateway.Errorf(gateway.CodeInvalidArgument, "session id, vm id and tenant id are required")
	}
	if s.State == "" {
		s.State = gateway.SessionIdle
	}
	if !storedSessionState(s.State) {
		return gateway.Session{}, gateway.Errorf(gateway.CodeInvalidArgument, "session state %q cannot be stored", s.State)
	}
	seq, err := seqArg(s.LatestSequence)
	if err != nil {
		return gateway.Session{}, err
	}
	now := db.now()
	if s.CreatedAt.IsZero() {
		s.CreatedAt = now
	}
	if s.UpdatedAt.IsZero() {
		s.UpdatedAt = now
	}
	s.CreatedAt = s.CreatedAt.UTC().Truncate(time.Microsecond)
	s.UpdatedAt = s.UpdatedAt.UTC().Truncate(time.Microsecond)
	if s.AdditionalDirectories == nil {
		s.AdditionalDirectories = []string{}
	}
	s.PendingPermissions = nil
	dirs, err := jsonText(s.AdditionalDirectories)
	if err != nil {
		return gateway.Session{}, gateway.Wrap(gateway.CodeInvalidArgument, err, "session directories cannot be stored")
	}
	pd, err := encodePermissionDefault(s.PermissionDefault)
	if err != nil {
		return gateway.Session{}, gateway.Wrap(gateway.CodeInvalidArgument, err, "session permission default cannot be stored")
	}
	err = db.inTx(ctx, func(tx *sql.Tx) error {
		var one int
		err := db.queryRow(ctx, tx, `SELECT 1 FROM vms WHERE id = ? AND tenant_id = ?`, s.VMID, s.TenantID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return gateway.Errorf(gateway.CodeNotFound, "vm %s not found", s.VMID)
		}
		if err != nil {
			return dbError(err, "store: create session")
		}
		res, err := db.exec(ctx, tx, `INSERT INTO agent_sessions (`+sessionColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (vm_id, id) DO NOTHING`,
			s.TenantID, s.VMID, s.ID, s.Agent, s.Cwd, dirs, s.PermissionPolicy, pd, string(s.State), seq,
			db.d.ts(s.CreatedAt), db.d.ts(s.UpdatedAt))
		if err != nil {
			return dbError(err, "store: create session")
		}
		if rowsAffected(res) == 0 {
			return gateway.Errorf(gateway.CodeConflict, "session %s already exists", s.ID)
		}
		return nil
	})
	if err != nil {
		return gateway.Session{}, err
	}
	return s, nil
}

// GetSession returns a tenant's session of a VM, or CodeNotFound (also for
// another tenant's). State is the stored one (idle or unloaded);
// LatestSequence is the highest sequence AppendSessionEvents stored.
// PendingPermissions is left nil.
func (db *DB) GetSession(ctx context.Context, tenantID, vmID, id string) (gateway.Session, error) {
	s, err := scanSession(db.queryRow(ctx, db.r, `SELECT `+sessionColumns+` FROM agent_sessions
		WHERE tenant_id = ? AND vm_id = ? AND id = ?`, tenantID, vmID, id))
	if errors.Is(err, sql.ErrNoRows) {
		return gateway.Session{}, gateway.Errorf(gateway.CodeNotFound, "session %s not found", id)
	}
	if err != nil {
		return gateway.Session{}, dbError(err, "store: get session")
	}
	return s, nil
}

// ListSessions returns a page of a tenant's sessions of one VM, oldest first
// (by creation time, then ID). cursor is the NextCursor of the previous page,
// or empty for the first; limit defaults to 50 and is at most 500.
func (db *DB) ListSessions(ctx context.Context, tenantID, vmID, cursor string, limit int) (gateway.Page[gateway.Session], error) {
	return keysetPage(ctx, db, `SELECT `+sessionColumns+` FROM agent_sessions WHERE tenant_id = ? AND vm_id = ?`, []any{tenantID, vmID},
		"created_at", cursor, limit, scanSession, func(s gateway.Session) (time.Time, string) { return s.CreatedAt, s.ID }, "store: list sessions")
}

// SetSessionState stores state, idle or unloaded (anything else is
// CodeInvalidArgument), of a session of any tenant and sets its updated_at to
// now; an absent session is CodeNotFound.
func (db *DB) SetSessionState(ctx context.Context, vmID, id string, state gateway.SessionState) error {
	if !storedSessionState(state) {
		return gateway.Errorf(gateway.CodeInvalidArgument, "session state %q cannot be stored", state)
	}
	res, err := db.exec(ctx, db.w, `UPDATE agent_sessions SET state = ?, updated_at = ? WHERE vm_id = ? AND id = ?`,
		string(state), db.d.ts(db.now()), vmID, id)
	if err != nil {
		return dbError(err, "store: set session state")
	}
	if rowsAffected(res) == 0 {
		return gateway.Errorf(gateway.CodeNotFound, "session %s not found", id)
	}
	return nil
}

// DeleteSession deletes a tenant's session with its events and permission
// requests; an absent session, or another tenant's, is CodeNotFound.
func (db *DB) DeleteSession(ctx context.Context, tenantID, vmID, id string) error {
	// The foreign keys cascade to events and permissions.
	res, err := db.exec(ctx, db.w, `DELETE FROM agent_sessions WHERE tenant_id = ? AND vm_id = ? AND id = ?`,
		tenantID, vmID, id)
	if err != nil {
		return dbError(err, "store: delete session")
	}
	if rowsAffected(res) == 0 {
		return gateway.Errorf(gateway.CodeNotFound, "session %s not found", id)
	}
	return nil
}

// sessionKey names a session across VMs.
type sessionKey struct{ vmID, id string }

// AppendSessionEvents stores durable events of one or more sessions in one
// transaction. An event whose (VMID, SessionID, Sequence) is already stored
// is skipped, stored one left as it is, so replays are harmless. Each
// session's latest_sequence becomes the greater of itself and the highest
// Sequence among its events given, and its updated_at becomes now. Data is
// stored verbatim (nil as JSON null); Time to the microsecond, a zero Time as
// now. An event of an unknown session is CodeNotFound and a Sequence above
// math.MaxInt64 CodeInvalidArgument; either way nothing is written.
func (db *DB) AppendSessionEvents(ctx context.Context, events ...gateway.SessionEvent) error {
	if len(events) == 0 {
		return nil
	}
	now := db.now()
	latest := map[sessionKey]int64{}
	for _, e := range events {
		seq, err := seqArg(e.Sequence)
		if err != nil {
			return err
		}
		k := sessionKey{e.VMID, e.SessionID}
		if cur, ok := latest[k]; !ok || seq > cur {
			latest[k] = seq
		}
	}
	// Sessions are updated in one order, so that concurrent batches lock
	// their rows (PostgreSQL) without deadlocking each other.
	keys := make([]sessionKey, 0, len(latest))
	for k := range latest {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b sessionKey) int {
		if c := strings.Compare(a.vmID, b.vmID); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	return db.inTx(ctx, func(tx *sql.Tx) error {
		for _, k := range keys {
			seq := latest[k]
			res, err := db.exec(ctx, tx, `UPDATE agent_sessions
				SET latest_sequence = CASE WHEN latest_sequence < ? THEN ? ELSE latest_sequence END, updated_at = ?
				WHERE vm_id = ? AND id = ?`, seq, seq, db.d.ts(now), k.vmID, k.id)
			if err != nil {
				return dbError(err, "store: append session events")
			}
			if rowsAffected(res) == 0 {
				return gateway.Errorf(gateway.CodeNotFound, "session %s not found", k.id)
			}
		}
		for _, e := range events {
			at := e.Time
			if at.IsZero() {
				at = now
			}
			_, err := db.exec(ctx, tx, `INSERT INTO session_events (vm_id, session_id, seq, at, type, data)
				VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (vm_id, session_id, seq) DO NOTHING`,
				e.VMID, e.SessionID, int64(e.Sequence), db.d.ts(at), e.Type, rawJSON(e.Data))
			if err != nil {
				return dbError(err, "store: append session events")
			}
		}
		return nil
	})
}

// SessionHistory returns durable events of a session, oldest first, as
// gateway.HistoryQuery selects them: those with After < sequence < Before
// (each bound exclusive, 0 meaning none), at most Limit of them (<= 0 means
// 100, at most 1000). With only Before set the latest ones are selected,
// otherwise the earliest ones.
//
// HasMoreBefore is whether a stored event precedes the page: one with a
// sequence lower than the first returned, or, when none is returned, one
// with a sequence <= After (false when After is 0). HasMoreAfter is whether
// one follows it: a sequence higher than the last returned, or, when none is
// returned, one >= Before (false when Before is 0). Both count every stored
// event of the session, whatever the query's bounds.
//
// It does not check that the session exists: an unknown one has no events.
func (db *DB) SessionHistory(ctx context.Context, vmID, sessionID string, q gateway.HistoryQuery) (gateway.HistoryPage, error) {
	limit := q.Limit
	switch {
	case limit <= 0:
		limit = defaultHistoryLimit
	case limit > maxHistoryLimit:
		limit = maxHistoryLimit
	}
	// Stored sequences are at most math.MaxInt64: a bound above it is as
	// good as that, exclusive or not, in the comparisons below.
	after := int64(min(q.After, math.MaxInt64))
	latestFirst := q.After == 0 && q.Before > 0

	query := `SELECT seq, at, type, data FROM session_events WHERE vm_id = ? AND session_id = ? AND seq > ?`
	args := []any{vmID, sessionID, after}
	if q.Before > 0 && q.Before <= math.MaxInt64 {
		query += ` AND seq < ?`
		args = append(args, int64(q.Before))
	}
	if latestFirst {
		query += ` ORDER BY seq DESC LIMIT ?`
	} else {
		query += ` ORDER BY seq LIMIT ?`
	}
	args = append(args, limit)

	page := gateway.HistoryPage{Events: []gateway.SessionEvent{}}
	rows, err := db.query(ctx, db.r, query, args...)
	if err != nil {
		return gateway.HistoryPage{}, dbError(err, "store: session history")
	}
	defer rows.Close()
	for rows.Next() {
		var (
			e    gateway.SessionEvent
			seq  int64
			data []byte
		)
		if err := rows.Scan(&seq, scanTime(&e.Time), &e.Type, &data); err != nil {
			return gateway.HistoryPage{}, dbError(err, "store: session history")
		}
		e.VMID, e.SessionID, e.Sequence, e.Data = vmID, sessionID, uint64(seq), json.RawMessage(data)
		page.Events = append(page.Events, e)
	}
	if err := rows.Err(); err != nil {
		return gateway.HistoryPage{}, dbError(err, "store: session history")
	}
	rows.Close()
	if latestFirst {
		slices.Reverse(page.Events)
	}

	// The conditions of the two flags, each "" when it is false outright.
	var beforeCond, afterCond string
	var beforeArg, afterArg int64
	if n := len(page.Events); n > 0 {
		beforeCond, beforeArg = `seq < ?`, int64(page.Events[0].Sequence)
		afterCond, afterArg = `seq > ?`, int64(page.Events[n-1].Sequence)
	} else {
		if q.After > 0 {
			beforeCond, beforeArg = `seq <= ?`, after
		}
		if q.Before > 0 && q.Before <= math.MaxInt64 {
			afterCond, afterArg = `seq >= ?`, int64(q.Before)
		}
	}
	exists := func(cond string, arg int64) (bool, error) {
		if cond == "" {
			return false, nil
		}
		var one int
		err := db.queryRow(ctx, db.r, `SELECT 1 FROM session_events WHERE vm_id = ? AND session_id = ? AND `+cond+` LIMIT 1`,
			vmID, sessionID, arg).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return false, nil
		}
		if err != nil {
			return false, dbError(err, "store: session history")
		}
		return true, nil
	}
	if page.HasMoreBefore, err = exists(beforeCond, beforeArg); err != nil {
		return gateway.HistoryPage{}, err
	}
	if page.HasMoreAfter, err = exists(afterCond, afterArg); err != nil {
		return gateway.HistoryPage{}, err
	}
	return page, nil
}

// validPermissionStatus tells whether status is one a request can be in.
func validPermissionStatus(status string) bool {
	switch status {
	case gateway.PermissionPending, gateway.PermissionAnswered, gateway.PermissionDropped:
		return true
	}
	return false
}

// encodeDecision returns the decision column of d: its JSON, or NULL for
// nil.
func encodeDecision(d *gateway.PermissionDecision) (any, error) {
	if d == nil {
		return nil, nil
	}
	s, err := jsonText(d)
	if err != nil {
		return nil, gateway.Wrap(gateway.CodeInvalidArgument, err, "permission decision cannot be stored")
	}
	return s, nil
}

// sessionExists returns CodeNotFound unless the session is stored.
func (db *DB) sessionExists(ctx context.Context, q querier, vmID, id string) error {
	var one int
	err := db.queryRow(ctx, q, `SELECT 1 FROM agent_sessions WHERE vm_id = ? AND id = ?`, vmID, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return gateway.Errorf(gateway.CodeNotFound, "session %s not found", id)
	}
	if err != nil {
		return dbError(err, "store: get session")
	}
	return nil
}

// AddPermission stores a permission request of a session; one already
// stored with the same RequestID is left as it is. An empty Status means
// pending, a zero AskedAt now; nil Options or ToolCall are stored as JSON
// null. An unknown session is CodeNotFound, RequestID is required.
func (db *DB) AddPermission(ctx context.Context, vmID, sessionID string, p gateway.Permission) error {
	if p.RequestID == "" {
		return gateway.Errorf(gateway.CodeInvalidArgument, "permission request id is required")
	}
	if p.Status == "" {
		p.Status = gateway.PermissionPending
	}
	if !validPermissionStatus(p.Status) {
		return gateway.Errorf(gateway.CodeInvalidArgument, "unknown permission status %q", p.Status)
	}
	if p.AskedAt.IsZero() {
		p.AskedAt = db.now()
	}
	decision, err := encodeDecision(p.Decision)
	if err != nil {
		return err
	}
	return db.inTx(ctx, func(tx *sql.Tx) error {
		if err := db.sessionExists(ctx, tx, vmID, sessionID); err != nil {
			return err
		}
		_, err := db.exec(ctx, tx, `INSERT INTO session_permissions
			(vm_id, session_id, request_id, options, tool_call, asked_at, status, decision)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (vm_id, session_id, request_id) DO NOTHING`,
			vmID, sessionID, p.RequestID, rawJSON(p.Options), rawJSON(p.ToolCall), db.d.ts(p.AskedAt), p.Status, decision)
		if err != nil {
			return dbError(err, "store: add permission")
		}
		return nil
	})
}

// ResolvePermission records the decision of a request and its new status,
// answered or dropped (anything else is CodeInvalidArgument), replacing any
// earlier ones. A zero d.At means now; it is kept to the microsecond. A
// request not stored is created with the decision (AskedAt d.At, Options and
// ToolCall JSON null), so that no decision is lost. An unknown session is
// CodeNotFound.
func (db *DB) ResolvePermission(ctx context.Context, vmID, sessionID, requestID, status string, d gateway.PermissionDecision) error {
	if requestID == "" {
		return gateway.Errorf(gateway.CodeInvalidArgument, "permission request id is required")
	}
	if status != gateway.PermissionAnswered && status != gateway.PermissionDropped {
		return gateway.Errorf(gateway.CodeInvalidArgument, "a permission cannot be resolved as %q", status)
	}
	if d.At.IsZero() {
		d.At = db.now()
	}
	d.At = d.At.UTC().Truncate(time.Microsecond)
	decision, err := encodeDecision(&d)
	if err != nil {
		return err
	}
	return db.inTx(ctx, func(tx *sql.Tx) error {
		if err := db.sessionExists(ctx, tx, vmID, sessionID); err != nil {
			return err
		}
		_, err := db.exec(ctx, tx, `INSERT INTO session_permissions
			(vm_id, session_id, request_id, options, tool_call, asked_at, status, decision)
			VALUES (?, ?, ?, 'null', 'null', ?, ?, ?)
			ON CONFLICT (vm_id, session_id, request_id) DO UPDATE SET status = excluded.status, decision = excluded.decision`,
			vmID, sessionID, requestID, db.d.ts(d.At), status, decision)
		if err != nil {
			return dbError(err, "store: resolve permission")
		}
		return nil
	})
}

// Permissions lists a session's permission requests, oldest first (by
// AskedAt, then RequestID); with pendingOnly, only the pending ones. An
// unknown session has none.
func (db *DB) Permissions(ctx context.Context, vmID, sessionID string, pendingOnly bool) ([]gateway.Permission, error) {
	query := `SELECT request_id, options, tool_call, asked_at, status, decision FROM session_permissions
		WHERE vm_id = ? AND session_id = ?`
	args := []any{vmID, sessionID}
	if pendingOnly {
		query += ` AND status = ?`
		args = append(args, gateway.PermissionPending)
	}
	query += ` ORDER BY asked_at, request_id`
	rows, err := db.query(ctx, db.r, query, args...)
	if err != nil {
		return nil, dbError(err, "store: list permissions")
	}
	defer rows.Close()
	out := []gateway.Permission{}
	for rows.Next() {
		var (
			p                 gateway.Permission
			options, toolCall []byte
			decision          sql.NullString
		)
		if err := rows.Scan(&p.RequestID, &options, &toolCall, scanTime(&p.AskedAt), &p.Status, &decision); err != nil {
			return nil, dbError(err, "store: list permissions")
		}
		p.Options, p.ToolCall = json.RawMessage(options), json.RawMessage(toolCall)
		if decision.Valid {
			p.Decision = new(gateway.PermissionDecision)
			if err := json.Unmarshal([]byte(decision.String), p.Decision); err != nil {
				return nil, dbError(fmt.Errorf("decode permission decision: %w", err), "store: list permissions")
			}
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, dbError(err, "store: list permissions")
	}
	return out, nil
}

// DropPendingPermissions marks every pending request of every session of a
// VM dropped with decision d (a zero d.At means now), and returns how many
// there were. The gateway calls it when the VM ends.
func (db *DB) DropPendingPermissions(ctx context.Context, vmID string, d gateway.PermissionDecision) (int, error) {
	if d.At.IsZero() {
		d.At = db.now()
	}
	d.At = d.At.UTC().Truncate(time.Microsecond)
	decision, err := encodeDecision(&d)
	if err != nil {
		return 0, err
	}
	res, err := db.exec(ctx, db.w, `UPDATE session_permissions SET status = ?, decision = ? WHERE vm_id = ? AND status = ?`,
		gateway.PermissionDropped, decision, vmID, gateway.PermissionPending)
	if err != nil {
		return 0, dbError(err, "store: drop pending permissions")
	}
	return int(rowsAffected(res)), nil
}

// PurgeExpiredSessions deletes, for each tenant whose session retention is
// set (RetentionDays > 0), its sessions last updated before now minus that
// many days whose VM is in a final state (disposed, lost), with their events
// and permission requests, and returns how many sessions it deleted.
// Sessions of tenants without retention, or of live VMs, are kept.
func (db *DB) PurgeExpiredSessions(ctx context.Context, now time.Time) (int, error) {
	type retention struct {
		tenantID string
		days     int
	}
	rows, err := db.query(ctx, db.r, `SELECT id, session_retention_days FROM tenants WHERE session_retention_days > 0 ORDER BY id`)
	if err != nil {
		return 0, dbError(err, "store: purge sessions")
	}
	var tenants []retention
	for rows.Next() {
		var r retention
		if err := rows.Scan(&r.tenantID, &r.days); err != nil {
			rows.Close()
			return 0, dbError(err, "store: purge sessions")
		}
		tenants = append(tenants, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, dbError(err, "store: purge sessions")
	}
	// A statement per tenant: each is atomic, and none holds the writer
	// (SQLite) for the whole purge.
	n := 0
	for _, r := range tenants {
		cutoff := now.AddDate(0, 0, -r.days)
		res, err := db.exec(ctx, db.w, `DELETE FROM agent_sessions WHERE tenant_id = ? AND updated_at < ?
			AND vm_id IN (SELECT id FROM vms WHERE tenant_id = ? AND state IN `+finalStatesSQL+`)`,
			r.tenantID, db.d.ts(cutoff), r.tenantID)
		if err != nil {
			return n, dbError(err, "store: purge sessions")
		}
		n += int(rowsAffected(res))
	}
	return n, nil
}
