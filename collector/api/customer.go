package api

import (
	"context"
	"regexp"
	"strings"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/internal/schema"
)

// What a customer token sees of its nodes is what its workloads did, not how
// the operator runs the agent: the agent's own branch (its CPU, backlog and
// BPF programs), owner children of processes and bare namespaces that are
// not the customer's pods or containers, the PIDs and commands in evidence,
// and the agent's command-line flags in descriptions are staff's. They are
// removed here, server-side, so no customer client can ask for them; the UI
// only follows.

// staff reports whether the caller sees operator internals.
func staff(ctx context.Context) bool {
	p := access.FromContext(ctx)
	return p.Role != access.RoleCustomer
}

// customerHidden reports whether a metric is staff's only.
func customerHidden(path string) bool {
	if schema.Root(path) == agentRoot {
		return true
	}
	for _, seg := range strings.Split(path, "/") {
		if strings.HasPrefix(seg, "process:") || strings.HasPrefix(seg, "inode:") {
			return true
		}
	}
	return false
}

// flagSentence is a sentence that names a command-line flag (--spool.dir).
var flagSentence = regexp.MustCompile(`[^.]*--[a-z][a-z0-9.-]*[^.]*\.\s*`)

// customerText drops the sentences of a description that name the agent's
// or the collector's flags.
func customerText(s string) string {
	return strings.TrimSpace(flagSentence.ReplaceAllString(s, ""))
}

// customerRoots is a tree as a customer sees it.
func customerRoots(nodes []*TreeNode) []*TreeNode {
	out := make([]*TreeNode, 0, len(nodes))
	for _, n := range nodes {
		if customerHidden(n.ID) {
			continue
		}
		n.Description = customerText(n.Description)
		if n.Children != nil {
			n.Children = customerRoots(n.Children)
		}
		out = append(out, n)
	}
	return out
}

// staffFields are evidence fields that name processes and namespaces on
// the node rather than the customer's workloads.
var staffFields = []string{"pid", "comm", "netns"}

// customerEvidence strips staff fields from an event's fields (a copy).
func customerEvidence(f map[string]string) map[string]string {
	out := make(map[string]string, len(f))
	for k, v := range f {
		out[k] = v
	}
	for _, k := range staffFields {
		delete(out, k)
	}
	if out["owner_kind"] == "process" {
		for _, k := range []string{"owner", "owner_kind", "owner_id"} {
			delete(out, k)
		}
	}
	return out
}
