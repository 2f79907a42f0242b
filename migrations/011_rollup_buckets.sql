-- A month-long report reads tens of thousands of histogram rollups, and
-- PostgreSQL sent their integer[] and bigint[] buckets element by element
-- (array_send): most of the report's time (BENCHMARKS.md). The same bytes,
-- made once when a rollup is written, are sent as one value. The arrays
-- stay what the write path merges.
CREATE FUNCTION rollup_buckets(integer[], bigint[]) RETURNS bytea
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    -- array_send is STABLE only because some element types' send functions
    -- are; int4send and int8send are immutable.
    AS $$ SELECT array_send($1) || array_send($2) $$;

ALTER TABLE rollup_histograms
    ADD COLUMN buckets bytea GENERATED ALWAYS AS (rollup_buckets(bucket_index, bucket_count)) STORED;
