-- 0004_nodes: the gateway nodes sharing this store, and the node that owns
-- each VM. A node registers at start, heartbeats its load every
-- --node-heartbeat and is dead once its heartbeat is older than
-- --node-timeout. VMs recorded before this migration have no owner ('')
-- and are treated as the restarting node's own. Keep in step with
-- sqlite/0004_nodes.sql.

CREATE TABLE nodes (
    id             TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    advertise_addr TEXT             NOT NULL,
    state          TEXT             NOT NULL CHECK (state IN ('live', 'draining', 'dead')),
    reason         TEXT             NOT NULL DEFAULT '',
    -- secret_check is an HMAC of a fixed text under the cluster secret: nodes
    -- compare it to refuse a peer configured with another secret, without
    -- storing the secret.
    secret_check   TEXT             NOT NULL DEFAULT '',
    vms            BIGINT           NOT NULL DEFAULT 0,
    capacity       BIGINT           NOT NULL DEFAULT 0,
    sidecars       BIGINT           NOT NULL DEFAULT 0,
    rss            BIGINT           NOT NULL DEFAULT 0,
    drain_deadline TIMESTAMPTZ,
    started_at     TIMESTAMPTZ      NOT NULL,
    heartbeat_at   TIMESTAMPTZ      NOT NULL
);
CREATE INDEX nodes_state ON nodes (state, heartbeat_at);

ALTER TABLE vms ADD COLUMN node TEXT COLLATE "C" NOT NULL DEFAULT '';
CREATE INDEX vms_node_state ON vms (node, state);
