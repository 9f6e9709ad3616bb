package store

import (
	"context"
	"database/sql"
	"errors"
	"maps"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// SetVMBindings replaces the host bindings kept in a tenant's VM's spec and
// returns the record as stored. They live in the spec, so that they last as
// long as the record does, on every node sharing the store. Another tenant's
// VM is CodeNotFound; an ended one CodeConflict.
func (db *DB) SetVMBindings(ctx context.Context, tenantID, id string, b *gateway.Bindings) (gateway.VM, error) {
	return db.UpdateVMSpec(ctx, tenantID, id, func(spec *gateway.VMSpec) error {
		spec.Bindings = b
		return nil
	})
}

// UpdateVMSpec lets change edit a tenant's VM's spec, in a transaction
// holding its row, and returns the record as stored; the labels' index
// (vm_labels) follows the spec's labels. Another tenant's VM is
// CodeNotFound; an ended one CodeConflict with its state in
// Details["state"]; an error of change is returned as it is.
func (db *DB) UpdateVMSpec(ctx context.Context, tenantID, id string, change func(spec *gateway.VMSpec) error) (gateway.VM, error) {
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
		before := maps.Clone(vm.Spec.Labels)
		if err := change(&vm.Spec); err != nil {
			return err
		}
		vm.UpdatedAt = db.now()
		spec, err := jsonText(vm.Spec)
		if err != nil {
			return gateway.Wrap(gateway.CodeInvalidArgument, err, "vm spec cannot be stored")
		}
		if _, err := db.exec(ctx, tx, `UPDATE vms SET spec = ?, updated_at = ? WHERE id = ?`, spec, db.d.ts(vm.UpdatedAt), id); err != nil {
			return dbError(err, "store: update vm spec")
		}
		if !maps.Equal(before, vm.Spec.Labels) {
			if _, err := db.exec(ctx, tx, `DELETE FROM vm_labels WHERE vm_id = ?`, id); err != nil {
				return dbError(err, "store: update vm labels")
			}
			for name, value := range vm.Spec.Labels {
				if _, err := db.exec(ctx, tx, `INSERT INTO vm_labels (vm_id, name, value) VALUES (?, ?, ?)`, id, name, value); err != nil {
					return dbError(err, "store: update vm labels")
				}
			}
		}
		out = vm
		return nil
	})
	if err != nil {
		return gateway.VM{}, err
	}
	return out, nil
}
