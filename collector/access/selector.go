package access

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/nbs-project/nbs/internal/schema"
)

// Selector limits: a scope names a few labels, not a catalogue.
const (
	maxSelectorLabels = 8
	maxSelectorValue  = 256
)

// Selector is a customer's scope: a node is in it when it carries every one
// of these labels with exactly this value — the same equality selector that
// thresholds and alert rules use, so jsonb containment (@>) evaluates it in
// SQL.
type Selector map[string]string

// ParseSelector reads the command-line form, "customer=acme,region=eu".
func ParseSelector(s string) (Selector, error) {
	sel := Selector{}
	if strings.TrimSpace(s) == "" {
		return sel, nil
	}
	for part := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("selector %q: %q is not label=value", s, part)
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if _, dup := sel[k]; dup {
			return nil, fmt.Errorf("selector %q: label %s appears twice", s, k)
		}
		sel[k] = v
	}
	if err := sel.Validate(); err != nil {
		return nil, err
	}
	return sel, nil
}

// Validate checks the limits and that keys are node label keys (so a typo
// cannot produce a scope that silently matches nothing forever).
func (s Selector) Validate() error {
	var errs []error
	if len(s) > maxSelectorLabels {
		errs = append(errs, fmt.Errorf("selector has %d labels, at most %d allowed", len(s), maxSelectorLabels))
	}
	for _, k := range s.keys() {
		v := s[k]
		if !schema.ValidLabelKey(k) {
			errs = append(errs, fmt.Errorf("selector label %q is not a label key (lower case letters, digits, _; at most 63)", k))
		}
		switch {
		case v == "" || len(v) > maxSelectorValue:
			errs = append(errs, fmt.Errorf("selector label %s: value must be 1 to %d bytes", k, maxSelectorValue))
		case !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0:
			// jsonb, where labels live, holds neither.
			errs = append(errs, fmt.Errorf("selector label %s: value must be UTF-8 text without NUL", k))
		}
	}
	return errors.Join(errs...)
}

func (s Selector) keys() []string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// String is the command-line form with keys sorted.
func (s Selector) String() string {
	parts := make([]string, 0, len(s))
	for _, k := range s.keys() {
		parts = append(parts, k+"="+s[k])
	}
	return strings.Join(parts, ",")
}

// Matches reports whether labels carry every label of the selector; the
// empty selector matches everything.
func (s Selector) Matches(labels map[string]string) bool {
	for k, v := range s {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// JSON is the selector as a jsonb value for `labels @> $n`.
func (s Selector) JSON() string {
	if s == nil {
		return "{}"
	}
	b, _ := json.Marshal(map[string]string(s)) // a map of strings always encodes
	return string(b)
}
