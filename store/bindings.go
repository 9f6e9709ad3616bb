package store

import (
	"context"
	"database/sql"
	"errors"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// SetVMBindings replaces the host bindings kept in a tenant's VM's spec and
// returns the record as stored. They live in the spec, so that they last as
// long as the record does, on every node sharing the store. Another tenant's
// VM is CodeNotFound; an ended one CodeConflict.
func (db *DB) SetVMBindings(ctx context.Context, tenantID, id string, b *gateway.Bindings) (gateway.VM, error) {
	var out gateway.VM
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		vm, err := scanVM(db.queryRow(ctx, tx, `SELECT `+vmColumns+` FROM vms WHERE id = ? AND tenant_id = ?`+db.d.forUpdate, id, tenantID))
		if errors.Is(err, sql.ErrNoRows) {
			return gateway.Errorf(gateway.CodeNotFound, "vm %s not found", id)
		}
		if err != nil {
			return dbError(err, "store: get vm")
		}
		if vm.State.Final() {
			return gateway.Errorf(gateway.CodeConflict, "vm %s is %s", id, vm.State).WithDetail("state", string(vm.State))
		}
		vm.Spec.Bindings, vm.UpdatedAt = b, db.now()
		spec, err := jsonText(vm.Spec)
		if err != nil {
			return gateway.Wrap(gateway.CodeInvalidArgument, err, "vm spec cannot be stored")
		}
		if _, err := db.exec(ctx, tx, `UPDATE vms SET spec = ?, updated_at = ? WHERE id = ?`, spec, db.d.ts(vm.UpdatedAt), id); err != nil {
			return dbError(err, "store: set vm bindings")
		}
		out = vm
		return nil
	})
	if err != nil {
		return gateway.VM{}, err
	}
	return out, nil
}
