-- 0008_hibernation: VMs that hibernate and wake under the same id. A
-- hibernated VM's root filesystem is a blob (a large object, as a
-- snapshot's), named by image; the VM runs on no node meanwhile. Keep in
-- step with sqlite/0008_hibernation.sql.

ALTER TABLE vms DROP CONSTRAINT vms_state_check;
ALTER TABLE vms ADD CONSTRAINT vms_state_check
    CHECK (state IN ('creating', 'ready', 'disposing', 'disposed', 'lost', 'hibernating', 'hibernated', 'waking'));

ALTER TABLE vms ADD COLUMN image TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE vms ADD COLUMN image_bytes BIGINT NOT NULL DEFAULT 0;
ALTER TABLE vms ADD COLUMN hibernated_at TIMESTAMPTZ;
-- The blob of the VM's agent session database, when it has one.
ALTER TABLE vms ADD COLUMN sessions_image TEXT COLLATE "C" NOT NULL DEFAULT '';
