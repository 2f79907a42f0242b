package nodeconfig

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	"github.com/nbs-project/nbs/collector/errkind"
	"github.com/nbs-project/nbs/internal/schema"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// DefaultMaxOverrides caps the stored threshold overrides. A Config lists
// only the overrides of metrics its node has, so the cap bounds the work of
// resolving them, not the Config.
const DefaultMaxOverrides = 10000

// MaxConfigBytes is the largest Config the collector will let a change
// make. Agents receive with gRPC's default limit of 4 MiB; a Config over it
// is refused by every agent it is sent to, which then reconnects and gets
// it again. The margin leaves room for the envelope and the ping targets.
const MaxConfigBytes = 3 << 20

// ErrTooMany refuses a new override past the cap (400: the request is what
// must change).
var ErrTooMany = errkind.New(errkind.Invalid, "too many threshold overrides")

// ErrConfigSize refuses an override that could make a node's Config larger
// than agents receive (409: the node's metrics are what stands in the way).
var ErrConfigSize = errkind.New(errkind.Conflict, "config too large")

// maxPingAddrLen is the longest ping address a Hello may give: an IP
// address and port (ingest checks it).
const maxPingAddrLen = 64

// thresholdEntryBytes is the most one metric adds to a Config, beyond the
// bytes of its id: a map entry holding a Threshold with every field at its
// widest.
var thresholdEntryBytes = func() int {
	widest := &nbsv1.Threshold{Warn: math.MaxFloat64, Crit: math.MaxFloat64, Comparison: nbsv1.Comparison_COMPARISON_BELOW,
		HoldIntervals: math.MaxUint32, BaselineIntervals: math.MaxUint32, Floor: math.MaxFloat64}
	// +2: a key of up to 255 bytes has a two-byte length where "" has one,
	// and so may the entry.
	return proto.Size(&nbsv1.Config{Thresholds: map[string]*nbsv1.Threshold{"": widest}}) + 2
}()

// configBytesBound is the largest Config a node with these metric ids can
// be sent, whatever the overrides: each metric is in it at most once (a
// threshold or a disabled entry), plus version, expand and ping targets.
func configBytesBound(pathBytes, paths int64, pingPeers int) int64 {
	const fixed = 32 // version, expand-until and their tags
	peerBytes := int64(pingPeers) * (schema.MaxNodeNameLen + 1 + maxPingAddrLen + 3)
	return fixed + pathBytes + paths*int64(thresholdEntryBytes) + peerBytes
}

// checkScope refuses an override for a metric no node of its scope has,
// and one that could make a Config in its scope larger than MaxConfigBytes.
// A Config carries only the overrides of metrics its node has, so an
// override of a metric nobody has would do nothing: refusing it catches a
// typo in the metric id, instead of storing an override that silently
// never applies.
func (s *Service) checkScope(ctx context.Context, o Override) error {
	sel, err := json.Marshal(nonNil(o.Scope.Selector))
	if err != nil {
		return fmt.Errorf("encode selector: %w", err)
	}
	// Nodes of the scope that have the metric, the one whose Config could
	// be largest first.
	var (
		node             string
		nodes            int
		pathBytes, paths int64
	)
	err = s.repo.pool.QueryRow(ctx, `
		WITH scoped AS (
			SELECT n.id, n.name FROM nodes n
			WHERE ($1 = 'global' OR ($1 = 'selector' AND n.labels @> $2::jsonb) OR ($1 = 'node' AND n.name = $3))
			  AND EXISTS (SELECT 1 FROM node_metrics m JOIN metric_paths p ON p.id = m.metric_id
			              WHERE m.node_id = n.id AND p.path = $4)
		)
		SELECT coalesce((SELECT count(*) FROM scoped), 0), s.name, sum(length(p.path)), count(*)
		FROM scoped s JOIN node_metrics m ON m.node_id = s.id JOIN metric_paths p ON p.id = m.metric_id
		GROUP BY s.id, s.name ORDER BY sum(length(p.path)) + count(*) * $5 DESC LIMIT 1`,
		o.Scope.Kind, sel, o.Scope.Node, o.Metric, thresholdEntryBytes).Scan(&nodes, &node, &pathBytes, &paths)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("check the nodes of the override's scope: %w", err)
	}
	if nodes == 0 {
		switch o.Scope.Kind {
		case "node":
			return fmt.Errorf("%w: node %s has no metric %s (an override may only be set for a metric the node reports; see GET /api/v1/nodes/%s/tree)",
				ErrInvalid, o.Scope.Node, o.Metric, o.Scope.Node)
		case "selector":
			return fmt.Errorf("%w: no node matching selector %s has metric %s (an override may only be set for a metric some node of its scope reports)",
				ErrInvalid, o.Source(), o.Metric)
		default:
			return fmt.Errorf("%w: no node has metric %s (an override may only be set for a metric some node reports)", ErrInvalid, o.Metric)
		}
	}
	if b := configBytesBound(pathBytes, paths, s.pingPeers()); b > MaxConfigBytes {
		return fmt.Errorf("%w: node %s has %d metrics, so its Config could reach %d bytes with overrides, more than the %d agents are sent; no override is allowed on it until it has fewer metrics",
			ErrConfigSize, node, paths, b, MaxConfigBytes)
	}
	return nil
}

func (s *Service) pingPeers() int {
	s.peers.mu.Lock()
	defer s.peers.mu.Unlock()
	return s.peers.k
}
