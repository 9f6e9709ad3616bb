package main

import (
	"path/filepath"

	"github.com/agentos-gateway/agentos-gateway/images"
	"github.com/agentos-gateway/agentos-gateway/store"
)

// snapshotBlobs is where snapshot bytes go: PostgreSQL large objects when
// the store is PostgreSQL, so that every node reads them; the data
// directory with SQLite.
func snapshotBlobs(db *store.DB, dataDir string) images.Blobs {
	if db.LargeObjects() {
		return images.LargeObjectBlobs{DB: db}
	}
	return images.DirBlobs{Dir: filepath.Join(dataDir, "snapshots")}
}
