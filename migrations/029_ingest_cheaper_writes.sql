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

-- A report that carries more than roots (a troubled node's branch every
-- interval, any node's snapshot) always ran the fleet summary's trigger,
-- whose scan of every newest value was 43% of what merging a full tree
-- into node_latest cost (store.mergeLatest). When none of its metrics
-- below the roots is raised, the summary changes only if a root's state
-- does, as for a roots-only report (migration 023): such a report now
-- passes its roots' states too, marked with a leading "+", and its roots'
-- values become hot, where readers already take a root's value from. The
-- trigger compares the states without the mark, so a healthy node's
-- snapshot between its roots-only reports skips it as well.
DROP TRIGGER node_latest_roots_changed ON node_latest;
CREATE TRIGGER node_latest_roots_changed BEFORE UPDATE OF metrics, hot ON node_latest
	FOR EACH ROW WHEN (NEW.root_states IS NULL OR OLD.root_states IS NULL
		OR ltrim(NEW.root_states, '+') <> ltrim(OLD.root_states, '+') OR OLD.raised <> '{}')
	EXECUTE FUNCTION nbs_latest_roots();
