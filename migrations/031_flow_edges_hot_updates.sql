-- flow_edges' hour and day rows are updated by every report of their hour
-- and day (store.queueFlowEdges: one upsert adds the report's minute, hour
-- and day rows). No column an update changes is indexed, so the update
-- can be HOT — no new entry in the primary key of eleven columns, and the
-- page's old versions pruned in place — but only where the row's page has
-- room for the new version. With pages filled to the brim by the minute
-- rows inserted beside them, almost none was (bench/flowmap). Pages filled
-- to 70% leave that room; new pages only, existing ones keep theirs.
ALTER TABLE flow_edges SET (fillfactor = 70);
