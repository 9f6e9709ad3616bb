-- 0009_checkpoints: a running VM's files checkpointed into the store, so
-- that a VM lost with its sidecar or node can be restored under its id.
-- checkpoints is the JSON list of the last checkpoint's layers (blobs, as
-- a hibernated VM's image), oldest first; empty: none. Keep in step with
-- sqlite/0009_checkpoints.sql.

ALTER TABLE vms ADD COLUMN checkpoints TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE vms ADD COLUMN checkpoint_bytes BIGINT NOT NULL DEFAULT 0;
ALTER TABLE vms ADD COLUMN checkpoint_at TIMESTAMPTZ;
