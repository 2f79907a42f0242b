// Package tenant is the collector's one notion of whose a node is. A tenant
// is the value of one label key, chosen by the operator (--tenant.label,
// default "customer"). Customer tokens must select on it, the ping mesh
// and counterparts never cross it, and reports and alerts follow it. Its
// value for a node is bound server-side (collector/nodeauth), never taken
// from a Hello once node names are verified.
package tenant

import (
	"flag"
	"fmt"

	"github.com/nbs-project/nbs/internal/schema"
)

// DefaultKey is the tenant label key a collector uses unless told
// otherwise; it was the only one before the key became configurable.
const DefaultKey = "customer"

// Key is the label key whose value names a node's tenant.
type Key string

// Of is the tenant of a node with these labels: "" for none (staff only).
func (k Key) Of(labels map[string]string) string { return labels[string(k)] }

// String is the label key.
func (k Key) String() string { return string(k) }

// Validate checks the key is a label key.
func (k Key) Validate() error {
	if err := schema.CheckLabelKey(string(k)); err != nil {
		return fmt.Errorf("--tenant.label %q: %w", string(k), err)
	}
	return nil
}

// RegisterFlag binds the key to --tenant.label with its current value as
// the default.
func (k *Key) RegisterFlag(fs *flag.FlagSet) {
	fs.Func("tenant.label", fmt.Sprintf("the node label whose value is a node's tenant: customer tokens must select on it, the ping mesh, counterparts, reports and alerts never cross it, and its value is bound by the operator (bootstrap token, nodes label, certificate), not the agent (default %q)", DefaultKey),
		func(s string) error {
			if err := schema.CheckLabelKey(s); err != nil {
				return err
			}
			*k = Key(s)
			return nil
		})
}

// NamedBy reports whether a selector (label key to value) names a tenant:
// a customer's scope must, so that no agent-chosen label can widen it.
func (k Key) NamedBy(selector map[string]string) bool {
	v, ok := selector[string(k)]
	return ok && v != ""
}
