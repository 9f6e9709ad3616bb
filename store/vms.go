package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// StateChange is one entry of a VM's state history.
type StateChange struct {
	State  gateway.VMState `json:"state"`
	Reason string          `json:"reason,omitempty"`
	At     time.Time       `json:"at"`
}

// liveStatesSQL are the states that occupy a sidecar and count against quotas
// (a hibernated VM occupies none); finalStates admit no transition. Spelled
// out as SQL lists for the queries.
const (
	liveStatesSQL  = `('creating', 'ready', 'disposing', 'hibernating', 'waking')`
	finalStatesSQL = `('disposed', 'lost')`
)

// vmInsertColumns are those a new VM's row is written with; vmColumns adds
// the hibernation image's, which only hibernation writes.
const (
	vmInsertColumns = `id, tenant_id, state, reason, sidecar_id, node, spec, created_at, updated_at`
	vmColumns       = vmInsertColumns + `, image, image_bytes, hibernated_at, sessions_image, checkpoints, checkpoint_at`
)

func scanVM(row interface{ Scan(...any) error }) (gateway.VM, error) {
	var (
		vm          gateway.VM
		spec        []byte
		checkpoints string
	)
	err := row.Scan(&vm.ID, &vm.TenantID, &vm.State, &vm.Reason, &vm.SidecarID, &vm.Node, &spec,
		scanTime(&vm.CreatedAt), scanTime(&vm.UpdatedAt), &vm.Image, &vm.ImageBytes, scanTime(&vm.HibernatedAt), &vm.SessionsImage,
		&checkpoints, scanTime(&vm.CheckpointAt))
	if err != nil {
		return gateway.VM{}, err
	}
	if err := json.Unmarshal(spec, &vm.Spec); err != nil {
		return gateway.VM{}, err
	}
	if checkpoints != "" {
		if err := json.Unmarshal([]byte(checkpoints), &vm.Checkpoints); err != nil {
			return gateway.VM{}, err
		}
	}
	return vm, nil
}

// CreateVM stores a new VM with the ID its caller chose, and the first row
// of its state history. An empty State is VMCreating; a zero CreatedAt is now
// and a zero UpdatedAt is CreatedAt (both are kept to the microsecond). An
// existing ID is CodeConflict; an unknown tenant CodeNotFound.
func (db *DB) CreateVM(ctx context.Context, vm gateway.VM) error {
	return db.CreateVMWithinQuota(ctx, vm, 0)
}

