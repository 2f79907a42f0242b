package ping

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/agent/tree"
	"github.com/nbs-project/nbs/internal/netns"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

func TestParseTarget(t *testing.T) {
	cases := []struct {
		in, name, host, err string
	}{
		{"10.0.0.1", "10.0.0.1", "10.0.0.1", ""},
		{" gw = 10.0.0.1 ", "gw", "10.0.0.1", ""},
		{"web-1=web-1.example.com", "web-1", "web-1.example.com", ""},
		{"2001:db8::1", "2001:db8::1", "2001:db8::1", ""},
		{"::ffff:10.0.0.1", "10.0.0.1", "10.0.0.1", ""},
		{"Node_A=198.18.0.2", "Node_A", "198.18.0.2", ""},
		{"", "", "", "no address"},
		{"gw=", "", "", "no address"},
		{"=10.0.0.1", "", "", "empty name"},
		{"fe80::1%eth0", "", "", "scoped"},
		{"0.0.0.0", "", "", "not a unicast"},
		{"224.0.0.1", "", "", "not a unicast"},
		{"bad host!", "", "", "neither an IP address nor a host name"},
		{"x=" + strings.Repeat("a", 300), "", "", "neither"},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			got, err := ParseTarget(c.in)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("ParseTarget(%q) = %+v, %v; want error %q", c.in, got, err, c.err)
				}
				return
			}
			if err != nil || got.Name != c.name || got.Host != c.host {
				t.Fatalf("ParseTarget(%q) = %+v, %v; want name %q host %q", c.in, got, err, c.name, c.host)
			}
		})
	}
	ts, err := ParseTargets("a=10.0.0.1, ,10.0.0.2")
	if err != nil || len(ts) != 2 || ts[1].ID() != "ping/10.0.0.2" || ts[0].ID() != "ping/a" {
		t.Fatalf("ParseTargets = %+v, %v", ts, err)
	}
	if _, err := ParseTargets("10.0.0.1,bad!,also bad"); err == nil || strings.Count(err.Error(), "neither") != 2 {
		t.Fatalf("ParseTargets with two bad entries: %v, want both named", err)
	}
}

func TestReadClock(t *testing.T) {
	c, err := ReadClock()
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxError < 0 {
		t.Fatalf("max error %s < 0", c.MaxError)
	}
	t.Logf("clock: %+v", c)
}

// agentLoop plays the agent's part for one source (see agent/app): define
// what Collect announces, forget what it retires, and evaluate headline
// values against the thresholds each interval.
type agentLoop struct {
	t    *testing.T
	src  *Source
	tree *tree.Tree
	prev map[string]uint64
	last time.Time
}

func newAgentLoop(t *testing.T, src *Source) *agentLoop {
	return &agentLoop{t: t, src: src, tree: tree.New(), prev: map[string]uint64{}, last: time.Now()}
}

func (a *agentLoop) interval() tree.Result {
	a.t.Helper()
	r, err := a.src.Collect(context.Background())
	if err != nil {
		a.t.Fatal(err)
	}
	a.tree.Forget(r.Retired...)
	a.tree.Define(r.Metrics...)
	secs := time.Since(a.last).Seconds()
	a.last = time.Now()
	values := map[string]float64{}
	for id, v := range r.Gauges {
		values[id] = v
	}
	for id, v := range r.Counters {
		values[id] = float64(v-min(a.prev[id], v)) / secs
	}
	a.prev = r.Counters
	for id, h := range r.Histograms {
		values[id] = 0
		if m, ok := a.tree.Metric(id); ok && h.Count > 0 {
			values[id] = h.Quantile(m.Quantile) / m.Scale
		}
	}
	idle := map[string]bool{}
	for _, id := range r.Idle {
		idle[id] = true
	}
	return a.tree.Evaluate(values, idle)
}

