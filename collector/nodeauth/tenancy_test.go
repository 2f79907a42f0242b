package nodeauth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/errkind"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/store/storetest"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// A tenant's bootstrap token enrolls new names into its tenant only, up to
// its limit and while it lives; the fleet token binds no tenant; an
// enrolled node's Hello never chooses its tenant; an operator's binding
// holds in every mode.
func TestTenantBootstrapTokens(t *testing.T) {
	ctx := access.WithPrincipal(context.Background(), access.CLIPrincipal())
	st := storetest.Open(t)
	log := slog.New(slog.DiscardHandler)
	auth, err := NewAuthenticator(st.Pool(), Options{Mode: ModeEnroll, BootstrapTokenFile: writeFile(t, "token", token+"\n")}, log)
	if err != nil {
		t.Fatal(err)
	}
	admin := NewAdmin(st, &fakeStreams{ended: map[string]codes.Code{}, online: map[string]bool{}}, ModeEnroll, "", log)
	acme, _, err := admin.CreateBootstrapToken(ctx, NewBootstrapToken{Name: "acme-fleet", Labels: map[string]string{"customer": "acme"}, MaxNodes: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		n    NewBootstrapToken
		want error
	}{
		{NewBootstrapToken{Name: "no-tenant", Labels: map[string]string{"rack": "r1"}}, ErrInvalidLabels},
		{NewBootstrapToken{Name: "bad name!", Labels: map[string]string{"customer": "x"}}, ErrInvalidLabels},
		{NewBootstrapToken{Name: "forever", Labels: map[string]string{"customer": "x"}, TTL: 10 * 365 * 24 * time.Hour}, ErrInvalidLabels},
		{NewBootstrapToken{Name: "negative", Labels: map[string]string{"customer": "x"}, MaxNodes: -1}, ErrInvalidLabels},
		{NewBootstrapToken{Name: "huge", Labels: map[string]string{"customer": "x"}, MaxNodes: 1<<24 + 1}, ErrInvalidLabels},
	} {
		if _, _, err := admin.CreateBootstrapToken(ctx, bad.n); !errors.Is(err, bad.want) {
			t.Errorf("create %+v: %v; want %v", bad.n, err, bad.want)
		}
	}
	if _, _, err := admin.CreateBootstrapToken(ctx, NewBootstrapToken{Name: "acme-fleet", Labels: map[string]string{"customer": "acme"}}); err == nil {
		t.Error("a second live token of the same name was created")
	}
	// Said nothing of its cap, a token gets the default one.
	if _, info, err := admin.CreateBootstrapToken(ctx, NewBootstrapToken{Name: "uncapped", Labels: map[string]string{"customer": "initech"}}); err != nil ||
		info.MaxNodes == nil || *info.MaxNodes != DefaultBootstrapMaxNodes {
		t.Errorf("a token created without a cap: %+v, %v; want max_nodes %d", info, err, DefaultBootstrapMaxNodes)
	}
	if ts, err := admin.ListBootstrapTokens(ctx); err != nil || !slices.ContainsFunc(ts, func(b BootstrapTokenInfo) bool {
		return b.Name == "uncapped" && b.MaxNodes != nil && *b.MaxNodes == DefaultBootstrapMaxNodes
	}) {
		t.Errorf("stored tokens %+v, %v; want uncapped with max_nodes %d", ts, err, DefaultBootstrapMaxNodes)
	}
	// Gone, so the listing below is of acme's tokens only.
	if _, err := st.Pool().Exec(ctx, `DELETE FROM node_bootstrap_tokens WHERE name = 'uncapped'`); err != nil {
		t.Fatal(err)
	}
	hello := func(node, claim string, a *nbsv1.NodeAuth) *nbsv1.Hello {
		h := helloWith(node, a)
		h.Labels = map[string]string{"customer": claim}
		return h
	}
	grantOf := func(step string, h *nbsv1.Hello) map[string]string {
		t.Helper()
		g, err := auth.Authenticate(ctx, h)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		labels, _ := g.Apply(h.Labels)
		return labels
	}
	if got := grantOf("acme's token, claiming globex", hello("a-1", "globex", withToken(acme))); got["customer"] != "acme" {
		t.Errorf("a node enrolled with acme's token has labels %v; want customer=acme", got)
	}
	if got := grantOf("the fleet token, claiming acme", hello("f-1", "acme", withToken(token))); got == nil || got["customer"] != "" {
		t.Errorf("a node enrolled with the fleet token has labels %v; want no customer", got)
	}
	grantOf("acme's second node", hello("a-2", "acme", withToken(acme)))
	_, err = auth.Authenticate(ctx, hello("a-3", "acme", withToken(acme)))
	refusal(t, "past the token's max nodes", err, "has enrolled as many nodes as it may", false)

	// A name an operator bound to globex is not acme's token's to take.
	if err := admin.Label(ctx, "g-1", map[string]string{"customer": "globex"}); err != nil {
		t.Fatal(err)
	}
	acme2, _, err := admin.CreateBootstrapToken(ctx, NewBootstrapToken{Name: "acme-more", Labels: map[string]string{"customer": "acme"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = auth.Authenticate(ctx, hello("g-1", "acme", withToken(acme2)))
	refusal(t, "acme's token on globex's name", err, "is bound to customer=globex", false)
	if got := grantOf("the fleet token on globex's name", hello("g-1", "acme", withToken(token))); got["customer"] != "globex" {
		t.Errorf("g-1 enrolled with the fleet token has labels %v; want its binding, customer=globex", got)
	}

	// Revoked and expired tokens enroll nothing.
	if err := admin.RevokeBootstrapToken(ctx, "acme-more"); err != nil {
		t.Fatal(err)
	}
	_, err = auth.Authenticate(ctx, hello("a-4", "acme", withToken(acme2)))
	refusal(t, "a revoked tenant token", err, "nor a live tenant token", false)
	if _, err := st.Pool().Exec(ctx, `UPDATE node_bootstrap_tokens SET expires_at = now() - interval '1 second' WHERE name = 'acme-fleet'`); err != nil {
		t.Fatal(err)
	}
	_, err = auth.Authenticate(ctx, hello("a-5", "acme", withToken(acme)))
	refusal(t, "an expired tenant token", err, "nor a live tenant token", false)

	// Under mode none names are not verified, so an unbound name's tenant
	// is its agent's word; an operator's binding still holds.
	none, err := NewAuthenticator(st.Pool(), Options{Mode: ModeNone}, log)
	if err != nil {
		t.Fatal(err)
	}
	for node, want := range map[string]string{"g-1": "globex", "free-1": "initech"} {
		h := hello(node, "initech", nil)
		g, err := none.Authenticate(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		if labels, _ := g.Apply(h.Labels); labels["customer"] != want {
			t.Errorf("mode none, %s claiming initech: customer=%s, want %s", node, labels["customer"], want)
		}
	}
	list, err := admin.ListBootstrapTokens(ctx)
	if err != nil || len(list) != 2 || list[0].Name != "acme-fleet" || list[0].Enrolled != 2 || list[1].RevokedAt == nil {
		t.Errorf("bootstrap token list: %+v, %v; want acme-fleet (2 enrolled) then the revoked acme-more", list, err)
	}
}

// Credentials and bindings of names that never registered a node expire;
// a revocation, and the credential of a node with data, stay.
func TestPruneUnused(t *testing.T) {
	ctx := access.WithPrincipal(context.Background(), access.CLIPrincipal())
	st := storetest.Open(t)
	admin := NewAdmin(st, nil, ModeEnroll, "", slog.New(slog.DiscardHandler))
	for _, n := range []string{"ghost-1", "ghost-2", "real-1"} {
		if _, err := admin.Enroll(ctx, n, false, map[string]string{"customer": "acme"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := admin.Revoke(ctx, "banned-1"); err != nil {
		t.Fatal(err)
	}
	// A reservation stays; a name enrolled or reported cannot be reserved.
	if err := admin.Reserve(ctx, "kept-1", map[string]string{"customer": "globex"}); err != nil {
		t.Fatal(err)
	}
	if err := admin.Reserve(ctx, "ghost-1", map[string]string{"customer": "globex"}); errkind.Of(err) != errkind.Conflict {
		t.Errorf("reserve an enrolled name: %v, want a conflict", err)
	}
	if err := admin.Reserve(ctx, "kept-2", map[string]string{"rack": "r1"}); !errors.Is(err, ErrInvalidLabels) {
		t.Errorf("reserve without a tenant: %v, want invalid labels", err)
	}
	if _, err := st.UpsertNode(ctx, store.Node{Name: "real-1", Tenant: "acme", Labels: map[string]string{"customer": "acme"}}); err != nil {
		t.Fatal(err)
	}
	if n, err := PruneUnused(ctx, st.Pool(), time.Now().Add(-time.Hour), 1); err != nil || n != 0 {
		t.Errorf("prune with a cutoff before they were made: %d, %v; want 0", n, err)
	}
	n, err := PruneUnused(ctx, st.Pool(), time.Now().Add(time.Minute), 1)
	if err != nil || n != 4 {
		t.Errorf("pruned %d, %v; want the 2 ghosts' credentials and bindings", n, err)
	}
	ids, err := admin.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, id := range ids {
		left = append(left, id.Node+":"+id.State)
	}
	if want := []string{"banned-1:revoked", "kept-1:not_enrolled", "real-1:enrolled"}; !slices.Equal(left, want) {
		t.Errorf("left %v; want %v", left, want)
	}
}

// What an admin may send is bounded: labels bound to a node are a few
// short label=value pairs, and the live tenant bootstrap tokens are at
// most MaxBootstrapTokens.
func TestTenancyLimits(t *testing.T) {
	ctx := access.WithPrincipal(context.Background(), access.CLIPrincipal())
	st := storetest.Open(t)
	admin := NewAdmin(st, nil, ModeEnroll, "", slog.New(slog.DiscardHandler))
	many := map[string]string{}
	for i := range 9 {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	for _, bad := range []map[string]string{
		many,
		{"customer": strings.Repeat("a", 257)},
		{"Customer": "acme"},
		{"customer": ""},
	} {
		if err := admin.Label(ctx, "n1", bad); !errors.Is(err, ErrInvalidLabels) {
			t.Errorf("label n1 with %.60v: %v; want ErrInvalidLabels", bad, err)
		}
	}
	if _, err := st.Pool().Exec(ctx, `INSERT INTO node_bootstrap_tokens (name, hash, labels, created_by, expires_at)
		SELECT 'bulk-' || i, sha256(('bulk-' || i)::bytea), '{"customer":"acme"}', 'test', now() + interval '1 day'
		FROM generate_series(1, $1) i`, MaxBootstrapTokens-1); err != nil {
		t.Fatal(err)
	}
	one := NewBootstrapToken{Name: "last", Labels: map[string]string{"customer": "acme"}}
	if _, _, err := admin.CreateBootstrapToken(ctx, one); err != nil {
		t.Fatalf("the %dth live token: %v", MaxBootstrapTokens, err)
	}
	one.Name = "one-too-many"
	if _, _, err := admin.CreateBootstrapToken(ctx, one); !errors.Is(err, ErrTooManyBootstrap) {
		t.Errorf("one past %d live tokens: %v; want ErrTooManyBootstrap", MaxBootstrapTokens, err)
	}
	if err := admin.RevokeBootstrapToken(ctx, "bulk-1"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := admin.CreateBootstrapToken(ctx, one); err != nil {
		t.Errorf("after a revocation: %v; want room for one", err)
	}
}
