-- Nodes are identified by name; id is the compact key used everywhere else and
-- the natural distribution key if the fleet ever moves to sharded Postgres.
CREATE TABLE nodes (
    id             integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name           text        NOT NULL UNIQUE,
    labels         jsonb       NOT NULL DEFAULT '{}',
    agent_version  text        NOT NULL DEFAULT '',
    kernel_release text        NOT NULL DEFAULT '',
    instance_id    bigint      NOT NULL DEFAULT 0,
    interval_ms    integer     NOT NULL DEFAULT 0,
    capabilities   jsonb       NOT NULL DEFAULT '[]',
    first_seen     timestamptz NOT NULL DEFAULT now(),
    last_hello     timestamptz NOT NULL DEFAULT now()
);

-- A dictionary of metric paths, so reports store small integers.
CREATE TABLE metric_paths (
    id   integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    path text NOT NULL UNIQUE
);

-- What each node's agent said its metrics are. The agent's catalogue is the
-- source of truth; the collector renders whatever tree it is told.
CREATE TABLE node_metrics (
    node_id           integer  NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    metric_id         integer  NOT NULL REFERENCES metric_paths (id),
    title             text     NOT NULL,
    unit              text     NOT NULL,
    kind              smallint NOT NULL,
    description       text     NOT NULL,
    default_threshold jsonb,
    -- Histograms: recorded value / scale is in unit; quantile is the headline.
    scale             float8   NOT NULL DEFAULT 1,
    quantile          float8   NOT NULL DEFAULT 0,
    PRIMARY KEY (node_id, metric_id)
);

-- One row per report, samples as parallel arrays: a healthy node streams a
-- handful of samples per interval, so per-row overhead would dominate a
-- row-per-sample layout. The primary key makes ingest idempotent.
CREATE TABLE reports (
    node_id     integer     NOT NULL,
    instance_id bigint      NOT NULL,
    seq         bigint      NOT NULL,
    ts          timestamptz NOT NULL,
    interval_ms integer     NOT NULL,
    snapshot    boolean     NOT NULL,
    metric_ids  integer[]   NOT NULL,
    vals        float8[]    NOT NULL,
    states      smallint[]  NOT NULL,
    PRIMARY KEY (node_id, instance_id, seq, ts)
) PARTITION BY RANGE (ts);
CREATE INDEX reports_node_ts ON reports (node_id, ts);

-- Latency distributions as sparse log-linear bucket counts (mergeable).
CREATE TABLE histograms (
    node_id       integer     NOT NULL,
    instance_id   bigint      NOT NULL,
    seq           bigint      NOT NULL,
    ts            timestamptz NOT NULL,
    metric_id     integer     NOT NULL,
    count         bigint      NOT NULL,
    sum           float8      NOT NULL,
    bucket_index  integer[]   NOT NULL,
    bucket_count  bigint[]    NOT NULL
) PARTITION BY RANGE (ts);
CREATE INDEX histograms_node_metric_ts ON histograms (node_id, metric_id, ts);

-- Sampled evidence (e.g. a reset's 5-tuple and reason).
CREATE TABLE events (
    node_id     integer     NOT NULL,
    instance_id bigint      NOT NULL,
    seq         bigint      NOT NULL,
    ts          timestamptz NOT NULL,
    metric_id   integer     NOT NULL,
    fields      jsonb       NOT NULL
) PARTITION BY RANGE (ts);
CREATE INDEX events_node_metric_ts ON events (node_id, metric_id, ts);

-- The newest value and state of every metric of a node, merged report by
-- report, so tree and fleet views never scan history. One row per node is
-- upserted per write batch, not per sample.
CREATE TABLE node_latest (
    node_id     integer     PRIMARY KEY REFERENCES nodes (id) ON DELETE CASCADE,
    ts          timestamptz NOT NULL,
    interval_ms integer     NOT NULL,
    snapshot_ts timestamptz,
    metrics     jsonb       NOT NULL
);
