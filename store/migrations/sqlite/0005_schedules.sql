-- 0005_schedules: cron schedules of VMs and their recorded runs. A schedule
-- goes with its VM's record (ON DELETE CASCADE); the gateway also deletes
-- it when the VM ends. The action is JSON (an exec or a prompt). Keep in
-- step with postgres/0005_schedules.sql.

-- The tenant's quota of schedules over all its VMs; 0 is unlimited.
ALTER TABLE tenants ADD COLUMN max_schedules INTEGER NOT NULL DEFAULT 0;

CREATE TABLE schedules (
    id         TEXT    NOT NULL PRIMARY KEY,
    tenant_id  TEXT    NOT NULL REFERENCES tenants (id),
    vm_id      TEXT    NOT NULL REFERENCES vms (id) ON DELETE CASCADE,
    cron       TEXT    NOT NULL,
    timezone   TEXT    NOT NULL,
    overlap    TEXT    NOT NULL CHECK (overlap IN ('skip', 'queue')),
    action     TEXT    NOT NULL, -- JSON: {"exec": {...}} or {"prompt": {...}}
    created_at INTEGER NOT NULL
) STRICT;
CREATE INDEX schedules_vm ON schedules (vm_id, created_at, id);
CREATE INDEX schedules_tenant ON schedules (tenant_id);

CREATE TABLE schedule_runs (
    id          TEXT    NOT NULL PRIMARY KEY,
    schedule_id TEXT    NOT NULL REFERENCES schedules (id) ON DELETE CASCADE,
    vm_id       TEXT    NOT NULL,
    started_at  INTEGER NOT NULL,
    ended_at    INTEGER NOT NULL,
    outcome     TEXT    NOT NULL CHECK (outcome IN ('succeeded', 'failed', 'skipped', 'timed_out', 'error')),
    exit_code   INTEGER,
    signal      TEXT    NOT NULL DEFAULT '',
    stdout      TEXT    NOT NULL DEFAULT '',
    stderr      TEXT    NOT NULL DEFAULT '',
    truncated   INTEGER NOT NULL DEFAULT 0,
    error       TEXT    NOT NULL DEFAULT ''
) STRICT;
CREATE INDEX schedule_runs_list ON schedule_runs (schedule_id, started_at, id);
