package nodeconfig

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/nbs-project/nbs/collector/errkind"
	"github.com/nbs-project/nbs/collector/store"
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

// ErrConfigSize refuses an override that would make a node's Config larger
// than agents receive (409: the overrides already stored stand in the way).
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

// configOtherBytes is the most a Config holds besides thresholds: version,
// expand and ping targets. Each metric adds at most its id and
// thresholdEntryBytes (it is a threshold or a disabled entry, not both).
func configOtherBytes(pingPeers int) int64 {
	const fixed = 32 + 9 // version, expand-until and their tags; the expand budget (a double) and its tag
	return fixed + int64(pingPeers)*(schema.MaxNodeNameLen+1+maxPingAddrLen+3)
}

// checkScope refuses an override for a metric no node of its scope has,
// and one that would make a Config in its scope larger than MaxConfigBytes.
// A Config carries only the overrides of metrics its node has, so an
// override of a metric nobody has would do nothing: refusing it catches a
// typo in the metric id, instead of storing an override that silently
// never applies. A child of a metric the scope has is allowed: children
// such as a reset's reason (tcp_reset/sent/no_socket) appear on a node when
// they first happen, and operators set their thresholds before that; the
// node's Config gets the override once it reports the child.
func (s *Service) checkScope(ctx context.Context, o Override) error {
	sel, err := json.Marshal(nonNil(o.Scope.Selector))
	if err != nil {
		return fmt.Errorf("encode selector: %w", err)
	}
	parent := o.Metric // a root has none
	if i := strings.LastIndexByte(o.Metric, '/'); i > 0 {
		parent = o.Metric[:i]
	}
	// The nodes of the scope that have the metric (or its parent), and of
	// those the few
	// whose Config could pass the limit with every metric overridden: only
	// theirs are computed.
	rows, err := s.repo.pool.Query(ctx, `
		WITH scoped AS (
			SELECT n.id, n.name, n.labels FROM nodes n
			WHERE n.retired_at IS NULL AND ($1 = 'global' OR ($1 = 'selector' AND n.labels @> $2::jsonb) OR ($1 = 'node' AND n.name = $3))
			  AND EXISTS (SELECT 1 FROM node_metrics m JOIN metric_paths p ON p.id = m.metric_id
			              WHERE m.node_id = n.id AND p.path IN ($4, $7))
		), bound AS (
			SELECT s.id, s.name, s.labels, sum(length(p.path)) AS path_bytes, count(*) AS paths
			FROM scoped s JOIN node_metrics m ON m.node_id = s.id JOIN metric_paths p ON p.id = m.metric_id
			GROUP BY s.id, s.name, s.labels
		)
		SELECT (SELECT count(*) FROM scoped), b.id, b.name, b.labels, b.path_bytes, b.paths
		FROM (SELECT 1) one LEFT JOIN bound b ON b.path_bytes + b.paths * $5 > $6`,
		o.Scope.Kind, sel, o.Scope.Node, o.Metric, thresholdEntryBytes, MaxConfigBytes-configOtherBytes(s.pingPeers()), parent)
	if err != nil {
		return fmt.Errorf("check the nodes of the override's scope: %w", err)
	}
	type candidate struct {
		node  store.Node
		paths int64
	}
	var (
		nodes int
		big   []candidate
	)
	for rows.Next() {
		var (
			id               *int32
			name             *string
			labels           []byte
			pathBytes, paths *int64
		)
		if err := rows.Scan(&nodes, &id, &name, &labels, &pathBytes, &paths); err != nil {
			rows.Close()
			return fmt.Errorf("check the nodes of the override's scope: %w", err)
		}
		if id == nil {
			continue
		}
		c := candidate{node: store.Node{ID: *id, Name: *name}, paths: *paths}
		if err := json.Unmarshal(labels, &c.node.Labels); err != nil {
			rows.Close()
			return fmt.Errorf("decode labels of node %s: %w", *name, err)
		}
		big = append(big, c)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("check the nodes of the override's scope: %w", err)
	}
	if nodes == 0 {
		what := "metric " + o.Metric
		if parent != o.Metric {
			what = fmt.Sprintf("metric %s nor its parent %s", o.Metric, parent)
		}
		switch o.Scope.Kind {
		case "node":
			return fmt.Errorf("%w: node %s has no %s (an override may only be set for a metric the node reports, or a child of one; see GET /api/v1/nodes/%s/tree)",
				ErrInvalid, o.Scope.Node, what, o.Scope.Node)
		case "selector":
			return fmt.Errorf("%w: no node matching selector %s has %s (an override may only be set for a metric some node of its scope reports, or a child of one)",
				ErrInvalid, o.Source(), what)
		default:
			return fmt.Errorf("%w: no node has %s (an override may only be set for a metric some node reports, or a child of one)", ErrInvalid, what)
		}
	}
	if len(big) == 0 {
		return nil
	}
	overrides, err := s.repo.list(ctx)
	if err != nil {
		return err
	}
	// The overrides as they would be: o replaces the one of its scope and
	// metric.
	overrides = slices.DeleteFunc(overrides, func(x Override) bool {
		return x.Scope.Kind == o.Scope.Kind && x.Scope.Node == o.Scope.Node && x.Metric == o.Metric && maps.Equal(x.Scope.Selector, o.Scope.Selector)
	})
	overrides = append(overrides, o)
	for _, c := range big {
		has, err := s.repo.metricsOf(ctx, c.node.ID, nil)
		if err != nil {
			return err
		}
		cfg := thresholdsConfig(Resolve(c.node, overrides), has)
		if size := int64(proto.Size(cfg)) + configOtherBytes(s.pingPeers()); size > MaxConfigBytes {
			return fmt.Errorf("%w: with this override node %s's Config could be %d bytes (overrides for %d of its %d metrics), more than the %d bytes agents are sent; remove overrides that apply to it first",
				ErrConfigSize, c.node.Name, size, len(cfg.GetThresholds())+len(cfg.GetDisabledThresholds()), c.paths, MaxConfigBytes)
		}
	}
	return nil
}

func (s *Service) pingPeers() int {
	s.peers.mu.Lock()
	defer s.peers.mu.Unlock()
	return s.peers.k
}
