package nodeauth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/store/storetest"
	"github.com/nbs-project/nbs/internal/pgcluster"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

func TestMain(m *testing.M) { pgcluster.Main(m) }

const token = "fleet-bootstrap-token-0123456789abcdef"

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func helloWith(node string, auth *nbsv1.NodeAuth) *nbsv1.Hello {
	return &nbsv1.Hello{NodeName: node, InstanceId: 1, IntervalMs: 1000, Auth: auth}
}

func withCredential(c string) *nbsv1.NodeAuth {
	return &nbsv1.NodeAuth{Proof: &nbsv1.NodeAuth_NodeCredential{NodeCredential: c}}
}

func withToken(t string) *nbsv1.NodeAuth {
	return &nbsv1.NodeAuth{Proof: &nbsv1.NodeAuth_BootstrapToken{BootstrapToken: t}}
}

// refusal checks an Authenticate result: want "" for accepted, else a
// fragment of the PermissionDenied message.
func refusal(t *testing.T, step string, err error, want string, notEnrolled bool) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Errorf("%s: refused: %v", step, err)
		}
		return
	}
	st, _ := status.FromError(err)
	if st.Code() != codes.PermissionDenied || !strings.Contains(st.Message(), want) {
		t.Errorf("%s: got %v; want PermissionDenied containing %q", step, err, want)
		return
	}
	got := false
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == ReasonNotEnrolled && info.GetDomain() == ErrorDomain {
			got = true
		}
	}
	if got != notEnrolled {
		t.Errorf("%s: NODE_NOT_ENROLLED detail %v, want %v", step, got, notEnrolled)
	}
}

type fakeStreams struct {
	mu     sync.Mutex
	ended  map[string]codes.Code
	online map[string]bool
}

func (f *fakeStreams) Connected(n string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.online[n]
}

func (f *fakeStreams) Disconnect(n string, cause error) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ended[n] = status.Code(cause)
	was := f.online[n]
	f.online[n] = false
	return was
}

