package nodeauth

import (
	"crypto/sha256"
	"errors"
	"strings"
	"testing"
)

func TestCredentialsParseHashAndVerify(t *testing.T) {
	cred, hash, err := NewCredential()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(cred, "nbsn1_") || len(cred) != credentialLen || len(hash) != sha256.Size {
		t.Fatalf("NewCredential = %q (%d), hash of %d bytes", cred, len(cred), len(hash))
	}
	secret, err := ParseCredential(cred)
	if err != nil || len(secret) != 32 {
		t.Fatalf("ParseCredential(%q) = %d bytes, %v", cred, len(secret), err)
	}
	if h := sha256.Sum256(secret); string(h[:]) != string(hash) {
		t.Error("the stored hash is not the SHA-256 of the credential's secret")
	}
	other, otherHash, _ := NewCredential()
	if other == cred || string(otherHash) == string(hash) {
		t.Fatal("two credentials are equal")
	}

	flip := []byte(cred)
	flip[10] ^= 1 // still base64url, another secret
	cases := []struct {
		name   string
		cred   string
		stored []byte
		want   bool
	}{
		{"its own hash", cred, hash, true},
		{"another credential's hash", other, hash, false},
		{"one character changed", string(flip), hash, false},
		{"empty", "", hash, false},
		{"truncated stored hash", cred, hash[:31], false},
		{"nothing stored", cred, nil, false},
	}
	for _, c := range cases {
		if got := VerifyCredential(c.cred, c.stored); got != c.want {
			t.Errorf("%s: VerifyCredential = %v, want %v", c.name, got, c.want)
		}
	}

	malformed := []string{
		"",
		"nbsn1_",
		cred[:len(cred)-1],
		cred + "A",
		"nbsn2_" + cred[6:],
		"NBSN1_" + cred[6:],
		cred[:len(cred)-1] + "=", // padding is not base64url without padding
		cred[:len(cred)-1] + "+", // standard, not URL alphabet
		cred[:len(cred)-1] + "B", // non-zero trailing bits: not canonical
	}
	for _, m := range malformed {
		if _, err := ParseCredential(m); !errors.Is(err, ErrMalformedCredential) {
			t.Errorf("ParseCredential(%q) = %v, want ErrMalformedCredential", m, err)
		}
		if VerifyCredential(m, hash) {
			t.Errorf("VerifyCredential(%q) accepted a malformed credential", m)
		}
	}
}

func TestBootstrapTokens(t *testing.T) {
	good := strings.Repeat("k", 40)
	tok, err := ParseBootstrapToken(good)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		s    string
		want bool
	}{
		{good, true},
		{good + "k", false},
		{good[:39], false},
		{"", false},
		{strings.Repeat("k", 5000), false},
	} {
		if got := tok.Matches(c.s); got != c.want {
			t.Errorf("Matches(%.20q…) = %v, want %v", c.s, got, c.want)
		}
	}
	var none *BootstrapToken
	if none.Matches(good) {
		t.Error("a missing token matched")
	}
	for _, bad := range []struct{ s, want string }{
		{"short", "is 5 characters"},
		{strings.Repeat("x", 513), "is 513 characters"},
		{strings.Repeat("x", 20) + " " + strings.Repeat("x", 20), "printable ASCII without spaces"},
		{strings.Repeat("é", 20), "printable ASCII without spaces"},
	} {
		if _, err := ParseBootstrapToken(bad.s); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("ParseBootstrapToken(%.20q…) = %v, want an error containing %q", bad.s, err, bad.want)
		}
	}
}
