// Package nodecred is the agent's side of node enrollment: it keeps the node
// credential the collector issued (in a file only root can read, replaced
// atomically), presents it in every Hello, and presents the fleet bootstrap
// token instead while the node has no credential the collector knows.
package nodecred

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// DefaultFile is where the credential is kept unless configured otherwise.
const DefaultFile = "/var/lib/nbs/node-credential"

// The collector's refusal of a name that is bound to nothing (see NodeAuth
// in nbs.proto).
const (
	reasonNotEnrolled = "NODE_NOT_ENROLLED"
	errorDomain       = "nbs.v1"
)

// maxSecret bounds what is read from the files: a credential is 49
// characters and a bootstrap token at most 512.
const maxSecret = 512

// Store holds the node's proof of identity.
type Store struct {
	file      string // "": the credential is kept in memory only
	bootstrap string
	log       *slog.Logger

	mu   sync.Mutex
	cred string
}

// Open reads the bootstrap token (if bootstrapFile is set) and the
// credential file (if it exists). With a bootstrap token it also checks
// that a credential can be saved, so an agent fails at start rather than
// after the collector has bound its name to a credential it cannot keep.
func Open(file, bootstrapFile string, log *slog.Logger) (*Store, error) {
	s := &Store{file: file, log: log}
	if bootstrapFile != "" {
		tok, err := readSecret(bootstrapFile)
		if err != nil {
			return nil, fmt.Errorf("bootstrap token: %w", err)
		}
		s.bootstrap = tok
	}
	if file == "" {
		return s, nil
	}
	cred, err := readSecret(file)
	switch {
	case err == nil:
		s.cred = cred
		if fi, err := os.Stat(file); err == nil && fi.Mode().Perm()&0o077 != 0 {
			log.Warn("the node credential file is readable by others; anyone who reads it can report as this node", "file", file, "mode", fi.Mode().Perm())
		}
	case errors.Is(err, os.ErrNotExist):
		if s.bootstrap != "" {
			if err := checkWritable(filepath.Dir(file)); err != nil {
				return nil, fmt.Errorf("node credential file %s cannot be written, so enrollment would be lost: %w", file, err)
			}
		}
	default:
		return nil, fmt.Errorf("node credential: %w", err)
	}
	return s, nil
}

func readSecret(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	v := strings.TrimSpace(string(b))
	if v == "" || len(v) > maxSecret || strings.ContainsAny(v, " \t\r\n") {
		return "", fmt.Errorf("%s: want one line of at most %d characters without spaces", file, maxSecret)
	}
	return v, nil
}

// checkWritable creates dir (0700) if needed and a file in it.
func checkWritable(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}

// HasCredential reports whether the node holds a credential.
func (s *Store) HasCredential() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cred != ""
}

// Proof is what the next Hello carries: the credential, else the bootstrap
// token, else nothing (a collector that does not enroll needs none).
func (s *Store) Proof() *nbsv1.NodeAuth {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.cred != "":
		return &nbsv1.NodeAuth{Proof: &nbsv1.NodeAuth_NodeCredential{NodeCredential: s.cred}}
	case s.bootstrap != "":
		return &nbsv1.NodeAuth{Proof: &nbsv1.NodeAuth_BootstrapToken{BootstrapToken: s.bootstrap}}
	}
	return nil
}

// Enrolled keeps the credential the collector just issued: in memory at
// once, and on disk. An error means it is kept in memory only, and the
// node must be re-enrolled by an operator after the agent restarts.
func (s *Store) Enrolled(cred string) error {
	if cred == "" || len(cred) > maxSecret || strings.ContainsAny(cred, " \t\r\n") {
		return fmt.Errorf("the collector sent a malformed node credential (%d bytes)", len(cred))
	}
	s.mu.Lock()
	s.cred = cred
	s.mu.Unlock()
	if s.file == "" {
		return errors.New("no --node.credential-file: the credential is kept in memory only")
	}
	if err := writeFileAtomic(s.file, []byte(cred+"\n")); err != nil {
		return fmt.Errorf("save node credential: %w", err)
	}
	return nil
}

// Refused takes the collector's refusal of a Hello. When the collector does
// not know the credential (an operator re-enrolled or deleted the node) and
// the node has a bootstrap token, the credential is dropped so the next
// Hello enrolls again; it returns true then, as retrying soon makes sense.
// The file is left alone until a new credential replaces it.
func (s *Store) Refused(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.PermissionDenied {
		return false
	}
	notEnrolled := false
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == reasonNotEnrolled && info.GetDomain() == errorDomain {
			notEnrolled = true
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !notEnrolled || s.cred == "" || s.bootstrap == "" {
		return false
	}
	s.cred = ""
	s.log.Warn("the collector does not know this node's credential; enrolling again with the bootstrap token")
	return true
}

// writeFileAtomic replaces file with data, readable by its owner only: the
// data goes to a temporary file in the same directory, is synced, and is
// renamed over the file, so a crash leaves the old file or the new one.
func writeFileAtomic(file string, data []byte) error {
	dir := filepath.Dir(file)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(file)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a successful rename there is nothing to remove
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, file); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
