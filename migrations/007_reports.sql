-- Rollups maintained in the write path, in the transaction that stores the
-- reports (only for reports that were new, so a resend adds nothing twice).
-- res is the rollup's resolution in seconds (60 or 3600) and ts the start
-- of its bucket. Reports over long periods read these, never raw rows.
--
-- Samples: every stored sample, whatever its kind: count/sum (a rate's
-- stored value is its increase, so sum is the counter's total), min/max
-- (gauges), and the seconds the metric spent in each state (an interval
-- counts for the state its sample carried). Seconds with no sample at all
-- are no data, never OK.
CREATE TABLE rollup_samples (
    res        integer     NOT NULL,
    ts         timestamptz NOT NULL,
    node_id    integer     NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    metric_id  integer     NOT NULL,
    n          bigint      NOT NULL,
    sum        float8      NOT NULL,
    min        float8      NOT NULL,
    max        float8      NOT NULL,
    ok_s       float8      NOT NULL,
    warn_s     float8      NOT NULL,
    crit_s     float8      NOT NULL,
    -- Reports ask for one resolution, some nodes and a time range: this
    -- order makes that one contiguous index range per node (node first
    -- would scan every resolution and time of the node).
    PRIMARY KEY (res, node_id, ts, metric_id)
);
-- Incidents read only the non-OK minutes.
CREATE INDEX rollup_samples_bad ON rollup_samples (res, ts) WHERE warn_s > 0 OR crit_s > 0;

-- Histograms merged by adding bucket counts (the one log-linear layout).
CREATE TABLE rollup_histograms (
    res          integer     NOT NULL,
    ts           timestamptz NOT NULL,
    node_id      integer     NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    metric_id    integer     NOT NULL,
    count        bigint      NOT NULL,
    sum          float8      NOT NULL,
    bucket_index integer[]   NOT NULL,
    bucket_count bigint[]    NOT NULL,
    PRIMARY KEY (res, node_id, ts, metric_id)
);

-- Saved report definitions; the definition itself is JSON, as the API
-- shows it, and its selector decides which customers may see it.
CREATE TABLE report_definitions (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       text        NOT NULL,
    selector   jsonb       NOT NULL DEFAULT '{}',
    body       jsonb       NOT NULL,
    created_by text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
