package api

import (
	"context"
	"regexp"
	"strings"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/schema"
)

// What a customer token sees of its nodes is what its workloads did, not how
// the operator runs the agent. Staff's are: the agent's own branch (its CPU,
// backlog and BPF programs) and every alert, threshold, incident and series
// of it; owner children of processes and of network namespaces (named by
// `ip netns` or bare inodes), which are not the customer's pods or
// containers; the PIDs, commands and namespace names and inodes in evidence;
// the agent's command-line flags in descriptions; and why a capability is
// missing, in the words an operator needs (host paths, kernel capabilities,
// flags) rather than what the customer loses.
//
// This file is the one place those rules live. Each answer that can carry
// any of it passes through View, keyed on the caller's principal: the node
// routes here, and the alert, threshold and report routes (collector/alert,
// collector/nodeconfig, collector/report) through the exported methods.
// They are applied server-side, so no customer client can ask for them; the
// UI only follows. TestCustomerSeesNoMachinery (collector/app) calls every
// route of the table as a customer and looks for each.

// View is what one caller is shown of the operator's machinery.
type View struct {
	customer bool
}

// ViewOf is the view of the caller in ctx: a customer's for a customer
// principal, everything for anyone else (staff; the routes a customer
// cannot call are the others').
func ViewOf(ctx context.Context) View { return ViewFor(access.FromContext(ctx)) }

// ViewFor is the view of principal p.
func ViewFor(p access.Principal) View { return View{customer: p.Role == access.RoleCustomer} }

// Staff reports whether the view shows operator internals.
func (v View) Staff() bool { return !v.customer }

// staff reports whether the caller sees operator internals.
func staff(ctx context.Context) bool { return ViewOf(ctx).Staff() }

// staffSegments are the prefixes of owner segments (agent/owner.Owner.ID)
// that name the node's processes and network namespaces.
var staffSegments = []string{"process:", "inode:", "netns:"}

// StaffMetric reports whether a metric is staff's only: the agent's root
// and anything under it, and owner children of processes and namespaces.
func StaffMetric(path string) bool {
	if schema.Root(path) == agentRoot {
		return true
	}
	for _, seg := range strings.Split(path, "/") {
		for _, p := range staffSegments {
			if strings.HasPrefix(seg, p) {
				return true
			}
		}
	}
	return false
}

// StaffMetricSQL is StaffMetric as a boolean SQL expression on a text
// column holding a metric path (TestStaffMetricSQL holds the two equal).
func StaffMetricSQL(column string) string {
	return `(` + column + ` = '` + agentRoot + `' OR ` + column + ` LIKE '` + agentRoot + `/%' OR ` +
		column + ` ~ '(^|/)(` + strings.Join(trimColons(staffSegments), "|") + `):')`
}

func trimColons(ps []string) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = strings.TrimSuffix(p, ":")
	}
	return out
}

// Metric reports whether the caller sees a metric.
func (v View) Metric(path string) bool { return !v.customer || !StaffMetric(path) }

// Shown is path or, when the caller may not see it, its nearest ancestor
// it may ("" for none): what an alert explained by a process's owner child
// names to a customer instead.
func (v View) Shown(path string) string {
	for p := path; p != ""; p = schema.Parent(p) {
		if v.Metric(p) {
			return p
		}
	}
	return ""
}

// MetricFilter is an SQL condition to AND into a query's WHERE so that the
// caller sees only its metrics in column: "" for staff. Paged lists and
// their totals must filter in SQL, or a page and its counts would disagree.
func (v View) MetricFilter(column string) string {
	if !v.customer {
		return ""
	}
	return ` AND NOT ` + StaffMetricSQL(column)
}

// flagSentence is a sentence that names a command-line flag (--spool.dir).
var flagSentence = regexp.MustCompile(`[^.]*--[a-z][a-z0-9.-]*[^.]*\.\s*`)

// Text is a description as the caller sees it: to a customer, without the
// sentences that name the agent's or the collector's flags.
func (v View) Text(s string) string {
	if !v.customer {
		return s
	}
	return strings.TrimSpace(flagSentence.ReplaceAllString(s, ""))
}

// Roots is a tree as the caller sees it (in place).
func (v View) Roots(nodes []*TreeNode) []*TreeNode {
	if !v.customer {
		return nodes
	}
	out := make([]*TreeNode, 0, len(nodes))
	for _, n := range nodes {
		if StaffMetric(n.ID) {
			continue
		}
		n.Description = v.Text(n.Description)
		if n.Children != nil {
			n.Children = v.Roots(n.Children)
		}
		out = append(out, n)
	}
	return out
}

