package ingest

import (
	"context"
	"maps"

	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// Authenticator decides whether a stream may report under the node name its
// Hello gives. It runs before anything of the Hello is stored or the stream
// is registered, so a refused client changes nothing.
type Authenticator interface {
	// Authenticate returns a gRPC status error to refuse the stream; ctx
	// carries the stream's peer (address and TLS state).
	Authenticate(ctx context.Context, h *nbsv1.Hello) (Grant, error)
}

// SelfBounded is an Authenticator that bounds its own database use: it
// holds at most one connection however many Hellos it serves at once
// (nodeauth shares one read among the Hellos waiting). The server runs it
// without an authentication slot, so that the Hellos waiting reach it
// together instead of one at a time: one at a time, a read each, bounded
// a fleet's registration at about 300 Hellos a second (BENCHMARKS.md,
// "Fleet").
type SelfBounded interface {
	Authenticator
	BoundsItsConnections()
}

// Grant is what an accepted Hello was given.
type Grant struct {
	// Credential, when set, was bound to the node just now; it is sent to
	// the agent once, before anything else on the stream.
	Credential string
	// Bound are the labels bound to the node's name server-side (its
	// tenant among them): they replace what the Hello says for these keys.
	Bound map[string]string
	// Protected are label keys the Hello may not set at all: a key here
	// and not in Bound is removed. The tenant key is one wherever node
	// names are verified.
	Protected []string
}

// Apply makes labels what the grant allows: bound keys take their bound
// values, protected keys without one are removed. It returns the labels
// and what the Hello claimed for those keys where that differs (nil when
// nothing does): ignored, and shown on the node's page.
func (g Grant) Apply(hello map[string]string) (labels, claimed map[string]string) {
	labels = maps.Clone(hello)
	if labels == nil {
		labels = map[string]string{}
	}
	claim := func(k, said string) {
		if claimed == nil {
			claimed = map[string]string{}
		}
		claimed[k] = said
	}
	for k, want := range g.Bound {
		labels[k] = want
		if said, ok := hello[k]; ok && said != want {
			claim(k, said)
		}
	}
	for _, k := range g.Protected {
		if _, bound := g.Bound[k]; bound {
			continue
		}
		if said, ok := hello[k]; ok {
			delete(labels, k)
			claim(k, said)
		}
	}
	return labels, claimed
}

// OpenNames accepts every Hello: node names are not verified.
type OpenNames struct{}

func (OpenNames) Authenticate(context.Context, *nbsv1.Hello) (Grant, error) { return Grant{}, nil }
