-- 0002_sessions: agent sessions with their durable events and permission
-- requests, and the tenants' session settings. JSON is kept as TEXT, not
-- JSONB, so that an event reads back byte for byte as it was written.
-- Identifiers use the "C" collation, as in 0001. Keep in step with
-- sqlite/0002_sessions.sql.

ALTER TABLE tenants ADD COLUMN session_retention_days INTEGER NOT NULL DEFAULT 0;
-- gateway.PermissionDefault as JSON, or NULL for the gateway's default.
ALTER TABLE tenants ADD COLUMN permission_default TEXT;

CREATE TABLE agent_sessions (
    tenant_id              TEXT COLLATE "C" NOT NULL REFERENCES tenants (id),
    vm_id                  TEXT COLLATE "C" NOT NULL REFERENCES vms (id) ON DELETE CASCADE,
    id                     TEXT COLLATE "C" NOT NULL,
    agent                  TEXT             NOT NULL,
    cwd                    TEXT             NOT NULL DEFAULT '',
    additional_directories TEXT             NOT NULL DEFAULT '[]', -- JSON array of strings
    permission_policy      TEXT             NOT NULL DEFAULT '',
    permission_default     TEXT,                                   -- gateway.PermissionDefault as JSON, or NULL
    state                  TEXT             NOT NULL CHECK (state IN ('idle', 'unloaded')),
    latest_sequence        BIGINT           NOT NULL DEFAULT 0,
    created_at             TIMESTAMPTZ      NOT NULL,
    updated_at             TIMESTAMPTZ      NOT NULL,
    PRIMARY KEY (vm_id, id)
);
CREATE INDEX agent_sessions_list ON agent_sessions (tenant_id, vm_id, created_at, id);
CREATE INDEX agent_sessions_updated ON agent_sessions (updated_at);

CREATE TABLE session_events (
    vm_id      TEXT COLLATE "C" NOT NULL,
    session_id TEXT COLLATE "C" NOT NULL,
    seq        BIGINT           NOT NULL,
    at         TIMESTAMPTZ      NOT NULL,
    type       TEXT             NOT NULL,
    data       TEXT             NOT NULL, -- the event as the API serves it, verbatim
    PRIMARY KEY (vm_id, session_id, seq),
    FOREIGN KEY (vm_id, session_id) REFERENCES agent_sessions (vm_id, id) ON DELETE CASCADE
);

CREATE TABLE session_permissions (
    vm_id      TEXT COLLATE "C" NOT NULL,
    session_id TEXT COLLATE "C" NOT NULL,
    request_id TEXT COLLATE "C" NOT NULL,
    options    TEXT             NOT NULL, -- JSON
    tool_call  TEXT             NOT NULL, -- JSON
    asked_at   TIMESTAMPTZ      NOT NULL,
    status     TEXT             NOT NULL CHECK (status IN ('pending', 'answered', 'dropped')),
    decision   TEXT,                      -- gateway.PermissionDecision as JSON, or NULL
    PRIMARY KEY (vm_id, session_id, request_id),
    FOREIGN KEY (vm_id, session_id) REFERENCES agent_sessions (vm_id, id) ON DELETE CASCADE
);
