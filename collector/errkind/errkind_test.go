package errkind

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestOf(t *testing.T) {
	sentinel := New(NotFound, "not found")
	cases := []struct {
		name     string
		err      error
		want     Kind
		wantText string
	}{
		{"nil", nil, Internal, ""},
		{"plain", errors.New("disk on fire"), Internal, "disk on fire"},
		{"sentinel", sentinel, NotFound, "not found"},
		{"wrapped sentinel", fmt.Errorf("node %q: %w", "web-1", sentinel), NotFound, `node "web-1": not found`},
		{"errorf", Errorf(Invalid, "limit %d must be from 1 to 1000", 0), Invalid, "limit 0 must be from 1 to 1000"},
		{"twice wrapped", fmt.Errorf("create rule: %w", fmt.Errorf("name: %w", Errorf(Conflict, "exists"))), Conflict, "create rule: name: exists"},
		// The outermost kind wins: a caller may reclassify what it called.
		{"reclassified", Errorf(Invalid, "metric: %w", sentinel), Invalid, "metric: not found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Of(c.err); got != c.want {
				t.Errorf("Of(%v) = %v, want %v", c.err, got, c.want)
			}
			if c.err != nil && c.err.Error() != c.wantText {
				t.Errorf("text %q, want %q", c.err.Error(), c.wantText)
			}
		})
	}
	if !errors.Is(fmt.Errorf("x: %w", sentinel), sentinel) {
		t.Error("errors.Is does not find a wrapped sentinel")
	}
	if errors.Is(New(NotFound, "not found"), sentinel) {
		t.Error("two sentinels of one kind and text compare equal; errors.Is must tell them apart")
	}
}

func TestKindsHaveNames(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range Kinds() {
		s := k.String()
		if s == "" || seen[s] {
			t.Errorf("kind %d has name %q (empty or taken)", uint8(k), s)
		}
		seen[s] = true
	}
	if got := Kind(200).String(); got != "kind(200)" {
		t.Errorf("unknown kind prints %q", got)
	}
}

func TestRetryAfter(t *testing.T) {
	busy := Errorf(Overloaded, "3 reports in flight")
	cases := []struct {
		name  string
		err   error
		kind  Kind
		after time.Duration
		ok    bool
		text  string
	}{
		{"none", busy, Overloaded, 0, false, "3 reports in flight"},
		{"hinted", WithRetryAfter(busy, 2*time.Second), Overloaded, 2 * time.Second, true, "3 reports in flight"},
		{"wrapped hint", fmt.Errorf("report: %w", WithRetryAfter(busy, time.Second)), Overloaded, time.Second, true, "report: 3 reports in flight"},
		{"outermost hint wins", WithRetryAfter(fmt.Errorf("x: %w", WithRetryAfter(busy, time.Second)), 5*time.Second), Overloaded, 5 * time.Second, true, "x: 3 reports in flight"},
		{"plain error keeps its kind", WithRetryAfter(errors.New("down"), time.Second), Internal, time.Second, true, "down"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			after, ok := RetryAfter(c.err)
			if after != c.after || ok != c.ok {
				t.Errorf("RetryAfter = %v, %v; want %v, %v", after, ok, c.after, c.ok)
			}
			if k := Of(c.err); k != c.kind {
				t.Errorf("Of = %v, want %v", k, c.kind)
			}
			if c.err.Error() != c.text {
				t.Errorf("text %q, want %q", c.err.Error(), c.text)
			}
		})
	}
	if WithRetryAfter(nil, time.Second) != nil {
		t.Error("WithRetryAfter(nil) is not nil")
	}
}
