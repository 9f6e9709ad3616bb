package gateway

import "time"

// Snapshot is a captured root filesystem of a VM, kept by the gateway (in
// its data directory, or in PostgreSQL large objects when the store is
// PostgreSQL) so that VMs can be created from it on any node. Its bytes are
// a tar stream of the whole tree; Bytes is what counts against the tenant's
// MaxSnapshotBytes quota.
type Snapshot struct {
	ID       string `json:"id"`
	TenantID string `json:"tenantId"`
	// VMID is the VM the snapshot was taken of; that VM may be gone since.
	VMID string `json:"vmId"`
	// Bytes is the size of the stored snapshot.
	Bytes int64 `json:"bytes"`
	// Files, Dirs and Symlinks count the tree's entries.
	Files    int `json:"files"`
	Dirs     int `json:"dirs"`
	Symlinks int `json:"symlinks"`
	// Node is the gateway node that took the snapshot.
	Node      string    `json:"node,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	// Blob names the stored bytes for the blob store that holds them.
	Blob string `json:"-"`
}

// SnapshotFilter selects snapshots of a tenant, a page at a time.
type SnapshotFilter struct {
	TenantID string
	// VMID, when set, keeps the snapshots of that VM only.
	VMID   string
	Limit  int
	Cursor string
}
