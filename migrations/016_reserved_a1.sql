-- Placeholder so that 018 applies on branch a1 (migrations may not have
-- gaps). 016 belongs to another change: drop this file when merging it.
SELECT 1;
