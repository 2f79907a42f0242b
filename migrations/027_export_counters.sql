-- Counters for the Prometheus exports (collector/export): a rate's stored
-- value is its increase over one report's interval, and Prometheus wants
-- the running total. The total lives here, added to in the transaction
-- that stores the report (store.WriteReports, for reports that were new:
-- a resend adds nothing), so every collector reads the same total, and it
-- goes on rising across agent restarts, collector restarts and failover.
-- Only non-zero increases are added: a healthy node's quiet counters cost
-- nothing. A row not updated for the raw retention is pruned with the
-- latest values (store.PruneLatest); a series that comes back starts from
-- zero, which Prometheus reads as a counter reset.
CREATE TABLE export_counters (
    node_id   integer     NOT NULL,
    metric_id integer     NOT NULL,
    total     float8      NOT NULL,
    -- When the row was made and the increase it was made with: an export
    -- shows a new counter without it for a while (--export.new-counter-hold),
    -- so that Prometheus, which reads the first sample of a series as its
    -- start, sees the first increase too.
    born      timestamptz NOT NULL,
    born_inc  float8      NOT NULL,
    updated   timestamptz NOT NULL,
    PRIMARY KEY (node_id, metric_id)
);
CREATE INDEX export_counters_updated ON export_counters (updated);
