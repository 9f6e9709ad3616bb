package store

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/tracing"
)

const webhookColumns = `id, tenant_id, url, events, vm_id, description, state, disabled_reason, failing_since, created_at, updated_at`

// eventsText stores a subscription's events as ",a,b,", so that a LIKE
// finds the subscriptions of an event in the statement that numbers them.
func eventsText(events []gateway.EventType) string {
	var b strings.Builder
	b.WriteByte(',')
	for _, e := range events {
		b.WriteString(string(e))
		b.WriteByte(',')
	}
	return b.String()
}

func scanWebhook(row interface{ Scan(...any) error }) (gateway.Webhook, error) {
	var (
		w      gateway.Webhook
		events string
	)
	if err := row.Scan(&w.ID, &w.TenantID, &w.URL, &events, &w.VMID, &w.Description, &w.State, &w.DisabledReason,
		scanTime(&w.FailingSince), scanTime(&w.CreatedAt), scanTime(&w.UpdatedAt)); err != nil {
		return gateway.Webhook{}, err
	}
	for e := range strings.SplitSeq(strings.Trim(events, ","), ",") {
		w.Events = append(w.Events, gateway.EventType(e))
	}
	return w, nil
}

// CreateWebhook stores a tenant's subscription, active, and returns it
// with its id ("whk_") and times. An unknown tenant is CodeNotFound.
func (db *DB) CreateWebhook(ctx context.Context, w gateway.Webhook) (gateway.Webhook, error) {
	w.ID = newID("whk_")
	w.State = gateway.WebhookActive
	w.CreatedAt = db.now()
	w.UpdatedAt = w.CreatedAt
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		if err := db.tenantExists(ctx, tx, w.TenantID); err != nil {
			return err
		}
		_, err := db.exec(ctx, tx, `INSERT INTO webhooks (id, tenant_id, url, events, vm_id, description, state, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			w.ID, w.TenantID, w.URL, eventsText(w.Events), w.VMID, w.Description, w.State, db.d.ts(w.CreatedAt), db.d.ts(w.UpdatedAt))
		if err != nil {
			return dbError(err, "store: create webhook")
		}
		return nil
	})
	if err != nil {
		return gateway.Webhook{}, err
	}
	return w, nil
}

// GetWebhook returns a tenant's subscription; another tenant's is
// CodeNotFound.
func (db *DB) GetWebhook(ctx context.Context, tenantID, id string) (gateway.Webhook, error) {
	return db.getWebhook(ctx, db.r, tenantID, id, "")
}

func (db *DB) getWebhook(ctx context.Context, q querier, tenantID, id, lock string) (gateway.Webhook, error) {
	w, err := scanWebhook(db.queryRow(ctx, q, `SELECT `+webhookColumns+` FROM webhooks WHERE id = ? AND tenant_id = ?`+lock, id, tenantID))
	if errors.Is(err, sql.ErrNoRows) {
		return gateway.Webhook{}, gateway.Errorf(gateway.CodeNotFound, "webhook %s not found", id)
	}
	if err != nil {
		return gateway.Webhook{}, dbError(err, "store: get webhook")
	}
	return w, nil
}

// ListWebhooks returns a page of a tenant's subscriptions, oldest first.
func (db *DB) ListWebhooks(ctx context.Context, tenantID, cursorText string, limit int) (gateway.Page[gateway.Webhook], error) {
	limit = listLimit(limit)
	query := `SELECT ` + webhookColumns + ` FROM webhooks WHERE tenant_id = ?`
	args := []any{tenantID}
	c, ok, err := decodeCursor(cursorText)
	if err != nil {
		return gateway.Page[gateway.Webhook]{}, err
	}
	if ok {
		query += ` AND (created_at > ? OR (created_at = ? AND id > ?))`
		at := db.d.ts(time.UnixMicro(c.At))
		args = append(args, at, at, c.ID)
	}
	query += ` ORDER BY created_at, id LIMIT ?`
	args = append(args, limit+1)
	rows, err := db.query(ctx, db.r, query, args...)
	if err != nil {
		return gateway.Page[gateway.Webhook]{}, dbError(err, "store: list webhooks")
	}
	defer rows.Close()
	out := gateway.Page[gateway.Webhook]{Items: []gateway.Webhook{}}
	for rows.Next() {
		w, err := scanWebhook(rows)
		if err != nil {
			return gateway.Page[gateway.Webhook]{}, dbError(err, "store: list webhooks")
		}
		out.Items = append(out.Items, w)
	}
	if err := rows.Err(); err != nil {
		return gateway.Page[gateway.Webhook]{}, dbError(err, "store: list webhooks")
	}
	if len(out.Items) > limit {
		out.Items = out.Items[:limit]
		last := out.Items[limit-1]
		out.NextCursor = encodeCursor(last.CreatedAt, last.ID)
	}
	return out, nil
}

// UpdateWebhook lets change edit a tenant's subscription in a transaction
// holding its row, and returns it as stored. A subscription made active
// again starts afresh: its failure run is forgotten.
func (db *DB) UpdateWebhook(ctx context.Context, tenantID, id string, change func(w *gateway.Webhook) error) (gateway.Webhook, error) {
	var out gateway.Webhook
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		w, err := db.getWebhook(ctx, tx, tenantID, id, db.d.forUpdate)
		if err != nil {
			return err
		}
		if err := change(&w); err != nil {
			return err
		}
		if w.State == gateway.WebhookActive {
			w.DisabledReason = ""
			w.FailingSince = time.Time{}
		}
		w.UpdatedAt = db.now()
		_, err = db.exec(ctx, tx, `UPDATE webhooks SET url = ?, events = ?, vm_id = ?, description = ?, state = ?, disabled_reason = ?,
			failing_since = ?, updated_at = ? WHERE id = ?`,
			w.URL, eventsText(w.Events), w.VMID, w.Description, w.State, w.DisabledReason, db.nullTS(w.FailingSince), db.d.ts(w.UpdatedAt), w.ID)
		if err != nil {
			return dbError(err, "store: update webhook")
		}
		out = w
		return nil
	})
	return out, err
}

// DeleteWebhook removes a tenant's subscription with its deliveries.
func (db *DB) DeleteWebhook(ctx context.Context, tenantID, id string) error {
	res, err := db.exec(ctx, db.w, `DELETE FROM webhooks WHERE id = ? AND tenant_id = ?`, id, tenantID)
	if err != nil {
		return dbError(err, "store: delete webhook")
	}
	if rowsAffected(res) == 0 {
		return gateway.Errorf(gateway.CodeNotFound, "webhook %s not found", id)
	}
	return nil
}

// nullTS is a nullable timestamp argument: NULL for the zero time.
func (db *DB) nullTS(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return db.d.ts(t)
}

// PublishEvents writes evs into the outbox, a delivery for each
// subscription that wants each, and reports whether any was written. The
// subscriptions' sequences are taken in the same statement that finds
// them, so concurrent events number a subscription's deliveries without
// a gap or a repeat.
func (db *DB) PublishEvents(ctx context.Context, evs ...gateway.Event) (bool, error) {
	var written bool
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		n, err := db.publishTx(ctx, tx, evs)
		written = n > 0
		return err
	})
	return written, err
}

// publishTx is PublishEvents within tx: the caller's change and its events
// commit together.
func (db *DB) publishTx(ctx context.Context, tx *sql.Tx, evs []gateway.Event) (int, error) {
	now := db.now()
	written := 0
	for _, ev := range evs {
		at := ev.Time
		if at.IsZero() {
			at = now
		}
		rows, err := db.query(ctx, tx, `UPDATE webhooks SET sequence = sequence + 1
			WHERE tenant_id = ? AND state = 'active' AND (vm_id = '' OR vm_id = ?) AND (events = ',*,' OR events LIKE ?)
			RETURNING id, sequence`, ev.TenantID, ev.VMID, "%,"+string(ev.Type)+",%")
		if err != nil {
			return written, dbError(err, "store: publish event")
		}
		type sub struct {
			id  string
			seq int64
		}
		var subs []sub
		for rows.Next() {
			var s sub
			if err := rows.Scan(&s.id, &s.seq); err != nil {
				rows.Close()
				return written, dbError(err, "store: publish event")
			}
			subs = append(subs, s)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return written, dbError(err, "store: publish event")
		}
		if len(subs) == 0 {
			continue
		}
		// The delivery carries on the trace of the change it tells of.
		h := http.Header{}
		tracing.Inject(ctx, h)
		traceparent := h.Get("Traceparent")
		for _, s := range subs {
			_, err := db.exec(ctx, tx, `INSERT INTO webhook_deliveries (id, subscription_id, tenant_id, vm_id, type, sequence, data,
				created_at, window_start, next_attempt_at, traceparent) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
				newID("dlv_"), s.id, ev.TenantID, ev.VMID, string(ev.Type), s.seq, string(ev.Data),
				db.d.ts(at), db.d.ts(now), db.d.ts(now), traceparent)
			if err != nil {
				return written, dbError(err, "store: publish event")
			}
			written++
		}
	}
	return written, nil
}

