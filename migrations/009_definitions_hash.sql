-- What a node's last Hello registered in full: a hash of its metric
-- definitions, and how many definitions the node had then. A Hello that
-- repeats them (an agent restart or reconnect, every agent after a collector
-- restart) skips rewriting the node's catalogue. A report that adds a
-- definition clears the hash, so the next Hello counts afresh.
ALTER TABLE nodes ADD COLUMN defs_hash bytea, ADD COLUMN defs_total integer;
