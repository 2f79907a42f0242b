-- Placeholder for 014, which another branch brings; migrations may have no
-- gaps. Drop this file when merging that branch.
SELECT 1;