const deliveryColumns = `id, subscription_id, tenant_id, vm_id, type, sequence, data, status, attempts, last_status, last_error,
	created_at, window_start, next_attempt_at, done_at, traceparent`

func scanDelivery(row interface{ Scan(...any) error }) (gateway.Delivery, error) {
	var (
		d    gateway.Delivery
		data string
	)
	err := row.Scan(&d.ID, &d.SubscriptionID, &d.TenantID, &d.VMID, &d.Type, &d.Sequence, &data, &d.Status, &d.Attempts, &d.LastStatus, &d.LastError,
		scanTime(&d.CreatedAt), scanTime(&d.WindowStart), scanTime(&d.NextAttemptAt), scanTime(&d.DoneAt), &d.TraceParent)
	d.Data = []byte(data)
	return d, err
}

// ClaimDeliveries leases up to limit deliveries that are due to node until
// lease from now, and returns them with their subscriptions' URLs. Only the
// oldest pending delivery of each subscription and VM is due, so that a
// VM's events reach a receiver in order; a delivery leased to a node that
// died is due again once its lease ends. On PostgreSQL the rows are taken
// FOR UPDATE SKIP LOCKED: nodes claiming at once take different rows.
func (db *DB) ClaimDeliveries(ctx context.Context, node string, lease time.Duration, limit int) ([]gateway.Delivery, error) {
	now := db.now()
	lock := ""
	if db.d.dollar {
		lock = ` FOR UPDATE OF d SKIP LOCKED`
	}
	var out []gateway.Delivery
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		rows, err := db.query(ctx, tx, `UPDATE webhook_deliveries SET locked_by = ?, locked_until = ?
			WHERE id IN (SELECT d.id FROM webhook_deliveries d JOIN webhooks w ON w.id = d.subscription_id
				WHERE d.status = 'pending' AND d.next_attempt_at <= ? AND d.locked_until <= ? AND w.state = 'active'
				AND NOT EXISTS (SELECT 1 FROM webhook_deliveries e WHERE e.subscription_id = d.subscription_id
					AND e.vm_id = d.vm_id AND e.status = 'pending' AND e.sequence < d.sequence)
				ORDER BY d.next_attempt_at LIMIT ?`+lock+`)
			RETURNING `+deliveryColumns,
			node, db.d.ts(now.Add(lease)), db.d.ts(now), db.d.ts(now), limit)
		if err != nil {
			return dbError(err, "store: claim deliveries")
		}
		for rows.Next() {
			d, err := scanDelivery(rows)
			if err != nil {
				rows.Close()
				return dbError(err, "store: claim deliveries")
			}
			out = append(out, d)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return dbError(err, "store: claim deliveries")
		}
		urls := map[string]string{}
		for i, d := range out {
			url, ok := urls[d.SubscriptionID]
			if !ok {
				if err := db.queryRow(ctx, tx, `SELECT url FROM webhooks WHERE id = ?`, d.SubscriptionID).Scan(&url); err != nil {
					return dbError(err, "store: claim deliveries")
				}
				urls[d.SubscriptionID] = url
			}
			out[i].URL = url
		}
		return nil
	})
	return out, err
}

