-- node_latest.metrics holds a node's newest value of every metric (about
-- 200 on a busy node, about 3 KB compressed, stored out of line). Merging
-- a healthy node's report (its roots only, every interval) into it
-- rewrote that whole value each time: with 22,000 simulated nodes at 10 s
-- its TOAST table grew to 1.1 GB in 7 minutes and rewriting it was the
-- database's main work (BENCHMARKS.md, "Fleet"). A report that carries
-- roots only now merges into hot (a few entries, stored inline, its
-- metrics untouched: the same out-of-line value is kept, not rewritten);
-- the next report carrying more (a troubled node's branch, a snapshot)
-- folds hot into metrics. A node's newest values are metrics || hot, and
-- every reader says so.
ALTER TABLE node_latest ADD COLUMN hot jsonb NOT NULL DEFAULT '{}';

-- The fleet summary (migration 018) reads the newest values the same way,
-- and costs a healthy node's report one query instead of three: with the
-- value no longer rewritten, the trigger's queries were most of what that
-- report cost (BENCHMARKS.md, "A healthy node's newest values"). What it
-- keeps is migration 018's: roots with "since", worst, worst_own, raised.
CREATE OR REPLACE FUNCTION nbs_latest_roots() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
	old_roots jsonb := '{}';
	scan boolean := true;
	newest bigint := floor(extract(epoch FROM NEW.ts) * 1000)::bigint;
	raised boolean;
BEGIN
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

DROP TRIGGER node_latest_roots ON node_latest;
CREATE TRIGGER node_latest_roots BEFORE INSERT OR UPDATE OF metrics, hot ON node_latest
	FOR EACH ROW EXECUTE FUNCTION nbs_latest_roots();
