package schema

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"
)

// Node names are host names in spirit: letters, digits, '.', '_' and '-',
// starting with a letter or digit, at most MaxNodeNameLen bytes (a DNS
// name's length).
const MaxNodeNameLen = 253

const nodeNameRule = "a node name is 1-253 letters, digits, '.', '_' or '-', starting with a letter or digit"

// CheckNodeName returns nil if s can name a node, or an error that says
// what is wrong and what the rule is. Like CheckID's, the error reads after
// the caller's quote of s and a colon.
func CheckNodeName(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("empty (%s)", nodeNameRule)
	case len(s) > MaxNodeNameLen:
		return fmt.Errorf("%d bytes (%s)", len(s), nodeNameRule)
	case !alnum(s[0]):
		return fmt.Errorf("starts with %s (%s)", describeAt(s, 0), nodeNameRule)
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !alnum(c) && c != '.' && c != '_' && c != '-' {
			return fmt.Errorf("%s is not allowed (%s)", describeAt(s, i), nodeNameRule)
		}
	}
	return nil
}

// ValidNodeName reports whether s can name a node.
func ValidNodeName(s string) bool { return CheckNodeName(s) == nil }

// CanonicalNodeName is the one form of a valid node name that NBS stores,
// compares and shows: lower case, like the host names it stands for
// (DNS compares them without case). Every door a name comes in by — a
// Hello, an enrollment, a certificate, the identity map, an API path,
// a flag — folds it here, so NODE-A and node-a are one node: a
// look-alike cannot take a node's place in the ping mesh (whose target
// ids were always lower case) or beside it in a list.
func CanonicalNodeName(s string) string { return strings.ToLower(s) }

// NormalizeNodeName checks s (CheckNodeName) and returns its canonical
// form.
func NormalizeNodeName(s string) (string, error) {
	if err := CheckNodeName(s); err != nil {
		return "", err
	}
	return CanonicalNodeName(s), nil
}

func alnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// Node labels: at most MaxLabels per node; keys are identifiers (they
// become alert labels and SQL-free selector keys); values are any text up
// to MaxLabelValueLen bytes that PostgreSQL's jsonb can hold, so valid
// UTF-8 without NUL.
const (
	MaxLabels        = 64
	MaxLabelKeyLen   = 63
	MaxLabelValueLen = 4096
)

const labelKeyRule = "a label key is 1-63 lower-case letters, digits or '_', not starting with a digit"

// CheckLabelKey returns nil if s can be a label's key, or an error that
// says what is wrong and what the rule is, to follow the caller's quote of s.
func CheckLabelKey(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("empty (%s)", labelKeyRule)
	case len(s) > MaxLabelKeyLen:
		return fmt.Errorf("%d bytes (%s)", len(s), labelKeyRule)
	case s[0] >= '0' && s[0] <= '9':
		return fmt.Errorf("starts with a digit (%s)", labelKeyRule)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return fmt.Errorf("%s is not allowed (%s)", describeAt(s, i), labelKeyRule)
		}
	}
	return nil
}

// ValidLabelKey reports whether s can be a label's key.
func ValidLabelKey(s string) bool { return CheckLabelKey(s) == nil }

// CheckLabelValue returns nil if s can be a label's value, or an error
// that says why not.
func CheckLabelValue(s string) error {
	switch {
	case len(s) > MaxLabelValueLen:
		return fmt.Errorf("%d bytes, at most %d", len(s), MaxLabelValueLen)
	case !utf8.ValidString(s):
		return errors.New("not valid UTF-8")
	case strings.IndexByte(s, 0) >= 0:
		return errors.New("contains a NUL byte")
	}
	return nil
}

// CheckLabels checks a node's labels and says everything that is wrong at
// once, in key order.
func CheckLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return fmt.Errorf("%d labels, at most %d", len(labels), MaxLabels)
	}
	var errs []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if err := CheckLabelKey(k); err != nil {
			errs = append(errs, fmt.Sprintf("label key %.80q: %v", k, err))
			continue
		}
		if err := CheckLabelValue(labels[k]); err != nil {
			errs = append(errs, fmt.Sprintf("label %s value: %v", k, err))
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}