// ReleaseLeases frees the deliveries node had leased: a node starting
// again sends at once what its previous run was sending when it stopped,
// rather than after the lease.
func (db *DB) ReleaseLeases(ctx context.Context, node string) error {
	_, err := db.exec(ctx, db.w, `UPDATE webhook_deliveries SET locked_by = '', locked_until = ? WHERE locked_by = ? AND status = 'pending'`,
		db.d.ts(time.Unix(0, 0)), node)
	if err != nil {
		return dbError(err, "store: release delivery leases")
	}
	return nil
}

// Attempt is how one attempt at a delivery ended.
type Attempt struct {
	Status int    // the receiver's HTTP status (0: no answer)
	Err    string // empty for a delivery made
	// Next is when to try again; zero when the delivery failed for good.
	Next time.Time
	// RetryFor is the retry window: a subscription failing for that long
	// is disabled once a delivery fails for good.
	RetryFor time.Duration
}

// FinishAttempt records an attempt node made at delivery id: delivered,
// to be retried at a.Next, or failed for good. A node whose lease another
// took over (it was too slow) records nothing. It reports the subscription
// the gateway disabled, when this failure ended a failure run as long as
// the retry window.
func (db *DB) FinishAttempt(ctx context.Context, id, node string, a Attempt) (disabled *gateway.Webhook, err error) {
	now := db.now()
	err = db.inTx(ctx, func(tx *sql.Tx) error {
		var subID, tenantID string
		var windowStart time.Time
		err := db.queryRow(ctx, tx, `SELECT subscription_id, tenant_id, window_start FROM webhook_deliveries WHERE id = ? AND locked_by = ?`+db.d.forUpdate, id, node).
			Scan(&subID, &tenantID, scanTime(&windowStart))
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return dbError(err, "store: finish delivery")
		}
		switch {
		case a.Err == "":
			_, err = db.exec(ctx, tx, `UPDATE webhook_deliveries SET status = 'delivered', attempts = attempts + 1, last_status = ?, last_error = '',
				done_at = ?, locked_by = '', locked_until = ? WHERE id = ?`, a.Status, db.d.ts(now), db.d.ts(time.Unix(0, 0)), id)
			if err == nil {
				_, err = db.exec(ctx, tx, `UPDATE webhooks SET failing_since = NULL WHERE id = ? AND failing_since IS NOT NULL`, subID)
			}
			if err != nil {
				return dbError(err, "store: finish delivery")
			}
			return nil
		case !a.Next.IsZero():
			_, err = db.exec(ctx, tx, `UPDATE webhook_deliveries SET attempts = attempts + 1, last_status = ?, last_error = ?,
				next_attempt_at = ?, locked_by = '', locked_until = ? WHERE id = ?`, a.Status, a.Err, db.d.ts(a.Next), db.d.ts(time.Unix(0, 0)), id)
		default:
			_, err = db.exec(ctx, tx, `UPDATE webhook_deliveries SET status = 'failed', attempts = attempts + 1, last_status = ?, last_error = ?,
				done_at = ?, locked_by = '', locked_until = ? WHERE id = ?`, a.Status, a.Err, db.d.ts(now), db.d.ts(time.Unix(0, 0)), id)
		}
		if err == nil {
			// The failure run starts where this delivery's retry window
			// did, not at this attempt: a delivery that fails for good has
			// failed for a whole window, so its last failure always
			// disables the subscription, however late the first attempt
			// came (on a loaded node it may come seconds after the event).
			_, err = db.exec(ctx, tx, `UPDATE webhooks SET failing_since = ? WHERE id = ? AND failing_since IS NULL`, db.d.ts(windowStart), subID)
		}
		if err != nil {
			return dbError(err, "store: finish delivery")
		}
		if !a.Next.IsZero() {
			return nil
		}
		w, err := db.getWebhook(ctx, tx, tenantID, subID, db.d.forUpdate)
		if err != nil {
			return err
		}
		if w.State != gateway.WebhookActive || w.FailingSince.IsZero() || now.Sub(w.FailingSince) < a.RetryFor {
			return nil
		}
		w.State = gateway.WebhookDisabled
		w.DisabledReason = "its deliveries failed for " + a.RetryFor.String() + ": " + a.Err
		w.UpdatedAt = now
		if _, err := db.exec(ctx, tx, `UPDATE webhooks SET state = ?, disabled_reason = ?, updated_at = ? WHERE id = ?`,
			w.State, w.DisabledReason, db.d.ts(now), w.ID); err != nil {
			return dbError(err, "store: disable webhook")
		}
		if _, err := db.exec(ctx, tx, `UPDATE webhook_deliveries SET status = 'failed', last_error = ?, done_at = ?, locked_by = '', locked_until = ?
			WHERE subscription_id = ? AND status = 'pending'`, "the subscription was disabled", db.d.ts(now), db.d.ts(time.Unix(0, 0)), w.ID); err != nil {
			return dbError(err, "store: disable webhook")
		}
		disabled = &w
		return nil
	})
	return disabled, err
}

