-- The per-node tables of a fleet's or a tenant's report (each ping
-- target's nodes, each node's ping, availability per node) sum every
-- node's day rollups of a few metrics: the roots and the ping targets'
-- (collector/report perNodeMetric). Those rows are a few of a busy node's
-- 185 a day, scattered among the others, so a 30-day report of 1,000
-- nodes read the whole of rollup_samples and rollup_histograms (3 GB) for
-- 390,000 rows (BENCHMARKS.md "Reports at 1,000 and 10,000 nodes").
--
-- The day fold copies them here with the scope pre-aggregate (migration
-- 020, collector/store scopeagg.go), in the transaction that writes the
-- day's rollups, keyed by day first: a period's rows are one index range,
-- a few MB. The copy is the day rollups' own values, so sums over it are
-- the sums over them. rollup_scope_nodes.per_node says a day was copied:
-- days folded before this migration were not, and reads of them fall back
-- to the day rollups until BackfillScopeDays rebuilds them.
CREATE TABLE rollup_node_day_samples (
    day       timestamptz NOT NULL,
    node_id   integer     NOT NULL,
    metric_id integer     NOT NULL,
    n         bigint      NOT NULL,
    sum       float8      NOT NULL,
    min       float8      NOT NULL,
    max       float8      NOT NULL,
    ok_s      float8      NOT NULL,
    warn_s    float8      NOT NULL,
    crit_s    float8      NOT NULL,
    PRIMARY KEY (day, node_id, metric_id)
);

-- buckets only (rollup_buckets of the arrays, what reads decode): the
-- copy is never merged into, so it needs no arrays.
CREATE TABLE rollup_node_day_histograms (
    day       timestamptz NOT NULL,
    node_id   integer     NOT NULL,
    metric_id integer     NOT NULL,
    count     bigint      NOT NULL,
    sum       float8      NOT NULL,
    buckets   bytea       NOT NULL,
    PRIMARY KEY (day, node_id, metric_id)
);

ALTER TABLE rollup_scope_nodes ADD COLUMN per_node boolean NOT NULL DEFAULT false;

-- Days folded before this one keep their scope rows (per_node false);
-- BackfillScopeDays rebuilds them, copy included, a few days a fold.
