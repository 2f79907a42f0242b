-- node_latest.metrics (every metric's newest value, about 3 KB compressed
-- on a busy node) is decompressed, merged and compressed again by every
-- report that carries more than roots: a troubled node's every interval,
-- any node's snapshot. With lz4 instead of pglz that merge costs about
-- 1.55x less (store.BenchmarkLatestMerge, the merge into metrics relative
-- to the merge into hot in the same run: 3.2-3.3 against 4.9-5.2), for
-- values about a third larger. Values written before keep pglz until they
-- are next rewritten. A server built without lz4 keeps pglz.
DO $$
BEGIN
	ALTER TABLE node_latest ALTER COLUMN metrics SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
	RAISE NOTICE 'node_latest.metrics keeps pglz: this server has no lz4';
END
$$;