// ListDeliveries returns a page of a tenant's subscription's deliveries, in
// sequence, as f selects them. The cursor is the last one's sequence.
func (db *DB) ListDeliveries(ctx context.Context, tenantID, subID string, f gateway.DeliveryFilter) (gateway.Page[gateway.Delivery], error) {
	if _, err := db.GetWebhook(ctx, tenantID, subID); err != nil {
		return gateway.Page[gateway.Delivery]{}, err
	}
	limit := listLimit(f.Limit)
	query := `SELECT ` + deliveryColumns + ` FROM webhook_deliveries WHERE subscription_id = ?`
	args := []any{subID}
	if f.Status != "" {
		query += ` AND status = ?`
		args = append(args, string(f.Status))
	}
	if !f.After.IsZero() {
		query += ` AND created_at >= ?`
		args = append(args, db.d.ts(f.After))
	}
	if f.Cursor != "" {
		after, err := strconv.ParseInt(f.Cursor, 10, 64)
		if err != nil || after < 0 {
			return gateway.Page[gateway.Delivery]{}, gateway.Errorf(gateway.CodeInvalidArgument, "invalid cursor").WithDetail("field", "cursor")
		}
		query += ` AND sequence > ?`
		args = append(args, after)
	}
	query += ` ORDER BY sequence LIMIT ?`
	args = append(args, limit+1)
	rows, err := db.query(ctx, db.r, query, args...)
	if err != nil {
		return gateway.Page[gateway.Delivery]{}, dbError(err, "store: list deliveries")
	}
	defer rows.Close()
	out := gateway.Page[gateway.Delivery]{Items: []gateway.Delivery{}}
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return gateway.Page[gateway.Delivery]{}, dbError(err, "store: list deliveries")
		}
		out.Items = append(out.Items, d)
	}
	if err := rows.Err(); err != nil {
		return gateway.Page[gateway.Delivery]{}, dbError(err, "store: list deliveries")
	}
	if len(out.Items) > limit {
		out.Items = out.Items[:limit]
		out.NextCursor = strconv.FormatInt(out.Items[limit-1].Sequence, 10)
	}
	return out, nil
}

