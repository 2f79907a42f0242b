-- Merging a report that carries more than roots (a troubled node's branch,
-- any snapshot) into node_latest cost about 2.5x the COPY of the report
-- itself (BENCHMARKS.md, "Ingest against raw COPY"). Three parts of it
-- were work whose result was thrown away or already known:
--
--   - INSERT ... ON CONFLICT runs the BEFORE INSERT trigger on the row it
--     proposes before it finds the conflict: the fleet summary of the
--     report alone was computed, then discarded, and computed again by the
--     UPDATE trigger (13% of the merge's time). A node whose row exists
--     now skips it. That row can only go with its node (ON DELETE CASCADE),
--     and then the proposed row fails its foreign key: it is never stored
--     without its summary. A row not visible yet is summarised as before.
--
--   - metrics || hot || the report rebuilt and sorted the whole object
--     although a node's tree seldom changes: when the report carries every
--     key of metrics and hot, the result is the report's object itself.
--     metrics_keys is a hash of metrics' key set (the collector's, seeded
--     per process: NULL or another process's hash only costs the check
--     below); equal to the report's, or every key found in the report
--     (jsonb_object_keys, checked once per change of key set), the report
--     replaces metrics (store.mergeLatest). Anything else that changes
--     metrics' keys sets it NULL (store.PruneLatest).
--
--   - jsonb input sorts every object's keys: the collector now writes them
--     in jsonb's order (store.appendLatestJSON), and a sorted input is
--     checked in one pass.
ALTER TABLE node_latest ADD COLUMN metrics_keys bigint;

CREATE OR REPLACE FUNCTION nbs_latest_roots() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
	old_roots jsonb := '{}';
	scan boolean := true;
	newest bigint := floor(extract(epoch FROM NEW.ts) * 1000)::bigint;
	raised boolean;
BEGIN
	-- An upsert's proposed row, for a node whose row exists: the UPDATE's
	-- run of this trigger summarises what is stored (see above).
	IF TG_OP = 'INSERT' AND EXISTS (SELECT FROM node_latest l WHERE l.node_id = NEW.node_id) THEN
		RETURN NEW;
	END IF;
	IF TG_OP = 'UPDATE' THEN
		old_roots := OLD.roots;
		scan := old_roots = '{}' OR NEW.snapshot_ts IS DISTINCT FROM OLD.snapshot_ts;
	END IF;
	-- The roots' newest values: every root of the newest values for a new
	-- row or a snapshot (which carries every metric: a new root shows up
	-- there), else the roots the row had, looked up in hot first —
	-- coalesce stops at the first value, so for a healthy node's report
	-- metrics (out of line) is not read at all. A root keeps its "since"
	-- while its state ("s") stays; a value's "t" is its report's Unix ms.
	-- In the same pass: the worst severity, with and without the agent's
	-- root, and whether the newest report raised a root.
	SELECT coalesce(jsonb_object_agg(x.k, x.v), '{}'), coalesce(max(x.sev), 0),
		coalesce(max(x.sev) FILTER (WHERE x.k <> 'agent'), 0), coalesce(bool_or(x.sev <> 1 AND x.t >= newest), false)
	INTO NEW.roots, NEW.worst, NEW.worst_own, raised
	FROM (
		SELECT r.k, r.v || jsonb_build_object('since',
				CASE WHEN o.v IS NULL THEN r.v -> 't' WHEN o.v -> 's' = r.v -> 's' THEN o.v -> 'since' ELSE r.v -> 't' END) AS v,
			nbs_state_severity((r.v ->> 's')::integer) AS sev, (r.v ->> 't')::bigint AS t
		FROM (
			SELECT e.k, e.v FROM jsonb_each(NEW.metrics || NEW.hot) e(k, v) WHERE scan AND strpos(e.k, '/') = 0
			UNION ALL
			SELECT o.k, coalesce(NEW.hot -> o.k, NEW.metrics -> o.k) FROM jsonb_each(old_roots) o(k, v) WHERE NOT scan
		) r(k, v) LEFT JOIN jsonb_each(old_roots) o(k, v) ON o.k = r.k
		WHERE r.v IS NOT NULL
	) x;
	-- The metrics below the roots that the newest report carried raised
	-- ("s" not OK): only a node with a root raised by it has any.
	IF raised THEN
		SELECT coalesce(jsonb_object_agg(e.k, e.v), '{}') INTO NEW.raised
		FROM jsonb_each(NEW.metrics || NEW.hot) e(k, v)
		WHERE strpos(e.k, '/') > 0 AND (e.v ->> 's')::integer <> 1 AND (e.v ->> 't')::bigint >= newest;
	ELSE
		NEW.raised := '{}';
	END IF;
	RETURN NEW;
END
$$;