// Enrollment from the first Hello to re-enrollment, as the collector sees
// it: the bootstrap token binds a free name once, only the credential opens
// it afterwards, and an operator's revoke, re-enroll, enroll and delete do
// what they say and end the node's stream.
func TestEnrollmentLifecycle(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	auth, err := NewAuthenticator(st.Pool(), Options{Mode: ModeEnroll, BootstrapTokenFile: writeFile(t, "token", token+"\n")}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	streams := &fakeStreams{ended: map[string]codes.Code{}, online: map[string]bool{}}
	admin := NewAdmin(st, streams, ModeEnroll, "", slog.New(slog.DiscardHandler))
	try := func(node string, a *nbsv1.NodeAuth) (string, error) {
		g, err := auth.Authenticate(ctx, helloWith(node, a))
		return g.Credential, err
	}

	_, err = try("web-1", nil)
	refusal(t, "no proof", err, "not enrolled and this Hello carries no bootstrap token", true)
	_, err = try("web-1", withToken(strings.Repeat("x", 40)))
	refusal(t, "wrong bootstrap token", err, "not this fleet's", false)
	_, err = try("web-1", withCredential("nbsn1_invented"))
	refusal(t, "unknown credential", err, "a node credential this collector does not know", true)

	cred, err := try("web-1", withToken(token))
	refusal(t, "bootstrap token", err, "", false)
	if _, perr := ParseCredential(cred); perr != nil {
		t.Fatalf("enrollment issued %q: %v", cred, perr)
	}
	_, err = try("web-1", withToken(token))
	refusal(t, "bootstrap token for an enrolled name", err, "a bootstrap token cannot take over an enrolled name", false)
	_, err = try("web-1", nil)
	refusal(t, "enrolled name without proof", err, "carries no node credential", false)
	other, _, _ := NewCredential()
	_, err = try("web-1", withCredential(other))
	refusal(t, "another credential", err, "enrolled with another node credential", false)
	_, err = try("web-1", withCredential(cred))
	refusal(t, "its credential", err, "", false)
	_, err = try("web-2", withCredential(cred))
	refusal(t, "its credential for another name", err, "does not know", true)

	streams.online["web-1"] = true
	if err := admin.Revoke(ctx, "web-1"); err != nil {
		t.Fatal(err)
	}
	if streams.ended["web-1"] != codes.PermissionDenied || streams.online["web-1"] {
		t.Errorf("revoke ended the stream with %v, want PermissionDenied", streams.ended["web-1"])
	}
	_, err = try("web-1", withCredential(cred))
	refusal(t, "credential after revoke", err, "was revoked by an operator", false)
	_, err = try("web-1", withToken(token))
	refusal(t, "bootstrap token after revoke", err, "was revoked by an operator", false)

	if ok, err := admin.Reenroll(ctx, "web-1"); !ok || err != nil {
		t.Fatalf("Reenroll = %v, %v", ok, err)
	}
	_, err = try("web-1", withCredential(cred))
	refusal(t, "old credential after re-enroll", err, "does not know", true)
	cred2, err := try("web-1", withToken(token))
	refusal(t, "bootstrap token after re-enroll", err, "", false)
	if cred2 == "" || cred2 == cred {
		t.Fatalf("re-enrollment issued %q, want a new credential", cred2)
	}

	if _, err := admin.Enroll(ctx, "web-1", false, nil); !errors.Is(err, ErrAlreadyEnrolled) {
		t.Errorf("operator enroll of an enrolled name without replace: %v, want ErrAlreadyEnrolled", err)
	}
	streams.online["web-1"] = true
	cred3, err := admin.Enroll(ctx, "web-1", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if streams.ended["web-1"] != codes.Aborted {
		t.Errorf("replacing the credential ended the stream with %v, want Aborted", streams.ended["web-1"])
	}
	_, err = try("web-1", withCredential(cred2))
	refusal(t, "credential replaced by an operator", err, "another node credential", false)
	_, err = try("web-1", withCredential(cred3))
	refusal(t, "operator-issued credential", err, "", false)
	if _, err := admin.Enroll(ctx, "bad name", false, nil); !errors.Is(err, ErrInvalidName) {
		t.Errorf("enroll of %q: %v, want ErrInvalidName", "bad name", err)
	}

	// Listing: enrolled, revoked, and nodes that reported without a binding.
	if _, err := st.UpsertNode(ctx, store.Node{Name: "web-1", InstanceID: 1, IntervalMS: 1000}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.UpsertNode(ctx, store.Node{Name: "open-1", InstanceID: 1, IntervalMS: 1000}); err != nil {
		t.Fatal(err)
	}
	if err := admin.Revoke(ctx, "gone-1"); err != nil {
		t.Fatal(err)
	}
	list, err := admin.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, n := range list {
		got[n.Node] = n.State + map[bool]string{true: "+data", false: ""}[n.HasData]
	}
	want := map[string]string{"web-1": "enrolled+data", "open-1": "not_enrolled+data", "gone-1": "revoked"}
	if len(got) != len(want) {
		t.Errorf("list %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("list: %s is %q, want %q", k, got[k], v)
		}
	}

	// Delete takes the data and the credential; a revocation stays.
	if err := admin.Delete(ctx, "web-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.NodeByName(ctx, "web-1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("node after delete: %v, want ErrNotFound", err)
	}
	_, err = try("web-1", withCredential(cred3))
	refusal(t, "credential after delete", err, "does not know", true)
	if err := admin.Delete(ctx, "web-1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second delete: %v, want ErrNotFound", err)
	}
	if err := admin.Delete(ctx, "gone-1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("delete of a revoked name without data: %v, want ErrNotFound", err)
	}
	_, err = try("gone-1", withToken(token))
	refusal(t, "revoked name after delete", err, "was revoked", false)
}

// Two streams enrolling one free name at once: exactly one gets it.
func TestConcurrentEnrollmentBindsOnce(t *testing.T) {
	st := storetest.Open(t)
	auth, err := NewAuthenticator(st.Pool(), Options{Mode: ModeEnroll, BootstrapTokenFile: writeFile(t, "token", token)}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	var wg sync.WaitGroup
	creds := make([]string, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			g, err := auth.Authenticate(context.Background(), helloWith("race-1", withToken(token)))
			creds[i], errs[i] = g.Credential, err
		})
	}
	wg.Wait()
	won := 0
	for i := range n {
		if errs[i] == nil && creds[i] != "" {
			won++
		} else if status.Code(errs[i]) != codes.PermissionDenied {
			t.Errorf("loser %d: %v, want PermissionDenied", i, errs[i])
		}
	}
	if won != 1 {
		t.Errorf("%d streams enrolled the name, want 1", won)
	}
}

func tlsPeer(ctx context.Context, cert *x509.Certificate) context.Context {
	info := credentials.TLSInfo{State: tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{cert}}}}
	return peer.NewContext(ctx, &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4242}, AuthInfo: info})
}