// Redeliver makes a delivery of a tenant's subscription due now, with a
// new retry window: a failed or delivered one is sent again, under the same
// id and sequence.
func (db *DB) Redeliver(ctx context.Context, tenantID, subID, id string) (gateway.Delivery, error) {
	now := db.now()
	var out gateway.Delivery
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := db.getWebhook(ctx, tx, tenantID, subID, ""); err != nil {
			return err
		}
		d, err := scanDelivery(db.queryRow(ctx, tx, `UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = ?, window_start = ?, done_at = NULL
			WHERE id = ? AND subscription_id = ? RETURNING `+deliveryColumns, db.d.ts(now), db.d.ts(now), id, subID))
		if errors.Is(err, sql.ErrNoRows) {
			return gateway.Errorf(gateway.CodeNotFound, "delivery %s not found", id)
		}
		if err != nil {
			return dbError(err, "store: redeliver")
		}
		out = d
		return nil
	})
	return out, err
}

// PurgeDeliveries removes the deliveries done (delivered or failed) before
// before, and returns how many.
func (db *DB) PurgeDeliveries(ctx context.Context, before time.Time) (int, error) {
	res, err := db.exec(ctx, db.w, `DELETE FROM webhook_deliveries WHERE done_at < ?`, db.d.ts(before))
	if err != nil {
		return 0, dbError(err, "store: purge deliveries")
	}
	return int(rowsAffected(res)), nil
}
