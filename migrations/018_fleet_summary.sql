-- The fleet page reads a summary of each node's newest state, never its
-- whole tree: node_latest.metrics holds every metric's newest value (about
-- 200 on a busy node, stored out of line), and detoasting 10,000 of them
-- per page cost seconds. A trigger keeps, beside it:
--   roots  the root metrics' newest values (the LatestValue entries of
--          metrics), each with "since": Unix ms of the first report that
--          carried the root in its current state (null when that state was
--          already current when this migration ran: not known);
--   worst  the worst severity among the roots (schema.Severity: 1 OK,
--          2 UNKNOWN, 3 WARN, 4 CRIT; 0 without roots), and worst_own
--          the same without the agent's own root (agent), which customers
--          do not see (collector/api/customer.go);
--   raised the metrics below the roots that the newest report carried in
--          a state other than OK: what explains a raised root (its worst
--          child, followed down), without reading the whole tree. A
--          healthy node has none; a troubled one its raised branch.
-- Whatever writes metrics (the report path, the lifecycle's pruning) keeps
-- them current: the trigger fires on the column, whatever the statement.
ALTER TABLE node_latest ADD COLUMN roots jsonb NOT NULL DEFAULT '{}';
ALTER TABLE node_latest ADD COLUMN worst smallint NOT NULL DEFAULT 0;
ALTER TABLE node_latest ADD COLUMN worst_own smallint NOT NULL DEFAULT 0;
ALTER TABLE node_latest ADD COLUMN raised jsonb NOT NULL DEFAULT '{}';

-- nbs_state_severity is schema.Severity of a stored state (nbsv1.State:
-- 1 OK, 2 WARN, 3 CRIT, 4 UNKNOWN; 0 for anything else).
CREATE FUNCTION nbs_state_severity(s integer) RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT (CASE s WHEN 1 THEN 1 WHEN 4 THEN 2 WHEN 2 THEN 3 WHEN 3 THEN 4 ELSE 0 END)::smallint $$;

-- What the trigger costs a report is kept small: the merged newest values
-- hold every metric (about 200 on a busy node) and a healthy node's report
-- carries its roots only. So the roots are looked up by name (those the row
-- had), and the keys are scanned only for a new row, a snapshot (which
-- carries every metric: a new root shows up there) or a node with a root
-- that is not OK (to find what raised it).
CREATE FUNCTION nbs_latest_roots() RETURNS trigger
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
		FROM jsonb_each(NEW.metrics) e(k, v) LEFT JOIN jsonb_each(old_roots) o(k, v) ON o.k = e.k
		WHERE strpos(e.k, '/') = 0;
	ELSE
		SELECT coalesce(jsonb_object_agg(o.k, e.v || jsonb_build_object('since',
				CASE WHEN o.v -> 's' = e.v -> 's' THEN o.v -> 'since' ELSE e.v -> 't' END)), '{}')
		INTO NEW.roots
		FROM jsonb_each(old_roots) o(k, v) CROSS JOIN LATERAL (SELECT NEW.metrics -> o.k AS v) e
		WHERE e.v IS NOT NULL;
	END IF;
	SELECT coalesce(max(nbs_state_severity((v ->> 's')::integer)), 0),
		coalesce(max(nbs_state_severity((v ->> 's')::integer)) FILTER (WHERE k <> 'agent'), 0)
	INTO NEW.worst, NEW.worst_own FROM jsonb_each(NEW.roots) r(k, v);
	-- The metrics below the roots that the newest report carried raised
	-- ("s" not OK): only a node with a root that is not OK has any.
	IF EXISTS (SELECT FROM jsonb_each(NEW.roots) r(k, v) WHERE (v ->> 's')::integer <> 1 AND (v ->> 't')::bigint >= newest) THEN
		SELECT coalesce(jsonb_object_agg(e.k, e.v), '{}') INTO NEW.raised
		FROM jsonb_each(NEW.metrics) e(k, v)
		WHERE strpos(e.k, '/') > 0 AND (e.v ->> 's')::integer <> 1 AND (e.v ->> 't')::bigint >= newest;
	ELSE
		NEW.raised := '{}';
	END IF;
	RETURN NEW;
END
$$;

CREATE TRIGGER node_latest_roots BEFORE INSERT OR UPDATE OF metrics ON node_latest
	FOR EACH ROW EXECUTE FUNCTION nbs_latest_roots();

-- What is stored now: its state's beginning is not known.
UPDATE node_latest SET metrics = metrics;
UPDATE node_latest l SET roots = (SELECT coalesce(jsonb_object_agg(k, v || '{"since": null}'), '{}') FROM jsonb_each(l.roots) e(k, v));