func openSource(t *testing.T, opts Options) *Source {
	t.Helper()
	s, err := Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func handle(t *testing.T, name string) netns.Handle {
	t.Helper()
	h, err := netns.Resolve(name)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func stateOf(res tree.Result, id string) string {
	return strings.TrimPrefix(res.State[id].String(), "STATE_")
}

// Targets come and go without a restart: a peer set by the collector gets
// a subtree with every child measured; when the collector takes it away
// the subtree is retired (not left UNKNOWN), while a static target stays.
func TestTargetsComeAndGo(t *testing.T) {
	lab := netlab.New(t)
	src := openSource(t, Options{Env: source.Env{Netns: handle(t, lab.A)}, Targets: []Target{{Name: "b6", Host: lab.IP6B.String()}},
		Interval: 20 * time.Millisecond, Timeout: 500 * time.Millisecond})
	if caps := src.Capabilities(); len(caps) != 1 || !caps[0].GetAvailable() {
		t.Fatalf("capabilities %v: want ICMP available in the lab", caps)
	}
	loop := newAgentLoop(t, src)
	src.SetPeers([]string{"lab-b=" + lab.IPB.String(), "not an address!"})
	if got := src.Targets(); strings.Join(got, ",") != "ping/b6,ping/lab-b" {
		t.Fatalf("targets %v, want ping/b6 and ping/lab-b (the bad peer skipped)", got)
	}
	time.Sleep(500 * time.Millisecond)
	res := loop.interval()
	for _, id := range []string{"ping", "ping/lab-b", "ping/lab-b/kernel_rtt", "ping/lab-b/host_delay", "ping/lab-b/host_delay/qdisc",
		"ping/lab-b/host_delay/send", "ping/lab-b/host_delay/receive", "ping/lab-b/loss", "ping/lab-b/jitter", "ping/lab-b/local_drops", "ping/lab-b/sent", "ping/lab-b/lost",
		"ping/b6/kernel_rtt", "ping/clock", "ping/clock/max_error"} {
		if _, ok := res.Values[id]; !ok {
			t.Errorf("%s has no value", id)
		}
		if st := res.State[id]; st != tree.OK {
			t.Errorf("%s is %v on the idle lab", id, st)
		}
	}
	if v := res.Values["ping/lab-b/kernel_rtt"]; v <= 0 || v > 5 {
		t.Errorf("kernel RTT p99 %.3f ms on the idle lab", v)
	}
	if v, w := res.Values["ping"], max(res.Values["ping/lab-b"], res.Values["ping/b6"]); v != w {
		t.Errorf("root headline %.3f ms, want the worst target's RTT p99 %.3f ms", v, w)
	}
	c, ok := src.Counts("ping/lab-b")
	if !ok || c.Replies == 0 || c.Lost != 0 {
		t.Errorf("counts of ping/lab-b: %+v, %v", c, ok)
	}

	if gone := src.SetPeers(nil); !slices.Equal(gone, []string{"ping/lab-b"}) {
		t.Errorf("SetPeers(nil) retired %v, want ping/lab-b (for the agent to forget at once)", gone)
	}
	res = loop.interval()
	if _, ok := loop.tree.Metric("ping/lab-b/loss"); ok {
		t.Error("ping/lab-b is still in the tree after the collector removed the peer")
	}
	if st := res.State["ping"]; st != tree.OK {
		t.Errorf("root is %v after a target was removed, want OK", st)
	}
	if _, ok := res.Values["ping/b6/loss"]; !ok {
		t.Error("the static target stopped reporting")
	}
	// Back again: a fresh subtree.
	src.SetPeers([]string{"lab-b=" + lab.IPB.String()})
	time.Sleep(200 * time.Millisecond)
	res = loop.interval()
	if _, ok := res.Values["ping/lab-b/kernel_rtt"]; !ok || res.State["ping"] != tree.OK {
		t.Errorf("re-added peer: values %v, root %v", res.Values, res.State["ping"])
	}
}

// Without any ICMP socket (ping_group_range closed and no CAP_NET_RAW is
// simulated by the namespace being unable to open either) the source says
// why and leaves the targets UNKNOWN rather than OK.
func TestNoSocketIsUnknown(t *testing.T) {
	lab := netlab.New(t)
	src := openSource(t, Options{Env: source.Env{Netns: handle(t, lab.A)}, Targets: []Target{{Name: "b", Host: lab.IPB.String()}}})
	src.mode, src.why = 0, "test: no ICMP socket" // what Open records when both socket kinds fail
	res := newAgentLoop(t, src).interval()
	if res.State["ping"] != tree.Unknown || res.State["ping/b/loss"] != tree.Unknown {
		t.Fatalf("root %v, loss %v; want UNKNOWN without a socket", res.State["ping"], res.State["ping/b/loss"])
	}
	if caps := src.Capabilities(); caps[0].GetAvailable() || caps[0].GetReason() == "" {
		t.Fatalf("capabilities %v", caps)
	}
}

// With default thresholds, tbf bufferbloat plus a bulk flow in A turns the
// ping root WARN or worse through host_delay and its qdisc child, while the
// kernel RTT (the network's part) and loss stay OK.
func TestBloatTurnsPingRootWarn(t *testing.T) {
	lab := netlab.New(t)
	src := openSource(t, Options{Env: source.Env{Netns: handle(t, lab.A)}, Targets: []Target{{Name: "b", Host: lab.IPB.String()}},
		Interval: 20 * time.Millisecond, Timeout: 2 * time.Second})
	loop := newAgentLoop(t, src)
	const interval = 300 * time.Millisecond
	var res tree.Result
	var log []string
	step := func(phase string) {
		time.Sleep(interval)
		res = loop.interval()
		log = append(log, fmt.Sprintf("%s: root %s, host_delay p99 %.3f ms (%s), qdisc %.3f ms (%s), kernel_rtt %.3f ms (%s), loss %.0f%%",
			phase, stateOf(res, "ping"), res.Values["ping/b/host_delay"], stateOf(res, "ping/b/host_delay"),
			res.Values["ping/b/host_delay/qdisc"], stateOf(res, "ping/b/host_delay/qdisc"),
			res.Values["ping/b/kernel_rtt"], stateOf(res, "ping/b/kernel_rtt"), res.Values["ping/b/loss"]))
	}
	defer func() { t.Log("intervals:\n" + strings.Join(log, "\n")) }()
	for range 8 {
		step("idle")
	}
	if res.State["ping"] != tree.OK {
		t.Fatalf("root %v on the idle lab, want OK", res.State["ping"])
	}
	lab.Exec(t, lab.A, "tc", "qdisc", "replace", "dev", "vA", "root", "tbf", "rate", "10mbit", "burst", "1mbit", "latency", "400ms")
	stop := lab.Flood(t, 4)
	defer stop()
	warned := false
	for range 15 {
		step("bloat")
		if res.State["ping"] == tree.Warn || res.State["ping"] == tree.Crit {
			warned = true
			break
		}
	}
	if !warned {
		t.Fatal("ping root never turned WARN under bloat")
	}
	if st := res.Own["ping/b/host_delay"]; st != tree.Warn && st != tree.Crit {
		t.Errorf("host_delay's own state %v, want it to be the child that explains the root", st)
	}
	if st := res.Own["ping/b/host_delay/qdisc"]; st != tree.Warn && st != tree.Crit {
		t.Errorf("qdisc's own state %v, want WARN or CRIT", st)
	}
	if st := res.Own["ping/b/kernel_rtt"]; st != tree.OK {
		t.Errorf("kernel_rtt %v: the bloat is local, the network's part must stay OK", st)
	}
	if v := res.Values["ping/b/host_delay"]; v < 100 {
		t.Errorf("host_delay p99 %.1f ms under bloat, want hundreds", v)
	}
}

// Loss from an nftables rule in B dropping a random 20% of the echo
// requests: the echoes lost are exactly those the rule's counter dropped,
// and the loss gauge is their share of the echoes.
func TestLossGaugeMatchesNftables(t *testing.T) {
	lab := netlab.New(t)
	// A named counter outlives the rule, so the rule can be removed
	// (no more drops) before the counter is read.
	for _, args := range [][]string{
		{"add", "table", "inet", "nbsping"},
		{"add", "counter", "inet", "nbsping", "drops"},
		{"add", "chain", "inet", "nbsping", "in", "{ type filter hook input priority 0; policy accept; }"},
		{"add", "rule", "inet", "nbsping", "in", "ip", "saddr", lab.IPA.String(), "icmp", "type", "echo-request",
			"numgen", "random", "mod", "100", "<", "20", "counter", "name", "drops", "drop"},
	} {
		lab.Exec(t, lab.B, append([]string{"nft"}, args...)...)
	}
	src := openSource(t, Options{Env: source.Env{Netns: handle(t, lab.A)}, Targets: []Target{{Name: "b", Host: lab.IPB.String()}},
		Interval: 10 * time.Millisecond, Timeout: 300 * time.Millisecond, LossWindow: 100000})
	loop := newAgentLoop(t, src)
	time.Sleep(4 * time.Second)
	// Stop dropping, then let every dropped echo time out.
	lab.Exec(t, lab.B, "nft", "flush", "chain", "inet", "nbsping", "in")
	time.Sleep(time.Second)
	// Echoes go on every 10 ms, so replies may grow between the interval
	// and reading the counts: read them on both sides of it.
	before, _ := src.Counts("ping/b")
	res := loop.interval()
	c, _ := src.Counts("ping/b")
	m := regexp.MustCompile(`packets (\d+)`).FindStringSubmatch(lab.Exec(t, lab.B, "nft", "list", "counter", "inet", "nbsping", "drops"))
	if m == nil {
		t.Fatal("no nft counter")
	}
	dropped, _ := strconv.ParseUint(m[1], 10, 64)
	loss := res.Values["ping/b/loss"]
	t.Logf("sent %d, replies %d, lost %d; loss gauge %.2f%%; nft dropped %d of %d echo requests (%.2f%%)",
		c.Sent, c.Replies, c.Lost, loss, dropped, c.Sent, 100*float64(dropped)/float64(c.Sent))
	if c.Lost != dropped {
		t.Fatalf("lost %d echoes, the nft rule dropped %d: must be equal", c.Lost, dropped)
	}
	if before.Lost != c.Lost {
		t.Fatalf("lost %d, then %d, after the rule went and every dropped echo timed out", before.Lost, c.Lost)
	}
	// The gauge covers the echoes answered or given up on; the few still
	// in flight (answered ones, after the rule went) are not yet in it.
	lo, hi := 100*float64(c.Lost)/float64(c.Lost+c.Replies), 100*float64(c.Lost)/float64(c.Lost+before.Replies)
	if loss < lo-1e-9 || loss > hi+1e-9 {
		t.Fatalf("loss gauge %.4f%%, want lost/(lost+replies) with the replies counted around the interval: %.4f–%.4f%%", loss, lo, hi)
	}
	if frac := 100 * float64(dropped) / float64(c.Sent); math.Abs(loss-frac) > 1 {
		t.Errorf("loss gauge %.2f%% vs nft drops / echoes sent %.2f%%: differ by more than 1 point", loss, frac)
	}
	if st := res.State["ping/b/loss"]; st != tree.Crit || res.State["ping"] != tree.Crit {
		t.Errorf("loss %v, root %v at %.1f%% loss: want CRIT (>= 5%%)", st, res.State["ping"], loss)
	}
}

// A node's ping address defaults to its namespace's primary IPv4: the
// default route's source where there is one, else the first global
// address of an interface that is up.
func TestDetectAddress(t *testing.T) {
	lab := netlab.New(t)
	got, err := DetectAddress(handle(t, lab.A))
	if err != nil || got != lab.IPA {
		t.Fatalf("no default route: %v, %v; want %v", got, err, lab.IPA)
	}
	// A second address, and a default route from it.
	second := netip.AddrFrom4([4]byte{192, 0, 2, 77})
	lab.Exec(t, lab.A, "ip", "addr", "add", second.String()+"/32", "dev", "vA")
	lab.Exec(t, lab.A, "ip", "route", "add", "default", "via", lab.IPB.String(), "src", second.String())
	if got, err = DetectAddress(handle(t, lab.A)); err != nil || got != second {
		t.Fatalf("default route from %v: detected %v, %v", second, got, err)
	}
	// Nothing but loopback.
	lab.Exec(t, lab.B, "ip", "link", "set", "vB", "down")
	if got, err = DetectAddress(handle(t, lab.B)); err != nil || got.IsValid() {
		t.Fatalf("only loopback up: detected %v, %v; want none", got, err)
	}
}

// A target whose name does not resolve is not pinged, and says so by being
// UNKNOWN rather than a healthy zero.
func TestUnresolvableTargetIsUnknown(t *testing.T) {
	lab := netlab.New(t)
	src := openSource(t, Options{Env: source.Env{Netns: handle(t, lab.A)}, Targets: []Target{{Name: "nowhere", Host: "nowhere.invalid"}},
		Interval: 20 * time.Millisecond, Retry: time.Hour})
	loop := newAgentLoop(t, src)
	time.Sleep(300 * time.Millisecond)
	res := loop.interval()
	if st := res.State["ping/nowhere/loss"]; st != tree.Unknown {
		t.Fatalf("unresolvable target's loss is %v, want UNKNOWN", st)
	}
	if st := res.State["ping"]; st != tree.Unknown {
		t.Fatalf("root %v, want UNKNOWN while a target cannot be pinged", st)
	}
}

// One address, one target: what --ping.targets and the collector's mesh
// both name is pinged once, under the first name, and its description
// says who named it.
func TestWantedTargetsOnePerAddress(t *testing.T) {
	flag := func(s string) Target { t.Helper(); tg, err := ParseTarget(s); must(t, err); return tg }
	cases := []struct {
		name          string
		static, peers []Target
		incumbent     string            // host already pinged under its peer's id, if any
		want          map[string]string // id -> host
		namedBy       map[string][]string
	}{
		{"flag and mesh name one address", []Target{flag("10.0.0.2")}, []Target{flag("lab-b=10.0.0.2")}, "",
			map[string]string{"ping/10.0.0.2": "10.0.0.2"},
			map[string][]string{"ping/10.0.0.2": {"--ping.targets", "the collector's mesh (as lab-b)"}}},
		{"a named flag target keeps its name", []Target{flag("gw=10.0.0.2")}, []Target{flag("lab-b=10.0.0.2")}, "",
			map[string]string{"ping/gw": "10.0.0.2"},
			map[string][]string{"ping/gw": {"--ping.targets (as gw)", "the collector's mesh (as lab-b)"}}},
		{"two peers at one address", nil, []Target{flag("b1=10.0.0.2"), flag("b2=10.0.0.2")}, "",
			map[string]string{"ping/b1": "10.0.0.2"},
			map[string][]string{"ping/b1": {"the collector's mesh (as b1)", "the collector's mesh (as b2)"}}},
		{"the same flag twice", []Target{flag("10.0.0.2"), flag("10.0.0.2")}, nil, "",
			map[string]string{"ping/10.0.0.2": "10.0.0.2"},
			map[string][]string{"ping/10.0.0.2": {"--ping.targets"}}},
		{"a name clash at two addresses: the flag wins", []Target{flag("lab-b=10.0.0.9")}, []Target{flag("lab-b=10.0.0.2")}, "",
			map[string]string{"ping/lab-b": "10.0.0.9"},
			map[string][]string{"ping/lab-b": {"--ping.targets (as lab-b)"}}},
		{"distinct addresses stay apart", []Target{flag("10.0.0.3")}, []Target{flag("lab-b=10.0.0.2")}, "",
			map[string]string{"ping/10.0.0.3": "10.0.0.3", "ping/lab-b": "10.0.0.2"},
			map[string][]string{"ping/10.0.0.3": {"--ping.targets"}, "ping/lab-b": {"the collector's mesh (as lab-b)"}}},
		// Two peers whose names make one id (names longer than a segment
		// holds, or from a collector before names were canonical): the one
		// already pinged keeps its address, whichever the collector lists first.
		{"a look-alike peer does not move the incumbent", nil, []Target{flag("NODE-A=10.0.0.66"), flag("node-a=10.0.0.2")}, "10.0.0.2",
			map[string]string{"ping/node-a": "10.0.0.2"},
			map[string][]string{"ping/node-a": {"the collector's mesh (as node-a)"}}},
		{"without an incumbent the first listed wins", nil, []Target{flag("NODE-A=10.0.0.66"), flag("node-a=10.0.0.2")}, "",
			map[string]string{"ping/node-a": "10.0.0.66"},
			map[string][]string{"ping/node-a": {"the collector's mesh (as NODE-A)"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := wantedTargets(c.static, c.peers, func(tg Target) bool { return c.incumbent != "" && tg.Host == c.incumbent })
			if len(got) != len(c.want) {
				t.Fatalf("targets %+v, want %v", got, c.want)
			}
			for id, host := range c.want {
				w, ok := got[id]
				if !ok || w.Host != host || !slices.Equal(w.namedBy, c.namedBy[id]) {
					t.Errorf("%s: %+v, want host %s named by %q", id, w, host, c.namedBy[id])
				}
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// In the lab: B named by --ping.targets and by the mesh gets one pinger, and
// B's kernel counts exactly the echo requests that one pinger sent (two
// pingers would double them); the child says both sources named it.
func TestTargetNamedTwiceIsPingedOnce(t *testing.T) {
	lab := netlab.New(t)
	src := openSource(t, Options{Env: source.Env{Netns: handle(t, lab.A)}, Targets: []Target{{Name: "b", Host: lab.IPB.String()}},
		Interval: 20 * time.Millisecond, Timeout: 500 * time.Millisecond})
	src.SetPeers([]string{"lab-b=" + lab.IPB.String()})
	if got := src.Targets(); !slices.Equal(got, []string{"ping/b"}) {
		t.Fatalf("targets %v, want only ping/b", got)
	}
	loop := newAgentLoop(t, src)
	time.Sleep(100 * time.Millisecond) // the pinger is running
	c0, ok0 := src.Counts("ping/b")
	b0 := lab.Nstat(t, lab.B)
	time.Sleep(500 * time.Millisecond)
	b1 := lab.Nstat(t, lab.B)
	c1, ok1 := src.Counts("ping/b")
	if !ok0 || !ok1 {
		t.Fatal("ping/b has no running pinger")
	}
	// Requests reaching B while nstat looked, against those the one pinger
	// sent in a window just around it: a few at the edges may differ.
	sent, got := int64(c1.Sent-c0.Sent), int64(b1["IcmpInEchos"]-b0["IcmpInEchos"])
	t.Logf("pinger sent %d echoes around the window; B's IcmpInEchos +%d", sent, got)
	if sent < 10 || got > sent+1 || got < sent-4 {
		t.Errorf("B received %d echo requests while the pinger sent %d: want one pinger's worth", got, sent)
	}
	loop.interval()
	m, ok := loop.tree.Metric("ping/b")
	if want := "Named by --ping.targets (as b) and the collector's mesh (as lab-b): one address, pinged once."; !ok || !strings.Contains(m.Description, want) {
		t.Errorf("ping/b says %q; want it to contain %q", m.Description, want)
	}
	if _, ok := loop.tree.Metric("ping/lab-b"); ok {
		t.Error("ping/lab-b is in the tree: the address got a second child")
	}
}

// A node with no target has no round trip to show: the ping root has no
// value (not 0 ms) and is OK (idle: nothing is wrong, nothing to measure),
// not UNKNOWN, which would grey out every node without peers; the clock
// beside it still reports.
func TestNoTargetsNoRootValue(t *testing.T) {
	lab := netlab.New(t)
	src := openSource(t, Options{Env: source.Env{Netns: handle(t, lab.A)}})
	loop := newAgentLoop(t, src)
	res := loop.interval()
	if v, ok := res.Values["ping"]; ok {
		t.Errorf("ping root has the value %v with no target; want none", v)
	}
	if res.Own["ping"] != tree.OK || res.State["ping"] != tree.OK {
		t.Errorf("ping root own %v, state %v; want OK without a value", res.Own["ping"], res.State["ping"])
	}
	if _, ok := res.Values["ping/clock/max_error"]; !ok {
		t.Error("the clock stopped reporting")
	}
	// With a target that answers, the root has its value again.
	src.SetPeers([]string{"lab-b=" + lab.IPB.String()})
	deadline := time.Now().Add(3 * time.Second)
	for {
		time.Sleep(100 * time.Millisecond)
		res = loop.interval()
		if v, ok := res.Values["ping"]; ok && v > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ping root %v with a target answering; want its RTT", res.Values["ping"])
		}
	}
}

// A target whose every echo is lost (an nftables rule in B drops them all)
// gives the root no round trip at all: it has no value, never a 0 ms that
// reads as a fast network, and it is CRIT through the loss child.
func TestEveryEchoLostNoRootValue(t *testing.T) {
	lab := netlab.New(t)
	for _, args := range [][]string{
		{"add", "table", "inet", "nbslost"},
		{"add", "chain", "inet", "nbslost", "in", "{ type filter hook input priority 0; policy accept; }"},
		{"add", "rule", "inet", "nbslost", "in", "ip", "saddr", lab.IPA.String(), "icmp", "type", "echo-request", "drop"},
	} {
		lab.Exec(t, lab.B, append([]string{"nft"}, args...)...)
	}
	src := openSource(t, Options{Env: source.Env{Netns: handle(t, lab.A)}, Targets: []Target{{Name: "b", Host: lab.IPB.String()}},
		Interval: 20 * time.Millisecond, Timeout: 100 * time.Millisecond})
	loop := newAgentLoop(t, src)
	deadline := time.Now().Add(5 * time.Second)
	var res tree.Result
	for {
		time.Sleep(300 * time.Millisecond)
		res = loop.interval()
		if c, _ := src.Counts("ping/b"); c.Lost > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no echo was counted lost within 5 s")
		}
	}
	if c, _ := src.Counts("ping/b"); c.Replies != 0 {
		t.Fatalf("%d replies came through the drop rule", c.Replies)
	}
	if v, ok := res.Values["ping"]; ok {
		t.Errorf("ping root has the value %v ms with every echo lost; want none", v)
	}
	if loss := res.Values["ping/b/loss"]; loss != 100 {
		t.Errorf("loss gauge %v%%, want 100%%", loss)
	}
	if res.State["ping/b/loss"] != tree.Crit || res.State["ping"] != tree.Crit {
		t.Errorf("loss %v, root %v with every echo lost: want both CRIT", res.State["ping/b/loss"], res.State["ping"])
	}
}
