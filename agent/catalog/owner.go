package catalog

import (
	"fmt"
	"strings"
)

// maxTitle is the longest title the collector takes.
const maxTitle = 256

// OwnerOther is the id segment of the child that counts every namespace
// owner without a child of its own. Owner ids always carry a kind prefix
// ("pod:", "netns:") or are "host", so none is "other".
const OwnerOther = "other"

// DefaultTopOwners is how many owners a per-namespace counter shows as
// children of its own when the agent's flag leaves it 0.
const DefaultTopOwners = 5

const ownerHow = "Owners are resolved by the agent from /proc and cgroup v2: the Kubernetes pod (namespace/name), " +
	"else the container runtime's container, else the `ip netns` name, else the process holding the namespace " +
	"(comm and lowest pid), else the namespace inode."

// OwnerChild is the child of a per-namespace counter (a reset or drop
// reason) for one owner of network namespaces: id is the owner's metric
// segment, label how it reads ("pod shop/cart-7d9f").
func OwnerChild(parent Metric, id, label string, top int) Metric {
	title := parent.Title + " in " + label
	if len(title) > maxTitle { // a long pod name; the description has it whole
		title = strings.ToValidUTF8(title[:maxTitle-3], "") + "..."
	}
	return Metric{ID: parent.ID + "/" + id, Title: title, Unit: parent.Unit, Kind: parent.Kind,
		Description: fmt.Sprintf("The part of %s counted in the network namespace of %s: one of the %d owners with "+
			"most of it recently on this node (the rest are in %s/%s). An owner keeps its child while it stays "+
			"active, so its series is continuous; the children and %s add up to the parent exactly. %s The "+
			"parent's evidence names the owner of each event (fields owner, owner_kind, pod, container; owner_id is the child's id segment, so the child lists its events).",
			parent.ID, label, top, parent.ID, OwnerOther, OwnerOther, ownerHow)}
}

// OwnerOtherChild counts what no owner child of parent does: owners beyond
// the top ones, and counts the kernel could not split by namespace.
func OwnerOtherChild(parent Metric, top int) Metric {
	return Metric{ID: parent.ID + "/" + OwnerOther, Title: parent.Title + " in other namespaces", Unit: parent.Unit,
		Kind: parent.Kind,
		Description: fmt.Sprintf("The part of %s not shown under an owner of its own: namespaces beyond the %d most "+
			"active owners, and counts the kernel could not attribute to a namespace. With the owner children it "+
			"adds up to the parent exactly. %s", parent.ID, top, ownerHow)}
}
