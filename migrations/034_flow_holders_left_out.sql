-- Address holders an agent left out of a report past the most a report
-- carries (proto FlowEdge.holders_left_out), summed on the node's "other"
-- row of each bucket like edges_folded: the map says how many peers could
-- not be resolved to their owners for that reason (docs/flow-map.md).
-- A constant default: no table rewrite.
ALTER TABLE flow_edges ADD COLUMN holders_left bigint NOT NULL DEFAULT 0;
