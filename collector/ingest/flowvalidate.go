package ingest

import (
	"fmt"
	"math"
	"net/netip"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/loglinear"
	"github.com/nbs-project/nbs/internal/schema"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// Bounds of a flow edge's and an address holder's fields (docs/flow-map.md,
// docs/limits.md): an edge's strings are owner names and ids, its maps
// kernel reasons, all of them a handful per edge.
const (
	maxOwnerIDLen    = schema.MaxIDLen // an owner id is a metric id segment
	maxOwnerNameLen  = 256
	maxOwnerKindLen  = 32
	maxFlowReasons   = 64 // reasons per map of one edge
	maxFlowReasonLen = 64
)

// ownerKinds are the kinds an agent names (agent/owner).
var ownerKinds = map[string]bool{"host": true, "pod": true, "container": true, "netns": true, "process": true, "unknown": true}

// checkOwner validates a flow owner.
func checkOwner(o *nbsv1.FlowOwner) (store.FlowOwner, error) {
	var out store.FlowOwner
	id := o.GetId()
	if id == "" {
		return out, fmt.Errorf("owner id is empty")
	}
	// An owner id is a segment of the node's tree (tcp_reset/sent/<id>),
	// so it is held to the segment rule.
	if err := schema.CheckID("flow/" + id); err != nil || len(id) > maxOwnerIDLen {
		return out, fmt.Errorf("owner id %.80q is not a metric id segment (a-z 0-9 _ . : -)", id)
	}
	if !ownerKinds[o.GetKind()] {
		return out, fmt.Errorf("owner %s: kind %.40q is not host, pod, container, netns, process or unknown", id, o.GetKind())
	}
	if err := checkText("owner name", o.GetName(), maxOwnerNameLen); err != nil {
		return out, fmt.Errorf("owner %s: %w", id, err)
	}
	if err := checkText("owner workload", o.GetWorkload(), maxOwnerNameLen); err != nil {
		return out, fmt.Errorf("owner %s: %w", id, err)
	}
	return store.FlowOwner{ID: id, Kind: o.GetKind(), Name: o.GetName(), Workload: o.GetWorkload()}, nil
}

// checkFlowAddr parses an address an edge or holder names: an IP address
// without a zone, returned in its canonical form (an IPv4-mapped IPv6
// address as IPv4, as the other end's socket would name it).
func checkFlowAddr(field, s string, optional bool) (string, error) {
	if s == "" && optional {
		return "", nil
	}
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		return "", fmt.Errorf("%s %.64q is not an IP address", field, s)
	case a.Zone() != "":
		return "", fmt.Errorf("%s %.64q has a zone, which means nothing to other nodes", field, s)
	}
	return a.Unmap().String(), nil
}

func checkPort(field string, p uint32) (uint16, error) {
	if p > math.MaxUint16 {
		return 0, fmt.Errorf("%s %d is above 65535", field, p)
	}
	return uint16(p), nil
}

// checkReasons validates a reason → count map of an edge.
func (l Limits) checkReasons(field string, m map[string]uint64) (map[string]uint64, error) {
	if len(m) > maxFlowReasons {
		return nil, fmt.Errorf("%s has %d reasons, at most %d", field, len(m), maxFlowReasons)
	}
	if len(m) == 0 {
		return nil, nil
	}
	out := make(map[string]uint64, len(m))
	for k, v := range m {
		if len(k) > maxFlowReasonLen || schema.CheckID("r/"+k) != nil {
			return nil, fmt.Errorf("%s: reason %.80q is not a metric id segment of at most %d bytes", field, k, maxFlowReasonLen)
		}
		if float64(v) > l.MaxAbsoluteValue {
			return nil, fmt.Errorf("%s: reason %s: %d is above %g", field, k, v, l.MaxAbsoluteValue)
		}
		if v != 0 {
			out[k] = v
		}
	}
	return out, nil
}