// CreateVMWithinQuota is CreateVM that first counts the tenant's live VMs,
// in the same transaction, and refuses with CodeResourceExhausted
// (Details["quota"] = "maxVms") when maxVMs (> 0) of them already exist.
// The tenant's row is locked for the transaction (SELECT … FOR UPDATE on
// PostgreSQL; SQLite's transactions hold the database's write lock), so
// gateways sharing the store admit a tenant's last VM once between them.
func (db *DB) CreateVMWithinQuota(ctx context.Context, vm gateway.VM, maxVMs int) error {
	if vm.ID == "" || vm.TenantID == "" {
		return gateway.Errorf(gateway.CodeInvalidArgument, "vm id and tenant id are required")
	}
	if vm.State == "" {
		vm.State = gateway.VMCreating
	}
	if !vm.State.Valid() {
		return gateway.Errorf(gateway.CodeInvalidArgument, "unknown vm state %q", vm.State)
	}
	if vm.CreatedAt.IsZero() {
		vm.CreatedAt = db.now()
	}
	if vm.UpdatedAt.IsZero() {
		vm.UpdatedAt = vm.CreatedAt
	}
	spec, err := jsonText(vm.Spec)
	if err != nil {
		return gateway.Wrap(gateway.CodeInvalidArgument, err, "vm spec cannot be stored")
	}
	return db.inTx(ctx, func(tx *sql.Tx) error {
		if err := db.lockTenant(ctx, tx, vm.TenantID); err != nil {
			return err
		}
		if maxVMs > 0 {
			var n int
			if err := db.queryRow(ctx, tx, `SELECT COUNT(*) FROM vms WHERE tenant_id = ? AND state IN `+liveStatesSQL, vm.TenantID).Scan(&n); err != nil {
				return dbError(err, "store: count vms")
			}
			if n >= maxVMs {
				return gateway.Errorf(gateway.CodeResourceExhausted, "tenant %s has %d live VMs, its quota", vm.TenantID, maxVMs).WithDetail("quota", "maxVms")
			}
		}
		res, err := db.exec(ctx, tx, `INSERT INTO vms (`+vmInsertColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO NOTHING`,
			vm.ID, vm.TenantID, string(vm.State), vm.Reason, vm.SidecarID, vm.Node, spec,
			db.d.ts(vm.CreatedAt), db.d.ts(vm.UpdatedAt))
		if err != nil {
			return dbError(err, "store: create vm")
		}
		if rowsAffected(res) == 0 {
			return gateway.Errorf(gateway.CodeConflict, "vm %s already exists", vm.ID)
		}
		for name, value := range vm.Spec.Labels {
			if _, err := db.exec(ctx, tx, `INSERT INTO vm_labels (vm_id, name, value) VALUES (?, ?, ?)`, vm.ID, name, value); err != nil {
				return dbError(err, "store: create vm")
			}
		}
		return db.appendHistory(ctx, tx, vm.TenantID, vm.ID, vm.State, vm.Reason, vm.CreatedAt)
	})
}

func (db *DB) appendHistory(ctx context.Context, tx *sql.Tx, tenantID, id string, state gateway.VMState, reason string, at time.Time) error {
	_, err := db.exec(ctx, tx, `INSERT INTO vm_state_history (vm_id, state, reason, at) VALUES (?, ?, ?, ?)`,
		id, string(state), reason, db.d.ts(at))
	if err != nil {
		return dbError(err, "store: record vm state")
	}
	// The change and the vm.state event that tells the tenant's webhooks
	// of it commit together, whichever node or path made it.
	ev := gateway.NewEvent(gateway.EventVMState, tenantID, id, at, gateway.VMStateData{VMID: id, State: state, Reason: reason})
	_, err = db.publishTx(ctx, tx, []gateway.Event{ev})
	return err
}

// GetVM returns a tenant's VM. Another tenant's VM is CodeNotFound, exactly
// as a missing one, so that IDs of other tenants cannot be probed.
func (db *DB) GetVM(ctx context.Context, tenantID, id string) (gateway.VM, error) {
	vm, err := scanVM(db.queryRow(ctx, db.r, `SELECT `+vmColumns+` FROM vms WHERE id = ? AND tenant_id = ?`, id, tenantID))
	if errors.Is(err, sql.ErrNoRows) {
		return gateway.VM{}, gateway.Errorf(gateway.CodeNotFound, "vm %s not found", id)
	}
	if err != nil {
		return gateway.VM{}, dbError(err, "store: get vm")
	}
	return vm, nil
}

// ListVMs returns a page of a tenant's VMs, newest first, that are in one of
// f.States (by default the states that are not final), carry every label of
// f.Labels and none of the label values of f.NotLabels. f.Cursor is the
// NextCursor of the previous page; f.Limit defaults to 50 and is at most 500.
// The filters run in SQL, so every page is full but the last.
func (db *DB) ListVMs(ctx context.Context, f gateway.VMFilter) (gateway.Page[gateway.VM], error) {
	if f.TenantID == "" {
		return gateway.Page[gateway.VM]{}, gateway.Errorf(gateway.CodeInvalidArgument, "tenant id is required")
	}
	states := f.States
	if len(states) == 0 {
		states = gateway.LiveStates
	}
	for _, st := range states {
		if !st.Valid() {
			return gateway.Page[gateway.VM]{}, gateway.Errorf(gateway.CodeInvalidArgument, "unknown vm state %q", st)
		}
	}
	if n := len(f.Labels) + len(f.NotLabels); n > gateway.MaxLabelSelectors {
		return gateway.Page[gateway.VM]{}, gateway.Errorf(gateway.CodeInvalidArgument, "%d label selectors; at most %d are allowed", n, gateway.MaxLabelSelectors)
	}
	limit := listLimit(f.Limit)
	after, ok, err := decodeCursor(f.Cursor)
	if err != nil {
		return gateway.Page[gateway.VM]{}, err
	}

	query := `SELECT ` + vmColumns + ` FROM vms v WHERE tenant_id = ? AND state IN (?` + strings.Repeat(", ?", len(states)-1) + `)`
	args := []any{f.TenantID}
	for _, st := range states {
		args = append(args, string(st))
	}
	if f.ID != "" {
		query += ` AND id = ?`
		args = append(args, f.ID)
	}
	// Sorted names give the same filter the same SQL.
	for _, name := range slices.Sorted(maps.Keys(f.Labels)) {
		query += ` AND EXISTS (SELECT 1 FROM vm_labels l WHERE l.vm_id = v.id AND l.name = ? AND l.value = ?)`
		args = append(args, name, f.Labels[name])
	}
	for _, name := range slices.Sorted(maps.Keys(f.NotLabels)) {
		query += ` AND NOT EXISTS (SELECT 1 FROM vm_labels l WHERE l.vm_id = v.id AND l.name = ? AND l.value = ?)`
		args = append(args, name, f.NotLabels[name])
	}
	if ok {
		query += ` AND (created_at, id) < (?, ?)`
		args = append(args, db.d.ts(after.time()), after.ID)
	}
	query += ` ORDER BY created_at DESC, id DESC LIMIT ?`
	args = append(args, limit+1)

	rows, err := db.query(ctx, db.r, query, args...)
	if err != nil {
		return gateway.Page[gateway.VM]{}, dbError(err, "store: list vms")
	}
	defer rows.Close()
	page := gateway.Page[gateway.VM]{Items: []gateway.VM{}}
	for rows.Next() {
		vm, err := scanVM(rows)
		if err != nil {
			return gateway.Page[gateway.VM]{}, dbError(err, "store: list vms")
		}
		page.Items = append(page.Items, vm)
	}
	if err := rows.Err(); err != nil {
		return gateway.Page[gateway.VM]{}, dbError(err, "store: list vms")
	}
	if len(page.Items) > limit {
		page.Items = page.Items[:limit]
		last := page.Items[limit-1]
		page.NextCursor = encodeCursor(last.CreatedAt, last.ID)
	}
	return page, nil
}

// SetVMState moves a VM (of any tenant: the caller is the gateway itself) to
// state to, records reason, and appends a history row. An empty sidecarID
// keeps the current one. A VM in a final state (disposed, lost) admits no
// transition, not even to the same state: that is CodeConflict with the
// current state in Details["state"]. A VM moved back to hibernated (a wake
// that failed) runs on no sidecar; to hibernate a running VM, see
// HibernateVM.
func (db *DB) SetVMState(ctx context.Context, id string, to gateway.VMState, reason, sidecarID string) (gateway.VM, error) {
	if !to.Valid() {
		return gateway.VM{}, gateway.Errorf(gateway.CodeInvalidArgument, "unknown vm state %q", to)
	}
	return db.updateVM(ctx, id, func(vm *gateway.VM) error {
		if to == gateway.VMHibernated && vm.Image == "" {
			return gateway.Errorf(gateway.CodeConflict, "vm %s has no stored image to hibernate with", id).WithDetail("state", string(vm.State))
		}
		vm.State, vm.Reason = to, reason
		if sidecarID != "" {
			vm.SidecarID = sidecarID
		}
		if to == gateway.VMHibernated {
			vm.SidecarID = ""
		}
		return nil
	})
}

// HibernateVM records that a hibernating VM's root filesystem is stored as
// the blob image, bytes long, and its session database as the blob
// sessionsImage (empty: none): the VM is hibernated with reason, runs on no
// sidecar, and hibernatedAt is now. Its node stays the one that ran it last,
// which keeps its schedules armed; any node may wake it. The image
// supersedes the VM's checkpoint, whose layers are dropped from the record
// and returned, for the caller to remove the blobs. A VM in another state
// is CodeConflict with it in Details["state"].
func (db *DB) HibernateVM(ctx context.Context, id, image string, bytes int64, sessionsImage, reason string) (vm gateway.VM, dropped []string, err error) {
	if image == "" {
		return gateway.VM{}, nil, gateway.Errorf(gateway.CodeInvalidArgument, "a hibernated vm needs an image")
	}
	vm, err = db.updateVM(ctx, id, func(vm *gateway.VM) error {
		if vm.State != gateway.VMHibernating {
			return gateway.Errorf(gateway.CodeConflict, "vm %s is %s, not hibernating", id, vm.State).WithDetail("state", string(vm.State))
		}
		dropped = checkpointImages(vm.Checkpoints)
		vm.State, vm.Reason, vm.SidecarID = gateway.VMHibernated, reason, ""
		vm.Image, vm.ImageBytes, vm.SessionsImage, vm.HibernatedAt = image, bytes, sessionsImage, db.now()
		vm.Checkpoints, vm.CheckpointAt = nil, time.Time{}
		return nil
	})
	if err != nil {
		return gateway.VM{}, nil, err
	}
	return vm, dropped, nil
}

func checkpointImages(cs []gateway.Checkpoint) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Image)
	}
	return out
}

// RecordCheckpoint records layers, oldest first, as the VM's checkpoint
// taken at the given time, and returns the blobs of the previous one that
// the new one no longer lists, for the caller to remove. It is taken while
// the VM runs (ready or hibernating), or by a capture that ended just as
// the VM was lost with its sidecar, whose files it still describes. A VM
// in another state (disposed, hibernated, or woken elsewhere meanwhile) is
// CodeConflict with it in Details["state"], and the caller removes the new
// layers.
func (db *DB) RecordCheckpoint(ctx context.Context, id string, layers []gateway.Checkpoint, at time.Time) (dropped []string, err error) {
	if len(layers) == 0 {
		return nil, gateway.Errorf(gateway.CodeInvalidArgument, "a checkpoint needs a layer")
	}
	err = db.inTx(ctx, func(tx *sql.Tx) error {
		vm, err := scanVM(db.queryRow(ctx, tx, `SELECT `+vmColumns+` FROM vms WHERE id = ?`+db.d.forUpdate, id))
		if errors.Is(err, sql.ErrNoRows) {
			return gateway.Errorf(gateway.CodeNotFound, "vm %s not found", id)
		}
		if err != nil {
			return dbError(err, "store: get vm")
		}
		switch vm.State {
		case gateway.VMReady, gateway.VMHibernating, gateway.VMLost:
		default:
			return gateway.Errorf(gateway.CodeConflict, "vm %s is %s", id, vm.State).WithDetail("state", string(vm.State))
		}
		for _, old := range vm.Checkpoints {
			if !slices.ContainsFunc(layers, func(l gateway.Checkpoint) bool { return l.Image == old.Image }) {
				dropped = append(dropped, old.Image)
			}
		}
		vm.Checkpoints, vm.CheckpointAt = layers, at.UTC().Truncate(time.Microsecond)
		return db.writeVMLocked(ctx, tx, vm)
	})
	if err != nil {
		return nil, err
	}
	return dropped, nil
}

// DropCheckpoint removes a VM's checkpoint from its record, whatever its
// state, and returns the layers' blobs for the caller to remove: a VM
// disposed of needs none. A missing VM is CodeNotFound.
func (db *DB) DropCheckpoint(ctx context.Context, id string) (dropped []string, err error) {
	err = db.inTx(ctx, func(tx *sql.Tx) error {
		vm, err := scanVM(db.queryRow(ctx, tx, `SELECT `+vmColumns+` FROM vms WHERE id = ?`+db.d.forUpdate, id))
		if errors.Is(err, sql.ErrNoRows) {
			return gateway.Errorf(gateway.CodeNotFound, "vm %s not found", id)
		}
		if err != nil {
			return dbError(err, "store: get vm")
		}
		dropped = checkpointImages(vm.Checkpoints)
		vm.Checkpoints, vm.CheckpointAt = nil, time.Time{}
		return db.writeVMLocked(ctx, tx, vm)
	})
	return dropped, err
}

// ClaimWake moves a tenant's hibernated VM, or a lost one that has a
// checkpoint to be restored from, to waking on node and returns its record,
// images included: a VM to restore is the one without an Image. The tenant's row is locked, as for a create, and a
// wake that would pass maxVMs (> 0) running VMs is CodeResourceExhausted
// (Details["quota"] = "maxVms"). A VM in another state is CodeConflict with
// it in Details["state"], so that of two nodes waking it at once one wins.
func (db *DB) ClaimWake(ctx context.Context, tenantID, id, node string, maxVMs int) (gateway.VM, error) {
	var out gateway.VM
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		if err := db.lockTenant(ctx, tx, tenantID); err != nil {
			return err
		}
		vm, err := scanVM(db.queryRow(ctx, tx, `SELECT `+vmColumns+` FROM vms WHERE id = ? AND tenant_id = ?`+db.d.forUpdate, id, tenantID))
		if errors.Is(err, sql.ErrNoRows) {
			return gateway.Errorf(gateway.CodeNotFound, "vm %s not found", id)
		}
		if err != nil {
			return dbError(err, "store: get vm")
		}
		if vm.State != gateway.VMHibernated && !vm.Restorable() {
			return gateway.Errorf(gateway.CodeConflict, "vm %s is %s, not hibernated", id, vm.State).WithDetail("state", string(vm.State))
		}
		if maxVMs > 0 {
			var n int
			if err := db.queryRow(ctx, tx, `SELECT COUNT(*) FROM vms WHERE tenant_id = ? AND state IN `+liveStatesSQL, tenantID).Scan(&n); err != nil {
				return dbError(err, "store: count vms")
			}
			if n >= maxVMs {
				return gateway.Errorf(gateway.CodeResourceExhausted, "tenant %s has %d running VMs, its quota", tenantID, maxVMs).WithDetail("quota", "maxVms")
			}
		}
		vm.State, vm.Reason, vm.Node, vm.UpdatedAt = gateway.VMWaking, "", node, db.now()
		if err := db.writeVMLocked(ctx, tx, vm); err != nil {
			return err
		}
		out = vm
		return db.appendHistory(ctx, tx, tenantID, id, vm.State, "", vm.UpdatedAt)
	})
	if err != nil {
		return gateway.VM{}, err
	}
	return out, nil
}

// WokeVM records that a waking VM runs again, on sidecarID: it is ready
// with reason, and its hibernation images are dropped from the record.
// Their names are returned with the record, for the caller to remove the
// blobs. A checkpoint stays: it is the VM's files until the next one. A VM
// in another state is CodeConflict with it in Details["state"].
func (db *DB) WokeVM(ctx context.Context, id, sidecarID, reason string) (vm gateway.VM, images []string, err error) {
	vm, err = db.updateVM(ctx, id, func(vm *gateway.VM) error {
		if vm.State != gateway.VMWaking {
			return gateway.Errorf(gateway.CodeConflict, "vm %s is %s, not waking", id, vm.State).WithDetail("state", string(vm.State))
		}
		for _, name := range []string{vm.Image, vm.SessionsImage} {
			if name != "" {
				images = append(images, name)
			}
		}
		vm.State, vm.Reason, vm.SidecarID = gateway.VMReady, reason, sidecarID
		vm.Image, vm.ImageBytes, vm.SessionsImage, vm.HibernatedAt = "", 0, "", time.Time{}
		return nil
	})
	if err != nil {
		return gateway.VM{}, nil, err
	}
	return vm, images, nil
}

// updateVM reads a VM's row for update, lets change edit it, and writes it
// back with a history row. A final VM admits no change: CodeConflict with
// its state in Details["state"].
func (db *DB) updateVM(ctx context.Context, id string, change func(vm *gateway.VM) error) (gateway.VM, error) {
	var out gateway.VM
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		vm, err := scanVM(db.queryRow(ctx, tx, `SELECT `+vmColumns+` FROM vms WHERE id = ?`+db.d.forUpdate, id))
		if errors.Is(err, sql.ErrNoRows) {
			return gateway.Errorf(gateway.CodeNotFound, "vm %s not found", id)
		}
		if err != nil {
			return dbError(err, "store: get vm")
		}
		if vm.State.Final() {
			return gateway.Errorf(gateway.CodeConflict, "vm %s is %s", id, vm.State).WithDetail("state", string(vm.State))
		}
		if err := change(&vm); err != nil {
			return err
		}
		vm.UpdatedAt = db.now()
		if err := db.writeVMLocked(ctx, tx, vm); err != nil {
			return err
		}
		if err := db.appendHistory(ctx, tx, vm.TenantID, id, vm.State, vm.Reason, vm.UpdatedAt); err != nil {
			return err
		}
		out = vm
		return nil
	})
	if err != nil {
		return gateway.VM{}, err
	}
	return out, nil
}

// writeVMLocked writes the mutable columns of a VM's row, which the
// transaction tx holds.
func (db *DB) writeVMLocked(ctx context.Context, tx *sql.Tx, vm gateway.VM) error {
	var hibernatedAt any
	if !vm.HibernatedAt.IsZero() {
		hibernatedAt = db.d.ts(vm.HibernatedAt)
	}
	var checkpointAt any
	if !vm.CheckpointAt.IsZero() {
		checkpointAt = db.d.ts(vm.CheckpointAt)
	}
	var checkpoints string
	var checkpointBytes int64
	if len(vm.Checkpoints) > 0 {
		list, err := json.Marshal(vm.Checkpoints)
		if err != nil {
			return err
		}
		checkpoints = string(list)
		for _, c := range vm.Checkpoints {
			checkpointBytes += c.Bytes
		}
	}
	_, err := db.exec(ctx, tx, `UPDATE vms SET state = ?, reason = ?, sidecar_id = ?, node = ?, updated_at = ?,
		image = ?, image_bytes = ?, hibernated_at = ?, sessions_image = ?,
		checkpoints = ?, checkpoint_bytes = ?, checkpoint_at = ? WHERE id = ?`,
		string(vm.State), vm.Reason, vm.SidecarID, vm.Node, db.d.ts(vm.UpdatedAt),
		vm.Image, vm.ImageBytes, hibernatedAt, vm.SessionsImage,
		checkpoints, checkpointBytes, checkpointAt, vm.ID)
	if err != nil {
		return dbError(err, "store: set vm state")
	}
	return nil
}

// VMHistory returns a tenant's VM's state changes, oldest first; another
// tenant's VM is CodeNotFound.
func (db *DB) VMHistory(ctx context.Context, tenantID, id string) ([]StateChange, error) {
	// One read transaction would make the two reads one snapshot on
	// PostgreSQL too; but history rows are only ever appended, so reading
	// them after the ownership check can only return more, never less.
	var one int
	err := db.queryRow(ctx, db.r, `SELECT 1 FROM vms WHERE id = ? AND tenant_id = ?`, id, tenantID).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, gateway.Errorf(gateway.CodeNotFound, "vm %s not found", id)
	}
	if err != nil {
		return nil, dbError(err, "store: get vm history")
	}
	rows, err := db.query(ctx, db.r, `SELECT state, reason, at FROM vm_state_history WHERE vm_id = ? ORDER BY seq`, id)
	if err != nil {
		return nil, dbError(err, "store: get vm history")
	}
	defer rows.Close()
	history := []StateChange{}
	for rows.Next() {
		var c StateChange
		if err := rows.Scan(&c.State, &c.Reason, scanTime(&c.At)); err != nil {
			return nil, dbError(err, "store: get vm history")
		}
		history = append(history, c)
	}
	if err := rows.Err(); err != nil {
		return nil, dbError(err, "store: get vm history")
	}
	return history, nil
}

// MarkLiveVMsLost marks every VM not in a final state, of every tenant, lost
// with reason, and returns how many there were. The gateway calls it at
// start-up: the VMs of a previous run died with its sidecars.
func (db *DB) MarkLiveVMsLost(ctx context.Context, reason string) (int, error) {
	var ids []string
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		ids, err = db.markVMsLost(ctx, tx, `1 = 1`, nil, reason)
		return err
	})
	return len(ids), err
}

// MarkNodeVMsLost marks the VMs of node that are not in a final state lost
// with reason, and returns their ids. VMs recorded without a node (before
// nodes existed) count as every node's: the gateway that ran them is gone.
// A node calls it at start-up, for the VMs its previous run left.
func (db *DB) MarkNodeVMsLost(ctx context.Context, node, reason string) ([]string, error) {
	var ids []string
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		ids, err = db.markVMsLost(ctx, tx, `node IN (?, '')`, []any{node}, reason)
		return err
	})
	return ids, err
}

// markVMsLost marks the VMs matching where (with args) that ran there lost
// with reason, with a history row each, and returns their ids. A hibernated
// VM runs nowhere and stays; a waking one still has its image, so it goes
// back to hibernated, to wake again on its next use; one being restored
// from its checkpoint has no image, and is lost again, still restorable.
func (db *DB) markVMsLost(ctx context.Context, tx *sql.Tx, where string, args []any, reason string) ([]string, error) {
	now := db.now()
	back, err := db.updateReturningIDs(ctx, tx, `UPDATE vms SET state = ?, reason = ?, updated_at = ?, node = '', sidecar_id = ''
		WHERE state = 'waking' AND image <> '' AND `+where+` RETURNING id, tenant_id`,
		append([]any{string(gateway.VMHibernated), reason, db.d.ts(now)}, args...))
	if err != nil {
		return nil, err
	}
	for _, v := range back {
		if err := db.appendHistory(ctx, tx, v.tenantID, v.id, gateway.VMHibernated, reason, now); err != nil {
			return nil, err
		}
	}
	lost, err := db.updateReturningIDs(ctx, tx, `UPDATE vms SET state = ?, reason = ?, updated_at = ?
		WHERE state NOT IN `+finalStatesSQL+` AND state <> 'hibernated' AND `+where+` RETURNING id, tenant_id`,
		append([]any{string(gateway.VMLost), reason, db.d.ts(now)}, args...))
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, v := range lost {
		if err := db.appendHistory(ctx, tx, v.tenantID, v.id, gateway.VMLost, reason, now); err != nil {
			return nil, err
		}
		ids = append(ids, v.id)
	}
	return ids, nil
}

// vmOfTenant is a VM's id with its tenant's.
type vmOfTenant struct{ id, tenantID string }

// updateReturningIDs runs an UPDATE … RETURNING id, tenant_id and returns
// the VMs.
func (db *DB) updateReturningIDs(ctx context.Context, tx *sql.Tx, query string, args []any) ([]vmOfTenant, error) {
	rows, err := db.query(ctx, tx, query, args...)
	if err != nil {
		return nil, dbError(err, "store: mark vms lost")
	}
	defer rows.Close()
	var ids []vmOfTenant
	for rows.Next() {
		var v vmOfTenant
		if err := rows.Scan(&v.id, &v.tenantID); err != nil {
			return nil, dbError(err, "store: mark vms lost")
		}
		ids = append(ids, v)
	}
	if err := rows.Err(); err != nil {
		return nil, dbError(err, "store: mark vms lost")
	}
	return ids, nil
}

// CountLiveVMs returns how many of a tenant's VMs occupy a sidecar
// (creating, ready, disposing, hibernating or waking): those its MaxVMs
// quota counts.
func (db *DB) CountLiveVMs(ctx context.Context, tenantID string) (int, error) {
	var n int
	err := db.queryRow(ctx, db.r, `SELECT COUNT(*) FROM vms WHERE tenant_id = ? AND state IN `+liveStatesSQL, tenantID).Scan(&n)
	if err != nil {
		return 0, dbError(err, "store: count vms")
	}
	return n, nil
}

// DeleteVM removes a tenant's VM record that reached a final state, or is
// hibernated, with its labels, history and agent sessions, and returns it:
// its Images name the blobs the caller removes. A VM in
// another state is CodeConflict with its state in Details["state"]; a
// missing one (or another tenant's) is CodeNotFound.
func (db *DB) DeleteVM(ctx context.Context, tenantID, id string) (gateway.VM, error) {
	var out gateway.VM
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		vm, err := scanVM(db.queryRow(ctx, tx, `SELECT `+vmColumns+` FROM vms WHERE id = ? AND tenant_id = ?`+db.d.forUpdate, id, tenantID))
		if errors.Is(err, sql.ErrNoRows) {
			return gateway.Errorf(gateway.CodeNotFound, "vm %s not found", id)
		}
		if err != nil {
			return dbError(err, "store: delete vm")
		}
		if !vm.State.Final() && vm.State != gateway.VMHibernated {
			return gateway.Errorf(gateway.CodeConflict, "vm %s is %s", id, vm.State).WithDetail("state", string(vm.State))
		}
		if _, err := db.exec(ctx, tx, `DELETE FROM vms WHERE id = ?`, id); err != nil {
			return dbError(err, "store: delete vm")
		}
		out = vm
		return nil
	})
	return out, err
}

// HibernatedBefore returns up to limit VMs, of every tenant, hibernated
// before the given time, or lost before it with a checkpoint they could
// be restored from, oldest first, images included: those past their
// retention.
func (db *DB) HibernatedBefore(ctx context.Context, before time.Time, limit int) ([]gateway.VM, error) {
	rows, err := db.query(ctx, db.r, `SELECT `+vmColumns+` FROM vms
		WHERE (state = 'hibernated' AND hibernated_at < ?) OR (state = 'lost' AND checkpoints <> '' AND updated_at < ?)
		ORDER BY updated_at LIMIT ?`, db.d.ts(before), db.d.ts(before), limit)
	if err != nil {
		return nil, dbError(err, "store: list hibernated vms")
	}
	defer rows.Close()
	var out []gateway.VM
	for rows.Next() {
		vm, err := scanVM(rows)
		if err != nil {
			return nil, dbError(err, "store: list hibernated vms")
		}
		out = append(out, vm)
	}
	if err := rows.Err(); err != nil {
		return nil, dbError(err, "store: list hibernated vms")
	}
	return out, nil
}

// PurgeEndedVMs removes the records of VMs, of every tenant, that reached a
// final state before the given time, and returns how many it removed. A VM
// that still has agent session records is kept: those follow their tenant's
// session retention, and the VM goes on a later purge, once they are gone.
// A lost VM with a checkpoint is kept too: it follows the retention of
// hibernated VMs (HibernatedBefore), whose deletion removes its layers.
func (db *DB) PurgeEndedVMs(ctx context.Context, before time.Time) (int, error) {
	res, err := db.exec(ctx, db.w, `DELETE FROM vms WHERE state IN `+finalStatesSQL+` AND checkpoints = '' AND updated_at < ?
		AND NOT EXISTS (SELECT 1 FROM agent_sessions s WHERE s.vm_id = vms.id)`, db.d.ts(before))
	if err != nil {
		return 0, dbError(err, "store: purge vms")
	}
	return int(rowsAffected(res)), nil
}
