-- 0008_hibernation: VMs that hibernate and wake under the same id. A
-- hibernated VM's root filesystem is a blob (a file in the data directory,
-- as a snapshot's), named by image; the VM runs on no node meanwhile.
-- Keep in step with postgres/0008_hibernation.sql.

-- SQLite cannot alter a CHECK constraint, and rebuilding vms would cascade
-- the delete of its rows to every table that references it. Widening the
-- list of states changes no stored byte, so the table's definition is
-- edited in place, the way SQLite's documentation gives for a constraint
-- that is loosened (https://www.sqlite.org/lang_altertable.html, section
-- 7); RESET reloads the schema within this transaction.
PRAGMA writable_schema = ON;
UPDATE sqlite_schema
   SET sql = replace(sql, '''disposed'', ''lost''))', '''disposed'', ''lost'', ''hibernating'', ''hibernated'', ''waking''))')
 WHERE type = 'table' AND name = 'vms';
PRAGMA writable_schema = RESET;

ALTER TABLE vms ADD COLUMN image TEXT NOT NULL DEFAULT '';
ALTER TABLE vms ADD COLUMN image_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE vms ADD COLUMN hibernated_at INTEGER;
-- The blob of the VM's agent session database, when it has one.
ALTER TABLE vms ADD COLUMN sessions_image TEXT NOT NULL DEFAULT '';
