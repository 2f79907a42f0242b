-- The fleet summary's trigger (migrations 018, 021) ran on every report:
-- in the 30,000-node run it was about two thirds of what merging a
-- healthy node's report into node_latest cost (57 against 19 ms a batch,
-- BENCHMARKS.md "Fleet"), and that merge was a third of PostgreSQL's busy
-- time. Yet for a healthy node the summary does not change from one
-- report to the next: the same roots in the same states, since the same
-- time, worst the same, nothing raised. Only the roots' values move, and
-- those are in hot.
--
-- So a roots-only report (mergeLatestHot, collector/store/write.go) now
-- carries root_states, its roots' states as the collector rendered them,
-- and the trigger runs only when the summary may change:
--   - a new row, a report carrying more than roots, a prune (these set
--     root_states to NULL);
--   - root_states differs from the previous report's (a root changed
--     state, appeared or went);
--   - raised is not empty (a roots-only report clears it, unless a child
--     stored at the same instant is still raised).
-- When it is skipped, roots keeps the values of the last run and hot has
-- the newer ones: readers take a root's value from hot first and its
-- "since" from roots (store.fleetDetails). Between runs, metrics only
-- changes through a statement that runs it, so what a reader assembles is
-- what the trigger would have stored (store.TestSummaryOnChange checks it
-- against a forced run).
ALTER TABLE node_latest ADD COLUMN root_states text;

DROP TRIGGER node_latest_roots ON node_latest;
CREATE TRIGGER node_latest_roots BEFORE INSERT ON node_latest
	FOR EACH ROW EXECUTE FUNCTION nbs_latest_roots();
CREATE TRIGGER node_latest_roots_changed BEFORE UPDATE OF metrics, hot ON node_latest
	FOR EACH ROW WHEN (NEW.root_states IS NULL OR OLD.root_states IS NULL
		OR NEW.root_states <> OLD.root_states OR OLD.raised <> '{}')
	EXECUTE FUNCTION nbs_latest_roots();
