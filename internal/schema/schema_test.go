package schema

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

func TestCheckID(t *testing.T) {
	cases := []struct {
		id   string
		want string // "" = valid, else a part of the error
	}{
		{"tcp_reset", ""},
		{"tcp_reset/sent/no_socket", ""},
		{"latency/qdisc/br-lan.10", ""},
		{"ping/2001:db8::1/rtt", ""},
		{"0", ""},
		{"_/_", ""},
		{"a/b/c/d/e/f/g/h", ""},
		{strings.Repeat("a", MaxIDLen), ""},
		{"a/" + strings.Repeat("b", MaxIDLen-2), ""},

		{"", "empty"},
		{strings.Repeat("a", MaxIDLen+1), "256 bytes, at most 255"},
		{strings.Repeat("a/", 200) + "a", "401 bytes"},
		{"a/b/c/d/e/f/g/h/i", "9 segments, at most 8"},
		{"/tcp_reset", "starts with '/'"},
		{"/", "starts with '/'"},
		{"tcp_reset/", "ends with '/'"},
		{"tcp_reset//sent", `empty segment ("//")`},
		{"TCP_reset", `'T' is not allowed in segment "TCP_reset" (the root segment takes a-z, 0-9 and '_')`},
		{"tcp reset", `' ' is not allowed`},
		{"tcp-reset/sent", `'-' is not allowed in segment "tcp-reset" (the root`},
		{"ping.x", `'.' is not allowed`},
		{"tcp_reset/Sent", `'S' is not allowed in segment "Sent" (a segment takes a-z, 0-9, '_', '.', ':' and '-')`},
		{"tcp_reset/s*", `'*' is not allowed`},
		{"ping/ünïcode", `'ü' is not allowed`},
		{"ping/a\x00b", `'\x00' is not allowed`},
		{"ping/a\xffb", "byte 0xff is not allowed"},
		{"tcp_reset/sent\n", `'\n' is not allowed`},
	}
	for _, c := range cases {
		t.Run(c.id, func(t *testing.T) {
			err := CheckID(c.id)
			if c.want == "" {
				if err != nil || !ValidID(c.id) {
					t.Fatalf("CheckID(%q) = %v, want valid", c.id, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || ValidID(c.id) {
				t.Fatalf("CheckID(%q) = %v, want an error containing %q", c.id, err, c.want)
			}
		})
	}
}

func TestCheckPattern(t *testing.T) {
	cases := []struct {
		pattern string
		want    string // "" = valid, else a part of the error
	}{
		{"*", ""},
		{"tcp_reset", ""},
		{"tcp_reset/sent/*", ""},
		{"*/sent", ""},
		{"ping/*/rtt", ""},
		{"latency/qdisc/eth*", ""},
		{"a/b/c/d/e/f/g/*", ""},
		{strings.Repeat("*", MaxIDLen), ""},

		{"", "empty"},
		{strings.Repeat("*", MaxIDLen+1), "256 bytes, at most 255"},
		{"*/*/*/*/*/*/*/*/*", "9 segments, at most 8"},
		{"/*", "starts with '/'"},
		{"*/", "ends with '/'"},
		{"*//sent", "empty segment"},
		{"**", ""},
		{"tcp_reset/sent/?", `'?' is not allowed in segment "?" (a segment takes a-z, 0-9, '_', '.', ':', '-' and '*')`},
		{"[a-z]", `'[' is not allowed in segment "[a-z]" (the root segment takes a-z, 0-9, '_' and '*')`},
		{"Tcp_reset", "'T' is not allowed"},
		{"tcp-*", "'-' is not allowed"},
		{`ping/\*`, `'\\' is not allowed`},
	}
	for _, c := range cases {
		t.Run(c.pattern, func(t *testing.T) {
			err := CheckPattern(c.pattern)
			if c.want == "" {
				if err != nil || !ValidPattern(c.pattern) {
					t.Fatalf("CheckPattern(%q) = %v, want valid", c.pattern, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || ValidPattern(c.pattern) {
				t.Fatalf("CheckPattern(%q) = %v, want an error containing %q", c.pattern, err, c.want)
			}
		})
	}
	// Every id is a pattern that matches only itself.
	for _, id := range []string{"tcp_reset", "latency/qdisc/br-lan.10", "ping/2001:db8::1/rtt"} {
		if !ValidPattern(id) {
			t.Errorf("ValidPattern(%q) = false for a valid id", id)
		}
	}
}

// The rule as the collector's regular expression stated it before this
// package existed; the hand-written check must agree with it exactly.
var wireIDRE = regexp.MustCompile(`^[a-z0-9_]+(/[a-z0-9_.:-]+){0,7}$`)

func FuzzCheckIDAgreesWithTheWireRule(f *testing.F) {
	for _, s := range []string{"", "a", "a/b", "a//b", "/a", "a/", "A", "a/B", "a/b.c:d-e", "a.b", "a/b/c/d/e/f/g/h", "a/b/c/d/e/f/g/h/i",
		"a\x00", "ü", "a/\xff", strings.Repeat("a", 255), strings.Repeat("a", 256), "a\n", "a/b\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		want := len(id) <= MaxIDLen && wireIDRE.MatchString(id)
		if got := ValidID(id); got != want {
			t.Fatalf("ValidID(%q) = %v, the wire's rule says %v", id, got, want)
		}
	})
}

// The alert rules' pattern rule as their regular expression stated it,
// which had no length limit: patterns longer than any id are now refused.
var wirePatternRE = regexp.MustCompile(`^[a-z0-9_*]+(/[a-z0-9_.:*-]+){0,7}$`)

func FuzzCheckPatternAgreesWithTheAlertRule(f *testing.F) {
	for _, s := range []string{"", "*", "**", "*/*", "a/*/b", "a//*", "/*", "*/", "A*", "a/b.*:-", "*.a", "?", "[a]", strings.Repeat("*", 256)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		want := len(p) <= MaxIDLen && wirePatternRE.MatchString(p)
		if got := ValidPattern(p); got != want {
			t.Fatalf("ValidPattern(%q) = %v, the alert rule's expression says %v", p, got, want)
		}
	})
}

func TestTreeShape(t *testing.T) {
	cases := []struct {
		id, parent, root string
	}{
		{"tcp_reset", "", "tcp_reset"},
		{"tcp_reset/sent", "tcp_reset", "tcp_reset"},
		{"tcp_reset/sent/no_socket", "tcp_reset/sent", "tcp_reset"},
		{"ping/2001:db8::1/rtt", "ping/2001:db8::1", "ping"},
		{"", "", ""},
		// Not valid ids, but Parent and Root must not panic on them.
		{"/", "", ""},
		{"a/", "a", "a"},
		{"/a", "", ""},
		{"a//b", "a/", "a"},
	}
	for _, c := range cases {
		if got := Parent(c.id); got != c.parent {
			t.Errorf("Parent(%q) = %q, want %q", c.id, got, c.parent)
		}
		if got := Root(c.id); got != c.root {
			t.Errorf("Root(%q) = %q, want %q", c.id, got, c.root)
		}
	}
}

func TestWithin(t *testing.T) {
	cases := []struct {
		id, subtree string
		want        bool
	}{
		{"tcp_reset", "tcp_reset", true},
		{"tcp_reset/sent", "tcp_reset", true},
		{"tcp_reset/sent/no_socket", "tcp_reset", true},
		{"tcp_reset/sent/no_socket", "tcp_reset/sent", true},
		{"tcp_reset_x", "tcp_reset", false},
		{"tcp_reset_x/sent", "tcp_reset", false},
		{"tcp_reset", "tcp_reset/sent", false},
		{"latency", "tcp_reset", false},
		{"tcp_reset", "", false},
	}
	for _, c := range cases {
		if got := Within(c.id, c.subtree); got != c.want {
			t.Errorf("Within(%q, %q) = %v, want %v", c.id, c.subtree, got, c.want)
		}
	}
}

func TestSegment(t *testing.T) {
	cases := map[string]string{
		"eth0":         "eth0",
		"vA":           "va",
		"veth1@if2":    "veth1_if2",
		"br-lan.10":    "br-lan.10",
		"2001:db8::1":  "2001:db8::1",
		"gw one/two":   "gw_one_two",
		"ünïcode":      "_n_code",
		"a\x00b":       "a_b",
		"a\xffb":       "a_b",
		"":             "_",
		"/":            "_",
		"tcp_send_rst": "tcp_send_rst",
	}
	for in, want := range cases {
		got := Segment(in)
		if got != want {
			t.Errorf("Segment(%q) = %q, want %q", in, got, want)
		}
		if err := CheckID("root/" + got); err != nil {
			t.Errorf("root/%s: %v", got, err)
		}
	}
}

func TestCheckNodeName(t *testing.T) {
	cases := []struct {
		name string
		want string
	}{
		{"web-1", ""},
		{"Web_1.example.com", ""},
		{"1", ""},
		{strings.Repeat("a", MaxNodeNameLen), ""},

		{"", "empty (a node name is 1-253 letters"},
		{strings.Repeat("a", MaxNodeNameLen+1), "254 bytes"},
		{"-web", "starts with '-'"},
		{".web", "starts with '.'"},
		{"_web", "starts with '_'"},
		{"no spaces allowed", "' ' is not allowed"},
		{"web/1", "'/' is not allowed"},
		{"wéb", "'é' is not allowed"},
		{"ünïcode", "starts with 'ü'"},
		{"web\x00", `'\x00' is not allowed`},
		{"web\xff", "byte 0xff is not allowed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := CheckNodeName(c.name)
			if c.want == "" {
				if err != nil || !ValidNodeName(c.name) {
					t.Fatalf("CheckNodeName(%q) = %v, want valid", c.name, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || ValidNodeName(c.name) {
				t.Fatalf("CheckNodeName(%q) = %v, want an error containing %q", c.name, err, c.want)
			}
		})
	}
}

// Every valid name has one canonical form, the same for all its case
// variants, and canonical forms are fixed points; an invalid name has none.
func TestNormalizeNodeName(t *testing.T) {
	cases := []struct{ in, want string }{
		{"web-1", "web-1"},
		{"NODE-A", "node-a"},
		{"Node-A", "node-a"},
		{"Web_1.Example.COM", "web_1.example.com"},
		{"", ""},
		{"wéb", ""},
		{"-Web", ""},
	}
	for _, c := range cases {
		got, err := NormalizeNodeName(c.in)
		if c.want == "" {
			if err == nil {
				t.Errorf("NormalizeNodeName(%q) = %q, want an error", c.in, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("NormalizeNodeName(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
		if again, err := NormalizeNodeName(got); err != nil || again != got {
			t.Errorf("NormalizeNodeName(%q) = %q, %v; a canonical name must be its own", got, again, err)
		}
	}
}

func TestCheckLabelKey(t *testing.T) {
	cases := []struct {
		key  string
		want string
	}{
		{"customer", ""},
		{"_private", ""},
		{"rack_12", ""},
		{"_", ""},
		{strings.Repeat("k", MaxLabelKeyLen), ""},

		{"", "empty (a label key is 1-63 lower-case letters"},
		{strings.Repeat("k", MaxLabelKeyLen+1), "64 bytes"},
		{"1rack", "starts with a digit"},
		{"Customer", "'C' is not allowed"},
		{"rack-12", "'-' is not allowed"},
		{"a.b", "'.' is not allowed"},
		{"clé", "'é' is not allowed"},
		{"k\x00", `'\x00' is not allowed`},
	}
	for _, c := range cases {
		t.Run(c.key, func(t *testing.T) {
			err := CheckLabelKey(c.key)
			if c.want == "" {
				if err != nil || !ValidLabelKey(c.key) {
					t.Fatalf("CheckLabelKey(%q) = %v, want valid", c.key, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || ValidLabelKey(c.key) {
				t.Fatalf("CheckLabelKey(%q) = %v, want an error containing %q", c.key, err, c.want)
			}
		})
	}
}

// The node-name and label-key rules as the regular expressions stated
// them before this package existed.
var (
	wireNodeNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$`)
	wireLabelKeyRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)
)

func FuzzNamesAgreeWithTheWireRules(f *testing.F) {
	for _, s := range []string{"", "a", "A", "1", "-", "_", "a-b.c_d", "a b", "ü", "a\x00", strings.Repeat("a", 63), strings.Repeat("a", 64),
		strings.Repeat("a", 253), strings.Repeat("a", 254), "a\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := ValidNodeName(s), wireNodeNameRE.MatchString(s); got != want {
			t.Errorf("ValidNodeName(%q) = %v, the wire's rule says %v", s, got, want)
		}
		if got, want := ValidLabelKey(s), wireLabelKeyRE.MatchString(s); got != want {
			t.Errorf("ValidLabelKey(%q) = %v, the wire's rule says %v", s, got, want)
		}
	})
}

func TestCheckLabels(t *testing.T) {
	labels := func(n int) map[string]string {
		m := map[string]string{}
		for i := range n {
			m[fmt.Sprintf("k%d", i)] = "v"
		}
		return m
	}
	cases := []struct {
		name   string
		labels map[string]string
		want   []string // parts of the error, in order; nil = valid
	}{
		{"none", nil, nil},
		{"plain", map[string]string{"customer": "acme", "rack": "r12"}, nil},
		{"empty value", map[string]string{"customer": ""}, nil},
		{"unicode value", map[string]string{"site": "Zürich 🏔"}, nil},
		{"longest value", map[string]string{"note": strings.Repeat("x", MaxLabelValueLen)}, nil},
		{"most labels", labels(MaxLabels), nil},

		{"too many", labels(MaxLabels + 1), []string{"65 labels, at most 64"}},
		{"value too long", map[string]string{"note": strings.Repeat("x", MaxLabelValueLen+1)}, []string{"label note value: 4097 bytes, at most 4096"}},
		{"NUL in value", map[string]string{"note": "a\x00b"}, []string{"label note value: contains a NUL byte"}},
		{"bad UTF-8 in value", map[string]string{"note": "a\xffb"}, []string{"label note value: not valid UTF-8"}},
		{"every problem, in key order", map[string]string{"Zone": "x", "customer": "ok", "b": "\x00", "": "x"},
			[]string{`label key "": empty`, `label key "Zone": 'Z' is not allowed`, "label b value: contains a NUL byte"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := CheckLabels(c.labels)
			if c.want == nil {
				if err != nil {
					t.Fatalf("CheckLabels = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("CheckLabels = nil, want an error with %q", c.want)
			}
			msg := err.Error()
			at := 0
			for _, w := range c.want {
				i := strings.Index(msg[at:], w)
				if i < 0 {
					t.Fatalf("CheckLabels = %q, want %q after byte %d", msg, w, at)
				}
				at += i + len(w)
			}
			if strings.Contains(msg, "customer") {
				t.Errorf("CheckLabels = %q names the valid label customer", msg)
			}
		})
	}
}

func TestSeverity(t *testing.T) {
	var (
		unspecified = nbsv1.State_STATE_UNSPECIFIED
		ok          = nbsv1.State_STATE_OK
		warn        = nbsv1.State_STATE_WARN
		crit        = nbsv1.State_STATE_CRIT
		unknown     = nbsv1.State_STATE_UNKNOWN
		undefined   = nbsv1.State(99)
	)
	// Least to most severe: the order the UI, the alerts and the tree rely on.
	order := []nbsv1.State{ok, unknown, warn, crit}
	for i, s := range order {
		if got := Severity(s); got != i+1 {
			t.Errorf("Severity(%v) = %d, want %d", s, got, i+1)
		}
		if got := StateOfSeverity(i + 1); got != s {
			t.Errorf("StateOfSeverity(%d) = %v, want %v", i+1, got, s)
		}
	}
	if got := Severity(order[len(order)-1]); got != MaxSeverity {
		t.Errorf("Severity(CRIT) = %d, MaxSeverity = %d", got, MaxSeverity)
	}
	for _, s := range []nbsv1.State{unspecified, undefined, -1} {
		if got := Severity(s); got != 0 {
			t.Errorf("Severity(%v) = %d, want 0", s, got)
		}
	}
	for _, n := range []int{-1, 0, MaxSeverity + 1} {
		if got := StateOfSeverity(n); got != unspecified {
			t.Errorf("StateOfSeverity(%d) = %v, want UNSPECIFIED", n, got)
		}
	}

	worse := []struct{ a, b, want nbsv1.State }{
		{ok, ok, ok},
		{ok, warn, warn},
		{warn, ok, warn},
		{ok, unknown, unknown},
		{unknown, warn, warn},
		{warn, unknown, warn},
		{crit, unknown, crit},
		{unknown, crit, crit},
		{warn, crit, crit},
		{crit, warn, crit},
		{unspecified, ok, ok},
		{ok, unspecified, ok},
		{unspecified, unspecified, unspecified},
		{undefined, ok, ok},
		{undefined, unspecified, undefined}, // equal rank: the first
	}
	for _, c := range worse {
		if got := Worse(c.a, c.b); got != c.want {
			t.Errorf("Worse(%v, %v) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}
