-- The node_latest merge (store.mergeLatest) cost about as much as the COPY
-- of the reports it follows (BENCHMARKS.md, "Ingest against raw COPY"). In
-- IngestVsCopy (800 nodes, a full tree a report), per report stored:
-- one update of node_latest, of which 19% were HOT, and one TOAST row (its
-- base_vals); the summary trigger (nbs_latest_roots) built a deep report's
-- roots with nbs_latest_base(..., roots_only), a third of the merge's
-- time (pg_stat_statements).
--
-- nbs_latest_base_roots is nbs_latest_base(..., true, NULL): the same
-- object, found by unnesting the paths only and reading the other arrays
-- at the roots' positions. nbs_latest_base unnests six arrays, each into
-- a tuplestore, for every value, to keep the 5 roots of 185: 500 calls in
-- 35-37 ms against 17-20 (the arrays of a busy tree). Only the trigger
-- calls it: its NEW row's arrays are in memory, where a reader's stored
-- row's would be fetched from TOAST at every position.
CREATE FUNCTION nbs_latest_base_roots(paths text[], vals float8[], states smallint[], times bigint[], intervals integer[],
	novalue boolean[]) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
	SELECT coalesce(jsonb_object_agg(u.p, CASE WHEN novalue[u.o]
			THEN jsonb_build_object('i', coalesce(intervals[u.o], intervals[1]), 'n', true, 's', states[u.o], 't', coalesce(times[u.o], times[1]), 'v', vals[u.o])
			ELSE jsonb_build_object('i', coalesce(intervals[u.o], intervals[1]), 's', states[u.o], 't', coalesce(times[u.o], times[1]), 'v', vals[u.o]) END), '{}')
	FROM unnest(paths) WITH ORDINALITY u(p, o)
	WHERE u.p IS NOT NULL AND strpos(u.p, '/') = 0
$$;

-- Migration 035's trigger function, its roots from nbs_latest_base_roots.
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
	vals := nbs_latest_base_roots(NEW.base_paths, NEW.base_vals, NEW.base_states, NEW.base_times, NEW.base_intervals,
		NEW.base_novalue) || NEW.metrics || NEW.hot;
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

-- Room on each page for a row's next version: an update that finds none
-- writes the row to another page and a new entry into the primary key's
-- index (not HOT), and every merge updates every row of its batch. As
-- export_counters (migration 030). New pages only: a table's existing
-- pages get the room as their rows move. IngestVsCopy: 92-98% HOT (14-22%
-- before), the heap 1.3-1.5 pages a node after its window (4.9-10.2).
-- Tried: base_vals kept inline too (toast_tuple_target = 4096, no TOAST
-- row a merge): the merge fell to 0.60x the COPY, but a page then holds
-- one 3-4 KB row and its next version only, a version not yet prunable
-- sent a fifth of the updates to new pages: 9 pages a node after 30 s.
ALTER TABLE node_latest SET (fillfactor = 70);
