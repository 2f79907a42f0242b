package nodeauth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
)

// A node credential is "nbsn1_" and 256 random bits in unpadded base64url:
// the prefix lets secret scanners and people recognise one, the version
// digit leaves room for another format. The collector stores only the
// SHA-256 of the random bits: with that much entropy a plain hash cannot be
// reversed, and verifying needs no tunable work factor.
const (
	credentialPrefix = "nbsn1_"
	secretBytes      = 32
	credentialLen    = len(credentialPrefix) + 43 // base64url of 32 bytes, unpadded
)

// ErrMalformedCredential says a string cannot be a node credential at all.
var ErrMalformedCredential = errors.New("not a node credential")

// NewCredential returns a fresh node credential and the hash to store.
func NewCredential() (cred string, hash []byte, err error) {
	secret := make([]byte, secretBytes)
	if _, err := rand.Read(secret); err != nil {
		return "", nil, fmt.Errorf("random node credential: %w", err)
	}
	return credentialPrefix + base64.RawURLEncoding.EncodeToString(secret), hashSecret(secret), nil
}

// ParseCredential checks a credential's form and returns its secret.
func ParseCredential(s string) ([]byte, error) {
	if len(s) != credentialLen || !strings.HasPrefix(s, credentialPrefix) {
		return nil, fmt.Errorf("%w: want %q followed by 43 base64url characters", ErrMalformedCredential, credentialPrefix)
	}
	secret, err := base64.RawURLEncoding.Strict().DecodeString(s[len(credentialPrefix):])
	if err != nil || len(secret) != secretBytes {
		return nil, fmt.Errorf("%w: the part after %q is not 32 bytes of base64url", ErrMalformedCredential, credentialPrefix)
	}
	return secret, nil
}

// HashCredential returns what is stored for a credential.
func HashCredential(cred string) ([]byte, error) {
	secret, err := ParseCredential(cred)
	if err != nil {
		return nil, err
	}
	return hashSecret(secret), nil
}

// VerifyCredential reports whether cred is the credential whose hash is
// stored. The comparison takes the same time wherever the hashes differ.
func VerifyCredential(cred string, stored []byte) bool {
	h, err := HashCredential(cred)
	if err != nil || len(stored) != sha256.Size {
		return false
	}
	return subtle.ConstantTimeCompare(h, stored) == 1
}

func hashSecret(secret []byte) []byte {
	h := sha256.Sum256(secret)
	return h[:]
}

// Bootstrap token bounds: long enough not to be guessed, short enough to
// bound what a client makes the collector hash.
const (
	minBootstrapToken = 32
	maxBootstrapToken = 512
)

// BootstrapToken is the fleet's enrollment secret, held as a hash so it is
// compared in constant time whatever its length.
type BootstrapToken struct{ hash [sha256.Size]byte }

// ParseBootstrapToken checks a token: 32-512 printable ASCII characters
// without spaces (e.g. `openssl rand -base64 48`).
func ParseBootstrapToken(s string) (*BootstrapToken, error) {
	if len(s) < minBootstrapToken || len(s) > maxBootstrapToken {
		return nil, fmt.Errorf("bootstrap token is %d characters; use %d to %d (e.g. openssl rand -base64 48)", len(s), minBootstrapToken, maxBootstrapToken)
	}
	for _, c := range []byte(s) {
		if c <= ' ' || c > '~' {
			return nil, errors.New("bootstrap token must be printable ASCII without spaces (e.g. openssl rand -base64 48)")
		}
	}
	return &BootstrapToken{hash: sha256.Sum256([]byte(s))}, nil
}

// LoadBootstrapToken reads a token file; surrounding white space (the
// newline an editor or echo adds) is ignored. The file should be readable
// by the collector only: the token enrolls any name nobody holds yet.
func LoadBootstrapToken(file string) (*BootstrapToken, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read bootstrap token: %w", err)
	}
	t, err := ParseBootstrapToken(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("bootstrap token file %s: %w", file, err)
	}
	return t, nil
}

// Matches reports whether s is this token.
func (t *BootstrapToken) Matches(s string) bool {
	if t == nil || len(s) > maxBootstrapToken {
		return false
	}
	h := sha256.Sum256([]byte(s))
	return subtle.ConstantTimeCompare(h[:], t.hash[:]) == 1
}