// checkRTT validates an edge's RTT histogram as every histogram is held:
// buckets of the log-linear layout, strictly increasing, counts that sum
// to the count.
func (l Limits) checkRTT(h *nbsv1.Histogram) (map[int32]uint64, error) {
	if h == nil {
		return nil, nil
	}
	idx, cnt := h.GetBucketIndex(), h.GetBucketCount()
	if len(idx) != len(cnt) || len(idx) > l.MaxBuckets {
		return nil, fmt.Errorf("rtt: %d indexes and %d counts (must be equal and at most %d)", len(idx), len(cnt), l.MaxBuckets)
	}
	if h.GetMetricId() != "" || h.GetStartUnixNano() != 0 {
		return nil, fmt.Errorf("rtt: metric_id and start_unix_nano must be empty (the histogram is the edge's interval)")
	}
	if len(idx) == 0 {
		if h.GetCount() != 0 {
			return nil, fmt.Errorf("rtt: count %d without buckets", h.GetCount())
		}
		return nil, nil
	}
	out := make(map[int32]uint64, len(idx))
	var total uint64
	for i := range idx {
		if i > 0 && idx[i] <= idx[i-1] {
			return nil, fmt.Errorf("rtt: bucket indexes must be strictly increasing")
		}
		if idx[i] >= loglinear.Buckets {
			return nil, fmt.Errorf("rtt: bucket index %d is past the layout (at most %d)", idx[i], loglinear.Buckets-1)
		}
		if cnt[i] == 0 || float64(total+cnt[i]) > l.MaxAbsoluteValue || total+cnt[i] < total {
			return nil, fmt.Errorf("rtt: bucket %d count %d is zero or overflows the total", idx[i], cnt[i])
		}
		total += cnt[i]
		out[int32(idx[i])] = cnt[i]
	}
	if total != h.GetCount() {
		return nil, fmt.Errorf("rtt: count %d does not equal the bucket total %d", h.GetCount(), total)
	}
	if s := h.GetSum(); math.IsNaN(s) || math.IsInf(s, 0) || s < 0 {
		return nil, fmt.Errorf("rtt: sum %g is not a finite number >= 0", s)
	}
	return out, nil
}

// checkFlowEdge validates one edge and converts it.
func (l Limits) checkFlowEdge(e *nbsv1.FlowEdge) (store.FlowEdge, error) {
	var out store.FlowEdge
	counts := []struct {
		name string
		v    uint64
		to   *uint64
	}{{"opened", e.GetOpened(), &out.Opened}, {"failed", e.GetFailed(), &out.Failed}, {"closed", e.GetClosed(), &out.Closed},
		{"retransmits", e.GetRetransmits(), &out.Retransmits}, {"bytes_sent", e.GetBytesSent(), &out.BytesSent},
		{"bytes_received", e.GetBytesReceived(), &out.BytesRecv}, {"edges_folded", uint64(e.GetEdgesFolded()), &out.EdgesFolded}}
	for _, c := range counts {
		if float64(c.v) > l.MaxAbsoluteValue {
			return out, fmt.Errorf("%s %d is above %g", c.name, c.v, l.MaxAbsoluteValue)
		}
		*c.to = c.v
	}
	var err error
	if out.ResetsSent, err = l.checkReasons("resets_sent", e.GetResetsSent()); err != nil {
		return out, err
	}
	if out.ResetsRecv, err = l.checkReasons("resets_received", e.GetResetsReceived()); err != nil {
		return out, err
	}
	if out.Drops, err = l.checkReasons("drops", e.GetDrops()); err != nil {
		return out, err
	}
	if out.RTT, err = l.checkRTT(e.GetRtt()); err != nil {
		return out, err
	}
	if e.GetOther() {
		// The sum of what fell past the top-K: nothing names an owner or
		// a peer.
		if e.GetLocal() != nil || e.GetRole() != nbsv1.FlowRole_FLOW_ROLE_UNSPECIFIED || e.GetLocalAddress() != "" || e.GetLocalPort() != 0 ||
			e.GetPeerAddress() != "" || e.GetPeerPort() != 0 || e.GetPeerTranslatedAddress() != "" || e.GetPeerTranslatedPort() != 0 {
			return out, fmt.Errorf("an other edge (other=true) must leave local, role, addresses and ports empty")
		}
		out.Role = store.FlowOther
		out.HoldersLeftOut = uint64(e.GetHoldersLeftOut())
		return out, nil
	}
	if e.GetEdgesFolded() != 0 {
		return out, fmt.Errorf("edges_folded %d on an edge that is not other", e.GetEdgesFolded())
	}
	if e.GetHoldersLeftOut() != 0 {
		return out, fmt.Errorf("holders_left_out %d on an edge that is not other", e.GetHoldersLeftOut())
	}
	if e.GetLocal() == nil {
		return out, fmt.Errorf("local owner is missing")
	}
	if out.Local, err = checkOwner(e.GetLocal()); err != nil {
		return out, err
	}
	if out.LocalAddr, err = checkFlowAddr("local_address", e.GetLocalAddress(), false); err != nil {
		return out, err
	}
	if out.PeerAddr, err = checkFlowAddr("peer_address", e.GetPeerAddress(), false); err != nil {
		return out, err
	}
	if out.LocalPort, err = checkPort("local_port", e.GetLocalPort()); err != nil {
		return out, err
	}
	if out.PeerPort, err = checkPort("peer_port", e.GetPeerPort()); err != nil {
		return out, err
	}
	if out.XlatAddr, err = checkFlowAddr("peer_translated_address", e.GetPeerTranslatedAddress(), true); err != nil {
		return out, err
	}
	if out.XlatPort, err = checkPort("peer_translated_port", e.GetPeerTranslatedPort()); err != nil {
		return out, err
	}
	switch e.GetRole() {
	case nbsv1.FlowRole_FLOW_ROLE_CLIENT:
		out.Role = store.FlowClient
		if out.LocalPort != 0 || out.PeerPort == 0 {
			return out, fmt.Errorf("a client edge has peer_port (%d) set and local_port (%d) 0", out.PeerPort, out.LocalPort)
		}
		if (out.XlatAddr == "") != (out.XlatPort == 0) {
			return out, fmt.Errorf("peer_translated_address and peer_translated_port go together")
		}
	case nbsv1.FlowRole_FLOW_ROLE_SERVER:
		out.Role = store.FlowServer
		if out.LocalPort == 0 || out.PeerPort != 0 || out.XlatAddr != "" || out.XlatPort != 0 {
			return out, fmt.Errorf("a server edge has local_port (%d) set, and peer_port (%d) and the translated peer empty", out.LocalPort, out.PeerPort)
		}
	default:
		return out, fmt.Errorf("role %v is not client or server", e.GetRole())
	}
	return out, nil
}

