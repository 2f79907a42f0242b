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

-- The fleet summary (migration 018) reads the newest values the same way.
CREATE OR REPLACE FUNCTION nbs_latest_roots() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
	old_roots jsonb := '{}';
	scan boolean := true;
	newest bigint := floor(extract(epoch FROM NEW.ts) * 1000)::bigint;
BEGIN
	IF TG_OP = 'UPDATE' THEN
		old_roots := OLD.roots;
		scan := old_roots = '{}' OR NEW.snapshot_ts IS DISTINCT FROM OLD.snapshot_ts;
	END IF;
	-- A root keeps its "since" while its state ("s") stays; a value's "t"
	-- is its report's Unix ms.
	IF scan THEN
		SELECT coalesce(jsonb_object_agg(e.k, e.v || jsonb_build_object('since',
				CASE WHEN o.v IS NULL THEN e.v -> 't' WHEN o.v -> 's' = e.v -> 's' THEN o.v -> 'since' ELSE e.v -> 't' END)), '{}')
		INTO NEW.roots
		FROM jsonb_each(NEW.metrics || NEW.hot) e(k, v) LEFT JOIN jsonb_each(old_roots) o(k, v) ON o.k = e.k
		WHERE strpos(e.k, '/') = 0;
	ELSE
		SELECT coalesce(jsonb_object_agg(o.k, e.v || jsonb_build_object('since',
				CASE WHEN o.v -> 's' = e.v -> 's' THEN o.v -> 'since' ELSE e.v -> 't' END)), '{}')
		INTO NEW.roots
		-- hot first: a healthy node's report leaves its roots there, and
		-- coalesce stops at the first value, so metrics (out of line) is
		-- not read at all.
		FROM jsonb_each(old_roots) o(k, v) CROSS JOIN LATERAL (SELECT coalesce(NEW.hot -> o.k, NEW.metrics -> o.k) AS v) e
		WHERE e.v IS NOT NULL;
	END IF;
	SELECT coalesce(max(nbs_state_severity((v ->> 's')::integer)), 0),
		coalesce(max(nbs_state_severity((v ->> 's')::integer)) FILTER (WHERE k <> 'agent'), 0)
	INTO NEW.worst, NEW.worst_own FROM jsonb_each(NEW.roots) r(k, v);
	-- The metrics below the roots that the newest report carried raised
	-- ("s" not OK): only a node with a root that is not OK has any.
	IF EXISTS (SELECT FROM jsonb_each(NEW.roots) r(k, v) WHERE (v ->> 's')::integer <> 1 AND (v ->> 't')::bigint >= newest) THEN
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
