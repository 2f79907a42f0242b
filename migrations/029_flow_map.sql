-- The flow map (issue 29, docs/flow-map.md): who talked to whom.
--
-- flow_edges holds each node's edges (Report.flows) summed per bucket of a
-- resolution — a minute, an hour and a UTC day, like rollup_samples — as
-- the node reported them: its local owner, its role, the peer as its
-- sockets saw it. Peers are resolved to owners when read (collector/flows),
-- by the address holders of the edge's time, so a pod address reused by
-- another workload never moves an old edge. The three resolutions are
-- added to in the transaction that stores the report, for reports that
-- were new (store.WriteReports): a resend adds nothing, a late report adds
-- to its own buckets at once, and there is no fold to wait for.
--
-- tenant is the reporting node's (nodes.tenant, when the report was
-- stored): every read stays within it.
CREATE TABLE flow_edges (
    res          integer     NOT NULL,
    node_id      integer     NOT NULL,
    ts           timestamptz NOT NULL,
    tenant       text        NOT NULL,
    -- 1 client, 2 server, 0 the node's "other" edge (what fell past its
    -- top-K; every key column empty).
    role         smallint    NOT NULL,
    owner_id     text        NOT NULL,
    local_addr   text        NOT NULL,
    local_port   integer     NOT NULL,
    peer_addr    text        NOT NULL,
    peer_port    integer     NOT NULL,
    xlat_addr    text        NOT NULL,
    xlat_port    integer     NOT NULL,
    owner_kind   text        NOT NULL,
    owner_name   text        NOT NULL,
    owner_workload text      NOT NULL,
    edges_folded bigint      NOT NULL,
    opened       bigint      NOT NULL,
    failed       bigint      NOT NULL,
    closed       bigint      NOT NULL,
    retransmits  bigint      NOT NULL,
    bytes_sent   bigint      NOT NULL,
    bytes_recv   bigint      NOT NULL,
    -- reason → count (the tcp_reset and drop trees' reason names).
    resets_sent  jsonb       NOT NULL,
    resets_recv  jsonb       NOT NULL,
    drops        jsonb       NOT NULL,
    -- Smoothed RTT, ns: log-linear bucket index (internal/loglinear) →
    -- count; rtt_n is their total.
    rtt          jsonb       NOT NULL,
    rtt_n        bigint      NOT NULL,
    PRIMARY KEY (res, node_id, ts, role, owner_id, local_addr, local_port, peer_addr, peer_port, xlat_addr, xlat_port)
);
-- Staff's map of the whole fleet reads a window of every node.
CREATE INDEX flow_edges_time ON flow_edges (res, ts);

-- Sums two reason → count objects (the upsert of flow_edges). Most edges
-- have no resets or drops: an empty side costs nothing. Reads sum in Go
-- (store.ReadFlowEdges): an aggregate calling this per row is slow.
CREATE FUNCTION flow_counts_add(a jsonb, b jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$
    SELECT CASE WHEN b = '{}'::jsonb THEN a WHEN a = '{}'::jsonb THEN b ELSE (
        SELECT coalesce(jsonb_object_agg(k, v), '{}'::jsonb)
        FROM (SELECT k, sum(v::numeric) AS v
              FROM (SELECT * FROM jsonb_each_text(a) UNION ALL SELECT * FROM jsonb_each_text(b)) x (k, v)
              GROUP BY k) y) END
    $$;

-- Who held each address when: a row per (node, address, owner) span,
-- extended while the same owner goes on reporting it, and a new row when
-- another owner does (Report.address_holders). A peer address resolves to
-- the row of the edge's tenant whose span holds the edge's time.
CREATE TABLE flow_holders (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant         text        NOT NULL,
    node_id        integer     NOT NULL,
    address        text        NOT NULL,
    owner_id       text        NOT NULL,
    owner_kind     text        NOT NULL,
    owner_name     text        NOT NULL,
    owner_workload text        NOT NULL,
    first_seen     timestamptz NOT NULL,
    last_seen      timestamptz NOT NULL
);
CREATE INDEX flow_holders_node_address ON flow_holders (node_id, address, last_seen);
CREATE INDEX flow_holders_address ON flow_holders (tenant, address, last_seen);
CREATE INDEX flow_holders_last_seen ON flow_holders (last_seen);
