-- Storage lifecycle (collector/retention): what the retention pass needs to
-- bound the catalogue tables, which are otherwise only ever added to.
--
-- When a metric's newest value falls out of node_latest (it has not been
-- reported for the raw retention), the pass records when it was last
-- reported here; the node's definition of it is deleted once no retained
-- rollup can hold it any more. NULL: still in node_latest, or never
-- reported (a definition of the agent's catalogue the node has not used).
ALTER TABLE node_metrics ADD COLUMN last_sample timestamptz;

-- Dictionary entries no node's catalogue names are marked first and
-- deleted a grace period later, so a collector that resolved one just
-- before it lost its last reference has time to use it again.
ALTER TABLE metric_paths ADD COLUMN unused_since timestamptz;
ALTER TABLE metric_defs ADD COLUMN unused_since timestamptz;
-- No index on node_metrics (metric_id) or (def_id) to find them: each
-- would cost every new node's registration ~190 more index entries (it
-- took half again as long); the pass scans node_metrics instead, once a
-- day (collector/retention).

-- Resolved alerts past their retention are found by age.
CREATE INDEX alert_instances_resolved ON alert_instances (resolved_at) WHERE state = 'resolved';
-- The dead definitions the pass looks for each time are few; the live
-- ones (NULL) stay out of the index.
CREATE INDEX node_metrics_last_sample ON node_metrics (last_sample) WHERE last_sample IS NOT NULL;

-- Collectors cache dictionary ids (collector/store); the pass bumps this
-- in the transaction that deletes entries, and a collector that sees it
-- changed forgets its cached ids before using one.
CREATE TABLE dictionary_epoch (
    id    integer PRIMARY KEY CHECK (id = 1),
    epoch bigint  NOT NULL
);
INSERT INTO dictionary_epoch VALUES (1, 0);
