package flows

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/store"
)

// at is the reference for holderIndex.best and ambiguous: the holders of
// address in tenant whose spans overlap [from, to), the longest overlap
// first (ties: the newest span), sorted.
func (idx holderIndex) at(tenant, address string, from, to time.Time) []store.FlowHolder {
	var out []store.FlowHolder
	for _, h := range idx.spans(tenant, address) {
		if h.First.Before(to) && h.Last.After(from) {
			out = append(out, h)
		}
	}
	overlap := func(h store.FlowHolder) time.Duration {
		return minTime(h.Last, to).Sub(maxTime(h.First, from))
	}
	slices.SortStableFunc(out, func(a, b store.FlowHolder) int {
		if oa, ob := overlap(a), overlap(b); oa != ob {
			return cmp.Compare(ob, oa)
		}
		return b.First.Compare(a.First)
	})
	return out
}

// distinctHolders counts the owners among hs, up to 2.
func distinctHolders(hs []store.FlowHolder) int {
	for _, h := range hs[min(1, len(hs)):] {
		if h.NodeID != hs[0].NodeID || h.Owner.ID != hs[0].Owner.ID {
			return 2
		}
	}
	return len(hs[:min(1, len(hs))])
}

// TestHolderIndexAgreesWithSort: best and ambiguous, which a map's first
// read calls per row without sorting, answer as the sorted list of
// overlapping spans does, over random spans with many ties.
func TestHolderIndexAgreesWithSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	minute := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Minute) }
	for trial := range 2000 {
		var hs []store.FlowHolder
		for i := range rng.IntN(6) {
			a := rng.IntN(8)
			hs = append(hs, store.FlowHolder{NodeID: int32(rng.IntN(2)), Tenant: "t", Address: "10.0.0.1",
				Owner: store.FlowOwner{ID: fmt.Sprintf("pod:%d", rng.IntN(3)), Name: fmt.Sprint(i)}, First: minute(a), Last: minute(a + rng.IntN(6))})
		}
		idx := newHolderIndex(hs)
		from := rng.IntN(8)
		lo, hi := minute(from), minute(from+1+rng.IntN(4))
		ref := idx.at("t", "10.0.0.1", lo, hi)
		got, ok := idx.best("t", "10.0.0.1", lo, hi)
		if ok != (len(ref) > 0) || ok && got != ref[0] {
			t.Fatalf("trial %d: best = %+v %v, the sorted list's first %+v (of %d)", trial, got, ok, ref, len(ref))
		}
		if amb := idx.ambiguous("t", "10.0.0.1", lo, hi); amb != (distinctHolders(ref) > 1) {
			t.Fatalf("trial %d: ambiguous = %v, the sorted list has %d owners: %+v", trial, amb, distinctHolders(ref), ref)
		}
		if _, ok := idx.best("u", "10.0.0.1", lo, hi); ok || idx.ambiguous("u", "10.0.0.1", lo, hi) {
			t.Fatalf("trial %d: another tenant's holder answered", trial)
		}
	}
}

// TestEdgeKeyIsJSON: the keys written without encoding/json are its bytes,
// whatever the names hold.
func TestEdgeKeyIsJSON(t *testing.T) {
	for _, c := range []struct {
		client, server, tenant string
		port                   uint16
	}{
		{"o:n1|pod:shop.cart-1", "a:10.0.0.2", "acme", 5432},
		{"a:2001:db8::1", "o:n2|host", "", 0},
		{"o:n1|pod:a\"b", "a:10.0.0.2", "acme", 80},
		{"o:n1|pod:<script>", "a:10.0.0.2", "acme", 65535},
		{"o:n1|pod:a&b", "a:10.0.0.2", "acme", 8080},
		{"o:n1|process:späti", "a:10.0.0.2", "t\\x", 1},
		{"o:n1|x\x01y", "a:\x7f", "acme\u2028", 443},
	} {
		want, err := json.Marshal([]any{c.client, c.server, c.port, c.tenant})
		if err != nil {
			t.Fatal(err)
		}
		got, err := base64.RawURLEncoding.DecodeString(edgeKey(c.client, c.server, c.port, c.tenant))
		if err != nil || string(got) != string(want) {
			t.Errorf("edgeKey(%q, %q, %d, %q) holds %s (%v), json.Marshal %s", c.client, c.server, c.port, c.tenant, got, err, want)
		}
	}
}

// An edge is its ends, port and tenant: a node that moved to another
// tenant keeps its name, so its owner's edges before and after the move
// are two edges (staff see both), and each half sums its own rows.
func TestEdgesOfTwoTenantsApart(t *testing.T) {
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	owner := store.FlowOwner{ID: "pod:shop.cart-1", Kind: "pod", Name: "shop/cart-1"}
	row := func(tenant, peer string, opened uint64) store.FlowEdgeRow {
		return store.FlowEdgeRow{NodeID: 1, Tenant: tenant, First: at, End: at.Add(time.Minute), FlowEdge: store.FlowEdge{
			Local: owner, Role: store.FlowClient, LocalAddr: "10.0.0.1", PeerAddr: peer, PeerPort: 443,
			FlowCounters: store.FlowCounters{Opened: opened}}}
	}
	g := Build(Input{Nodes: map[int32]store.FlowNode{1: {ID: 1, Name: "n1", Tenant: "beta"}}, Res: time.Minute, From: at, To: at.Add(time.Minute),
		Rows: store.FlowRows{{row("acme", "1.2.3.4", 1), row("beta", "1.2.3.4", 2), row("acme", "1.2.3.5", 4)}, {row("beta", "1.2.3.4", 8)}}})
	got := map[string]uint64{}
	for _, e := range g.Edges {
		client, server, _, err := parseKey(e.Key)
		if err != nil {
			t.Fatal(err)
		}
		got[fmt.Sprintf("%s %s %s", edgeTenant(t, e.Key), client, server)] = e.Opened
	}
	want := map[string]uint64{"acme o:n1|pod:shop.cart-1 a:1.2.3.4": 1, "beta o:n1|pod:shop.cart-1 a:1.2.3.4": 10, "acme o:n1|pod:shop.cart-1 a:1.2.3.5": 4}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("edges %v, want %v", got, want)
	}
}

// edgeTenant is the tenant an edge key names.
func edgeTenant(t *testing.T, key string) string {
	b, err := base64.RawURLEncoding.DecodeString(key)
	var v []any
	if err != nil || json.Unmarshal(b, &v) != nil || len(v) != 4 {
		t.Fatalf("key %q is not an edge key", key)
	}
	s, _ := v[3].(string)
	return s
}
