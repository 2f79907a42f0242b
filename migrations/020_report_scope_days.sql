-- A per-scope day pre-aggregate of the day rollups (collector/store
-- scopeagg.go), kept by the day fold in the transaction that writes the
-- day's rollups: per UTC day, metric and scope, the sum over the scope's
-- nodes. A scope is '' (every node) or one tenant (nodes.tenant, the
-- tenant of the row: a node that changed tenant has a row per tenant, and
-- each row's history stays with its own). A 30-day report of a scope it
-- covers reads 30 rows a metric here instead of 30 a node.
--
-- rollup_scope_nodes is the nodes whose day rows a scope's day summed: a
-- read uses the day only when every one of them is in its report (a
-- deleted or retired node's history makes it fall back to the per-node
-- rows), so the two paths give the same numbers.
CREATE TABLE rollup_scope_nodes (
    scope    text        NOT NULL,
    day      timestamptz NOT NULL,
    node_ids integer[]   NOT NULL,
    PRIMARY KEY (scope, day)
);

CREATE TABLE rollup_scope_samples (
    scope     text        NOT NULL,
    day       timestamptz NOT NULL,
    metric_id integer     NOT NULL,
    n         bigint      NOT NULL,
    sum       float8      NOT NULL,
    min       float8      NOT NULL,
    max       float8      NOT NULL,
    ok_s      float8      NOT NULL,
    warn_s    float8      NOT NULL,
    crit_s    float8      NOT NULL,
    PRIMARY KEY (scope, day, metric_id)
);

CREATE TABLE rollup_scope_histograms (
    scope        text        NOT NULL,
    day          timestamptz NOT NULL,
    metric_id    integer     NOT NULL,
    count        bigint      NOT NULL,
    sum          float8      NOT NULL,
    bucket_index integer[]   NOT NULL,
    bucket_count bigint[]    NOT NULL,
    buckets      bytea GENERATED ALWAYS AS (rollup_buckets(bucket_index, bucket_count)) STORED,
    PRIMARY KEY (scope, day, metric_id)
);
