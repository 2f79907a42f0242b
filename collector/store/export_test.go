package store

import "context"

// ReadFlowRTTJoined is ReadFlowRTT without primary key lookups, the way a
// long window of many buckets reads.
func (s *Store) ReadFlowRTTJoined(ctx context.Context, sources []FlowSource, keys []FlowRowKey) (map[FlowRowKey]map[int32]uint64, error) {
	return s.readFlowRTT(ctx, sources, keys, 0)
}
