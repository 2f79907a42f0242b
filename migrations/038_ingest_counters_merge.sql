-- The export counters' increases as the source of store.addCounters'
-- MERGE. A MERGE joins its source to export_counters; planned with the
-- batch's arrays in hand (a prepared statement's first five runs on each
-- connection), unnest's row count, tens of thousands, made the planner
-- hash the whole table (a scan of it a batch: 0.55 s at 2 million rows),
-- where a row's probe of the primary key is what a batch needs. A
-- PL/pgSQL function is not inlined: its ROWS (10) is the planner's
-- estimate, whatever the arrays hold, so every plan is the probes'.
CREATE FUNCTION nbs_counter_incs(nodes integer[], metrics integer[], incs float8[]) RETURNS TABLE (n integer, m integer, v float8)
LANGUAGE plpgsql IMMUTABLE ROWS 10 AS $$
BEGIN
	RETURN QUERY SELECT * FROM unnest(nodes, metrics, incs);
END $$;
