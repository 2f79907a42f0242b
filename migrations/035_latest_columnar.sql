-- A report that carries more than roots (a troubled node's branch, any
-- snapshot) was merged into node_latest as one jsonb object of every value,
-- written by the collector as text: parsing it (a nested object and four
-- numbers a metric, about 15 KB for a busy tree) was about half of the
-- merge, which cost 1.2-1.3x the COPY of the report itself (BENCHMARKS.md,
-- "Ingest against raw COPY"). The same values as arrays, sent in binary,
-- are not parsed: an UPDATE of 800 busy trees' arrays took 30-46 ms
-- against 435-470 ms for the same values as jsonb; in IngestVsCopy the
-- merge went from 1.1-1.3x the COPY to 0.7-0.8x (BENCHMARKS.md).
--
-- So a node's newest values are now three layers, each newer than the one
-- before where a key is in both:
--   - base_*: the values of the last report that carried every key of the
--     node's values (store.mergeLatest: "covered"), one array a field, in
--     the order of base_paths (the collector's key order). NULL: none.
--     base_novalue is NULL when no value of the report was without one;
--     base_times and base_intervals hold one element when every value
--     shares it (a report's own, the usual case): 2.2 KB less to write a
--     busy tree (185 values).
--   - metrics: values merged since that a report carried only some of
--     (jsonb, as before), and whatever PruneLatest left;
--   - hot: roots-only reports' values since (migration 021).
-- A covered report replaces base_* and empties metrics and hot; base_paths
-- is kept as it is when the key set is the one stored (metrics_keys), so
-- its TOAST is not written again. Readers take nbs_latest_base(...) ||
-- metrics || hot (store.latestValues), which is the object the one jsonb
-- column held; the fleet summary's trigger builds from base_* only the
-- roots and the raised metrics it needs.
ALTER TABLE node_latest ADD COLUMN base_paths text[], ADD COLUMN base_vals float8[], ADD COLUMN base_states smallint[],
	ADD COLUMN base_times bigint[], ADD COLUMN base_intervals integer[], ADD COLUMN base_novalue boolean[];

-- nbs_latest_base is base_* as node_latest's jsonb values ("i", "n" when
-- without a value, "s", "t", "v": store.LatestValue): all of them, the
-- roots only (roots_only), or those below the roots not OK and reported at
-- raised_since or later (what the summary calls raised).
CREATE FUNCTION nbs_latest_base(paths text[], vals float8[], states smallint[], times bigint[], intervals integer[],
	novalue boolean[], roots_only boolean, raised_since bigint) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
	SELECT coalesce(jsonb_object_agg(u.p, CASE WHEN u.n THEN jsonb_build_object('i', ti.i, 'n', true, 's', u.s, 't', ti.t, 'v', u.v)
		ELSE jsonb_build_object('i', ti.i, 's', u.s, 't', ti.t, 'v', u.v) END), '{}')
	FROM unnest(paths, vals, states, times, intervals, novalue) u(p, v, s, t0, i0, n),
		LATERAL (SELECT coalesce(u.t0, times[1]) AS t, coalesce(u.i0, intervals[1]) AS i) ti
	WHERE u.p IS NOT NULL AND (NOT roots_only OR strpos(u.p, '/') = 0)
		AND (raised_since IS NULL OR (strpos(u.p, '/') > 0 AND u.s <> 1 AND ti.t >= raised_since))
$$;

CREATE OR REPLACE FUNCTION nbs_latest_roots() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
	old_roots jsonb := '{}';
	scan boolean := true;
	newest bigint := floor(extract(epoch FROM NEW.ts) * 1000)::bigint;
	raised boolean;
	-- The newest values of the roots: base_* built for its roots only,
	-- then metrics and hot (newer) over them.
	vals jsonb;
BEGIN
	-- An upsert's proposed row, for a node whose row exists: the UPDATE's
	-- run of this trigger summarises what is stored (migration 032).
	IF TG_OP = 'INSERT' AND EXISTS (SELECT FROM node_latest l WHERE l.node_id = NEW.node_id) THEN
		RETURN NEW;
	END IF;
	IF TG_OP = 'UPDATE' THEN
		old_roots := OLD.roots;
		scan := old_roots = '{}' OR NEW.snapshot_ts IS DISTINCT FROM OLD.snapshot_ts;
	END IF;
	vals := nbs_latest_base(NEW.base_paths, NEW.base_vals, NEW.base_states, NEW.base_times, NEW.base_intervals,
		NEW.base_novalue, true, NULL) || NEW.metrics || NEW.hot;
	-- As migration 032's, but for where the values come from: every root
	-- of the newest values for a new row or a snapshot, else the roots the
	-- row had. A root keeps its "since" while its state ("s") stays; a
	-- value's "t" is its report's Unix ms. In the same pass: the worst
	-- severity, with and without the agent's root, and whether the newest
	-- report raised a root.
	SELECT coalesce(jsonb_object_agg(x.k, x.v), '{}'), coalesce(max(x.sev), 0),
		coalesce(max(x.sev) FILTER (WHERE x.k <> 'agent'), 0), coalesce(bool_or(x.sev <> 1 AND x.t >= newest), false)
	INTO NEW.roots, NEW.worst, NEW.worst_own, raised
	FROM (
		SELECT r.k, r.v || jsonb_build_object('since',
				CASE WHEN o.v IS NULL THEN r.v -> 't' WHEN o.v -> 's' = r.v -> 's' THEN o.v -> 'since' ELSE r.v -> 't' END) AS v,
			nbs_state_severity((r.v ->> 's')::integer) AS sev, (r.v ->> 't')::bigint AS t
		FROM (
			SELECT e.k, e.v FROM jsonb_each(vals) e(k, v) WHERE scan AND strpos(e.k, '/') = 0
			UNION ALL
			SELECT o.k, vals -> o.k FROM jsonb_each(old_roots) o(k, v) WHERE NOT scan
		) r(k, v) LEFT JOIN jsonb_each(old_roots) o(k, v) ON o.k = r.k
		WHERE r.v IS NOT NULL
	) x;
	-- The metrics below the roots that the newest report carried raised
	-- ("s" not OK): only a node with a root raised by it has any. base_*
	-- gives only its raised ones; a newer value in metrics or hot of the
	-- same key replaces it before the filter.
	IF raised THEN
		SELECT coalesce(jsonb_object_agg(e.k, e.v), '{}') INTO NEW.raised
		FROM jsonb_each(nbs_latest_base(NEW.base_paths, NEW.base_vals, NEW.base_states, NEW.base_times, NEW.base_intervals,
			NEW.base_novalue, false, newest) || NEW.metrics || NEW.hot) e(k, v)
		WHERE strpos(e.k, '/') > 0 AND (e.v ->> 's')::integer <> 1 AND (e.v ->> 't')::bigint >= newest;
	ELSE
		NEW.raised := '{}';
	END IF;
	RETURN NEW;
END
$$;

-- The trigger on a change of values: base_* is one too.
DROP TRIGGER node_latest_roots_changed ON node_latest;
CREATE TRIGGER node_latest_roots_changed BEFORE UPDATE OF metrics, hot, base_vals ON node_latest
	FOR EACH ROW WHEN (NEW.root_states IS NULL OR OLD.root_states IS NULL
		OR NEW.root_states <> OLD.root_states OR OLD.raised <> '{}')
	EXECUTE FUNCTION nbs_latest_roots();
