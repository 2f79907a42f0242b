-- rollup_samples and rollup_histograms lose their foreign keys to nodes:
-- checking them was a trigger call, an index probe and a row lock per
-- minute rollup row the fold inserts, about 20% of the minute fold
-- (store.BenchmarkFoldPending, BENCHMARKS.md "The minute fold"). What
-- they guaranteed is kept by the code that writes the tables, in the same
-- transactions:
-- - the folds (store.FoldRollups) lock the nodes they write rows for FOR
--   KEY SHARE first, as the key check did, once a node and chunk rather
--   than once a row, and write nothing for a node that is gone (a report
--   stored while its node was being deleted is dropped, where the key
--   check failed the fold's chunk at every try);
-- - deleting nodes (store.deleteRows) deletes their rollups after the node
--   rows, in a statement that waits for those locks and then sees every
--   row committed under them: ON DELETE CASCADE's work.
-- store.WriteRollups (benchmarks, backfills) writes what its caller gives.
ALTER TABLE rollup_samples DROP CONSTRAINT IF EXISTS rollup_samples_node_id_fkey;
ALTER TABLE rollup_histograms DROP CONSTRAINT IF EXISTS rollup_histograms_node_id_fkey;

-- The minute fold's watermark: no fold has written a minute rollup from
-- through on, so the fold inserts the rows of those minutes without a
-- conflict check (store.foldPending: half the time of an upsert). The
-- fold advances it in the transaction that writes the rows. Every fold
-- so far wrote minutes before now() only.
INSERT INTO rollup_folds (res, through) VALUES (60, now());