// Under mutual TLS the certificate names the node; the identity map, read
// again when it changes, lets an identity claim other names; a revocation
// shuts out even a valid certificate.
func TestMutualTLSNames(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	mapFile := writeFile(t, "idmap", "gw.example.net edge-*\n")
	auth, err := NewAuthenticator(st.Pool(), Options{Mode: ModeMTLS, IdentityMapFile: mapFile}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	nodeA := &x509.Certificate{Subject: pkix.Name{CommonName: "ignored-cn"}, DNSNames: []string{"node-a"}}
	cnOnly := &x509.Certificate{Subject: pkix.Name{CommonName: "node-c"}}
	gw := &x509.Certificate{DNSNames: []string{"gw.example.net"}}
	cases := []struct {
		name string
		ctx  context.Context
		node string
		want string
	}{
		{"its DNS name", tlsPeer(ctx, nodeA), "node-a", ""},
		{"the CN when there is a DNS name", tlsPeer(ctx, nodeA), "ignored-cn", `the client certificate is for "node-a", which may not report as "ignored-cn"`},
		{"another node's name", tlsPeer(ctx, nodeA), "node-b", `the client certificate is for "node-a", which may not report as "node-b"`},
		{"its CN without DNS names", tlsPeer(ctx, cnOnly), "node-c", ""},
		{"a mapped name", tlsPeer(ctx, gw), "edge-7", ""},
		{"an unmapped name", tlsPeer(ctx, gw), "node-a", "may not report as"},
		{"no certificate", ctx, "node-a", "no verified client certificate"},
	}
	for _, c := range cases {
		_, err := auth.Authenticate(c.ctx, helloWith(c.node, nil))
		refusal(t, c.name, err, c.want, false)
	}

	// The map changes without a restart.
	if err := os.WriteFile(mapFile+".new", []byte("gw.example.net node-a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mt := time.Now().Add(time.Minute)
	if err := os.Chtimes(mapFile+".new", mt, mt); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(mapFile+".new", mapFile); err != nil {
		t.Fatal(err)
	}
	_, err = auth.Authenticate(tlsPeer(ctx, gw), helloWith("node-a", nil))
	refusal(t, "newly mapped name", err, "", false)
	_, err = auth.Authenticate(tlsPeer(ctx, gw), helloWith("edge-7", nil))
	refusal(t, "name no longer mapped", err, "may not report as", false)

	admin := NewAdmin(st, nil, ModeMTLS, "", slog.New(slog.DiscardHandler))
	if err := admin.Revoke(ctx, "node-a"); err != nil {
		t.Fatal(err)
	}
	_, err = auth.Authenticate(tlsPeer(ctx, nodeA), helloWith("node-a", nil))
	refusal(t, "revoked name with its certificate", err, "was revoked", false)
}

// With names not verified everything is accepted, except a revoked name.
func TestOpenModeHonoursRevocation(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	auth, err := NewAuthenticator(st.Pool(), Options{Mode: ModeNone}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	_, err = auth.Authenticate(ctx, helloWith("any-1", nil))
	refusal(t, "open mode", err, "", false)
	if err := NewAdmin(st, nil, ModeNone, "", slog.New(slog.DiscardHandler)).Revoke(ctx, "any-1"); err != nil {
		t.Fatal(err)
	}
	_, err = auth.Authenticate(ctx, helloWith("any-1", nil))
	refusal(t, "open mode, revoked", err, "was revoked", false)
}

func TestAuthenticatorFileErrors(t *testing.T) {
	st := storetest.Open(t)
	dir := t.TempDir()
	cases := []struct {
		opts Options
		want string
	}{
		{Options{Mode: ModeEnroll, BootstrapTokenFile: filepath.Join(dir, "none")}, "read bootstrap token"},
		{Options{Mode: ModeEnroll, BootstrapTokenFile: writeFile(t, "short", "abc")}, "is 3 characters"},
		{Options{Mode: ModeMTLS, IdentityMapFile: writeFile(t, "map", "lonely\n")}, "names no node"},
	}
	for _, c := range cases {
		if _, err := NewAuthenticator(st.Pool(), c.opts, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error containing %q", c.opts, err, c.want)
		}
	}
	if _, err := ParseMode("tofu"); err == nil {
		t.Error("ParseMode accepted tofu")
	}
}
