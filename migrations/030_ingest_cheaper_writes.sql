-- export_counters (migration 027) is updated in place by every batch that
-- stores a report with a moved counter: at a full tree per report, about a
-- hundred rows a node and batch. Its index on updated made every such
-- update a new row version with an entry in both indexes (updated always
-- changes, so no update could be HOT): in the ingest benchmark at 800
-- nodes that statement kept 0.45 of a backend busy, as much as the COPY of
-- the reports themselves (BENCHMARKS.md, "Ingest against raw COPY").
-- Without it, and with room left on each page for the new version, the
-- update is HOT: no index entry, and the page's old versions are pruned
-- in place. Its two readers pass over the whole table anyway: the export
-- (roots or moved since, store.ExportNodes) and the retention pass's prune
-- of what has not moved for the raw retention (store.PruneCounters, once
-- a pass).
DROP INDEX IF EXISTS export_counters_updated;
ALTER TABLE export_counters SET (fillfactor = 70);