// customerCapability is what a customer is told of a missing capability:
// a topic in its words (shown as "pod names unavailable") and what it
// loses, never why (a host path, a kernel capability, a flag), which is
// the operator's to fix.
type customerCapability struct {
	topic, loses string
}

// customerCapabilities maps the agent's capability names (agent/source/…,
// agent/app) to what a customer is told when one is missing; "" is a
// capability a customer is not told of at all (how the agent keeps its
// own counters). A name not here is told as otherCapability.
var customerCapabilities = map[string]customerCapability{
	"owner.oci_bundles":       {"pod_names", "Traffic is attributed to pods by hostname and service account only, without container names."},
	"ping.icmp":               {"ping", "This node sends no pings: round-trip time and loss from it to its peers are not measured."},
	"bpf.tcp_reset":           {"reset_reasons", "Resets are counted, but without their reasons or the connections they ended."},
	"proc.tcp_reset":          {"resets", "Resets are not counted on this node."},
	"bpf.drops":               {"drop_reasons", "Drops are counted by kind, but without their reasons or the flows they hit."},
	"proc.drops":              {"drops", "Drops are not counted on this node."},
	"bpf.latency.retransmits": {"retransmit_detail", "Retransmits and timeouts are counted, but without the connections they hit."},
	"proc.latency":            {"tcp_counters", "Some TCP counters (lost retransmits, listen queue, socket memory) are not read on this node."},
	"bpf.latency.tx":          {"send_latency", "Where time goes as data is sent (queueing, driver, acknowledgement) is not measured on this node."},
	"bpf.latency.rx":          {"receive_latency", "Where time goes as data is received is not measured on this node."},
	"bpf.latency.qdisc":       {"queueing_latency", "Time spent in the send queue is not measured on this node."},
	"bpf.latency.sizes":       {"packet_sizes", "Packet sizes per device, which show whether segmentation and receive offloads work, are not measured on this node."},
	"bpf.latency.ecn":         {"congestion_mark_peers", "Congestion marks are counted, but not by device or by the peer that sent them."},
	"bpf.latency.flows":       {"slow_flows", "The slowest connections are not listed on this node."},
	"bpf.dns":                 {"dns", "Name resolution (DNS queries, their latency, errors and timeouts) is not measured on this node."},
	"spool":                   {"buffering", "Measurements made while this node cannot reach the collector may be lost if the agent restarts."},
	"bpf.pinning":             {},
	"bpf.stats":               {},
}

// otherCapability is what a customer is told of a missing capability the
// table does not know (an agent newer than this collector).
var otherCapability = customerCapability{"measurements", "Some measurements are not made on this node."}

// Capabilities is a node's capabilities as the caller sees them: to a
// customer, only the missing ones it is told of, each once per topic, with
// what it loses as the reason.
func (v View) Capabilities(cs []store.Capability) []store.Capability {
	if !v.customer {
		return cs
	}
	out := []store.Capability{}
	seen := map[string]bool{}
	for _, c := range cs {
		if c.Available {
			continue
		}
		cc, known := customerCapabilities[c.Name]
		if !known {
			cc = otherCapability
		}
		if cc.topic == "" || seen[cc.topic] {
			continue
		}
		seen[cc.topic] = true
		out = append(out, store.Capability{Name: cc.topic, Available: false, Reason: cc.loses})
	}
	return out
}

// staffFields are evidence fields that name processes and network
// namespaces on the node (agent/owner.Owner.Fields) and the owner's id
// segment, rather than the customer's workloads.
var staffFields = []string{"pid", "comm", "netns", "netns_name", "owner_id"}

// staffOwnerKinds are owner kinds whose name is a process or a namespace
// (agent/owner: process, netns, and unknown, named by inode).
var staffOwnerKinds = []string{"process", "netns", "unknown"}

// Fields is an evidence event's fields as the caller sees them (a copy for
// a customer).
func (v View) Fields(f map[string]string) map[string]string {
	if !v.customer {
		return f
	}
	out := make(map[string]string, len(f))
	for k, val := range f {
		out[k] = val
	}
	for _, k := range staffFields {
		delete(out, k)
	}
	for _, kind := range staffOwnerKinds {
		if out["owner_kind"] == kind {
			delete(out, "owner")
			delete(out, "owner_kind")
		}
	}
	return out
}
