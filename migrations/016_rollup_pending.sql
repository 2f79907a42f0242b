-- Minute rollups leave the write path too (issue 18): a writer stores the
-- raw reports and, in the same statement, the key of every report that was
-- new here. The fold (store.FoldRollups) moves closed minutes' pending
-- reports into minute rollups — aggregated set-based from the raw rows,
-- added to what is stored, and their keys deleted, in one transaction — so
-- each stored report is counted exactly once whenever it arrives. A resend
-- is not new (the reports primary key), so it is never pending. Reads add
-- the pending reports' raw rows to the rollups in the same snapshot, so
-- they are exact before any fold.
--
-- No primary key and no foreign key: the reports insert already deduplicates,
-- and every check here is one more index probe per report on the write path.
-- A deleted node's pending rows join no report and go at the next fold.
CREATE TABLE rollup_pending (
    node_id     integer     NOT NULL,
    instance_id bigint      NOT NULL,
    seq         bigint      NOT NULL,
    ts          timestamptz NOT NULL,
    -- The metrics of the report's histograms (NULL: none), so the fold
    -- finds their rows by the histograms index (node_id, metric_id, ts).
    hist_ids    integer[]
);
-- Reads take the pending reports of some nodes over a time range; the fold
-- takes every closed minute's, a scan of a table that holds a minute or two
-- of the fleet's reports.
CREATE INDEX rollup_pending_node_ts ON rollup_pending (node_id, ts);

-- Up to this migration the write path kept minute rollups itself, so
-- nothing is pending. A collector of an older version still running writes
-- its reports' minute rollups and no pending keys: each report is counted
-- once either way.
