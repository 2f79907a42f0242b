-- Hour and day rollups leave the write path: writers upsert minute rollups
-- only, and a periodic fold (collector/app, store.FoldRollups) recomputes
-- hours from their minutes and days from their hours once they are closed.
--
-- rollup_folds: the rows of resolution res are complete for every bucket
-- before through. Reads take buckets at or after it from the finer
-- resolution (store.ReadRollups), so reports stay exact for the open hour
-- and day. Until now the write path kept hour and day rows itself, so they
-- are complete up to here; the hour just closed (and so its day) is left
-- to the first fold, from its minutes: a late report for it is written by
-- this version without a dirty mark (too recent) and by an old collector
-- still running without the hour row, so only a recompute counts it.
-- date_bin, not date_trunc: UTC buckets whatever the session's time zone.
CREATE TABLE rollup_folds (
    res     integer PRIMARY KEY,
    through timestamptz NOT NULL
);
INSERT INTO rollup_folds (res, through)
SELECT 3600, h FROM (SELECT date_bin('1 hour', now(), timestamptz '1970-01-01 00:00:00+00') - interval '1 hour' AS h) t
UNION ALL
SELECT 86400, date_bin('1 day', h, timestamptz '1970-01-01 00:00:00+00') FROM (SELECT date_bin('1 hour', now(), timestamptz '1970-01-01 00:00:00+00') - interval '1 hour' AS h) t;

-- Late data: a writer whose minute rows land in an hour that may already
-- be folded marks it here, in the transaction of those rows, and the fold
-- recomputes the hour (and its day) and deletes the mark in one
-- transaction. No unique key: two writers marking one hour must not wait
-- for each other; duplicates cost one recompute.
CREATE TABLE rollup_dirty (
    id  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    res integer     NOT NULL,
    ts  timestamptz NOT NULL
);
