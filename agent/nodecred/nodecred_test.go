package nodecred

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

var quiet = slog.New(slog.DiscardHandler)

func proof(s *Store) string {
	switch p := s.Proof().GetProof().(type) {
	case *nbsv1.NodeAuth_NodeCredential:
		return "credential " + p.NodeCredential
	case *nbsv1.NodeAuth_BootstrapToken:
		return "token " + p.BootstrapToken
	}
	return "nothing"
}

func notEnrolled(t *testing.T) error {
	t.Helper()
	st, err := status.New(codes.PermissionDenied, "not enrolled").WithDetails(&errdetails.ErrorInfo{Reason: reasonNotEnrolled, Domain: errorDomain})
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

// From a fresh node to an enrolled one: the bootstrap token until the
// collector issues a credential, the credential (saved 0600, atomically)
// from then on and after a restart, and the token again once the collector
// says it no longer knows the credential.
func TestCredentialLifecycle(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("the-fleet-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	credFile := filepath.Join(dir, "state", "nbs", "node-credential") // created on demand
	s, err := Open(credFile, tokenFile, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if got := proof(s); got != "token the-fleet-token" {
		t.Fatalf("fresh node presents %q, want the bootstrap token", got)
	}
	if err := s.Enrolled("nbsn1_first"); err != nil {
		t.Fatal(err)
	}
	if got := proof(s); got != "credential nbsn1_first" {
		t.Errorf("after enrollment presents %q", got)
	}
	fi, err := os.Stat(credFile)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("credential file mode %v, want 0600", fi.Mode().Perm())
	}
	if d, _ := os.Stat(filepath.Dir(credFile)); d.Mode().Perm() != 0o700 {
		t.Errorf("credential directory mode %v, want 0700", d.Mode().Perm())
	}
	if err := s.Enrolled("nbsn1_second"); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Dir(credFile))
	if len(entries) != 1 {
		t.Errorf("credential directory holds %d files, want only the credential (no temporary files left)", len(entries))
	}

	// A restart reads the saved credential.
	s, err = Open(credFile, tokenFile, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if got := proof(s); got != "credential nbsn1_second" {
		t.Errorf("after a restart presents %q", got)
	}
	// Other refusals keep the credential: retrying is an operator's call.
	if s.Refused(status.Error(codes.PermissionDenied, "revoked")) || s.Refused(errors.New("eof")) || !s.HasCredential() {
		t.Error("a refusal other than NODE_NOT_ENROLLED dropped the credential")
	}
	if !s.Refused(notEnrolled(t)) {
		t.Error("NODE_NOT_ENROLLED with a bootstrap token does not ask for a quick retry")
	}
	if got := proof(s); got != "token the-fleet-token" {
		t.Errorf("after NODE_NOT_ENROLLED presents %q, want the bootstrap token", got)
	}
	if b, _ := os.ReadFile(credFile); string(b) != "nbsn1_second\n" {
		t.Errorf("the file was changed before a new credential arrived: %q", b)
	}

	// Without a bootstrap token there is nothing to fall back on.
	s, err = Open(credFile, "", quiet)
	if err != nil {
		t.Fatal(err)
	}
	if s.Refused(notEnrolled(t)) || proof(s) != "credential nbsn1_second" {
		t.Errorf("without a token NODE_NOT_ENROLLED dropped the credential: %q", proof(s))
	}
	// Without files at all, nothing is presented (open collectors).
	if s, err := Open("", "", quiet); err != nil || proof(s) != "nothing" {
		t.Errorf("no files: %q, %v", proof(s), err)
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	token := write("token", "tok")
	cases := []struct {
		name, cred, token, want string
	}{
		{"missing token file", filepath.Join(dir, "c1"), filepath.Join(dir, "none"), "bootstrap token"},
		{"empty token", filepath.Join(dir, "c2"), write("empty", "\n"), "want one line"},
		{"credential with spaces", write("spaced", "a b"), token, "want one line"},
		{"credential is a directory", dir, token, "node credential"},
		{"a file in the way", filepath.Join(write("file", "x"), "cred"), "", "not a directory"},
		// Root may write anywhere, so a read-only directory would not stop
		// the tests; nobody creates directories in /proc.
		{"directory cannot be created", "/proc/nbs-nodecred-test/node-credential", token, "cannot be written"},
	}
	for _, c := range cases {
		if _, err := Open(c.cred, c.token, quiet); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
	// Without a token an unwritable place is fine: nothing will be written.
	if _, err := Open("/proc/nbs-nodecred-test/node-credential", "", quiet); err != nil {
		t.Errorf("no token, unwritable credential path: %v", err)
	}
	s, err := Open("", token, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Enrolled("nbsn1_x"); err == nil || proof(s) != "credential nbsn1_x" {
		t.Errorf("without a file: Enrolled = %v and presents %q; want an error and the credential in memory", err, proof(s))
	}
	if err := s.Enrolled("two words"); err == nil {
		t.Error("a malformed credential from the collector was accepted")
	}
}