// checkFlows validates a report's flow edges and address holders
// (proto Report.flows, Report.address_holders), all or nothing: a bad
// edge rejects the report, naming the edge and what is wrong with it.
func (l Limits) checkFlows(r *nbsv1.Report, out *store.Report) *rejection {
	seq := r.GetSequence()
	if n := len(r.GetFlows()); n > l.MaxFlowEdges {
		return reject("too_large", "report %d: %d flow edges, at most %d allowed (--ingest.max-flow-edges)", seq, n, l.MaxFlowEdges)
	}
	if n := len(r.GetAddressHolders()); n > l.MaxAddressHolders {
		return reject("too_large", "report %d: %d address holders, at most %d allowed (--ingest.max-address-holders)", seq, n, l.MaxAddressHolders)
	}
	if len(r.GetFlows()) > 0 {
		out.Flows = make([]store.FlowEdge, 0, len(r.GetFlows()))
	}
	for i, e := range r.GetFlows() {
		fe, err := l.checkFlowEdge(e)
		if err != nil {
			return reject("bad_flow", "report %d: flow edge %d: %v", seq, i, err)
		}
		out.Flows = append(out.Flows, fe)
	}
	// One owner per address and report: two namespaces of one node with
	// the same address are one address to every other node, which cannot
	// tell which of them it reached; the first named holds it.
	seen := make(map[string]bool, len(r.GetAddressHolders()))
	for i, h := range r.GetAddressHolders() {
		addr, err := checkFlowAddr("address", h.GetAddress(), false)
		if err != nil {
			return reject("bad_flow", "report %d: address holder %d: %v", seq, i, err)
		}
		if h.GetOwner() == nil {
			return reject("bad_flow", "report %d: address holder %d (%s): owner is missing", seq, i, addr)
		}
		o, err := checkOwner(h.GetOwner())
		if err != nil {
			return reject("bad_flow", "report %d: address holder %d (%s): %v", seq, i, addr, err)
		}
		if seen[addr] {
			continue
		}
		seen[addr] = true
		out.Holders = append(out.Holders, store.AddressHolder{Address: addr, Owner: o})
	}
	return nil
}
