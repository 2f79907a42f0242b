-- Placeholder for 012, which the rollup-fold branch brings
-- (012_rollup_folds.sql); migrations may have no gaps. Drop this file when
-- merging that branch.
SELECT 1;
