package dns

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/agent/catalog"
	probe "github.com/nbs-project/nbs/agent/probe/dns"
	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/agent/source/sourcetest"
	"github.com/nbs-project/nbs/internal/loglinear"
	"github.com/nbs-project/nbs/internal/netns"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

var netipLoopback = netip.MustParseAddr("127.0.0.1")

// testTimeout is the source's query timeout in the tests: short, so a
// timeout costs the test a second rather than five.
const testTimeout = time.Second

// slack is what a client's own system calls and wake-up may add to the
// kernel's time of an answer on a loaded machine.
const slack = 2 * time.Millisecond

func open(t *testing.T, opts Options) *Source {
	t.Helper()
	opts.Timeout = testTimeout
	s, err := Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	caps := s.Capabilities()
	if len(caps) != 1 || caps[0].GetName() != capName {
		t.Fatalf("capabilities %v, want one, %s", caps, capName)
	}
	if !caps[0].GetAvailable() {
		netlab.SkipOrFail(t, "dns: %s", caps[0].GetReason())
	}
	if err := s.SetActive(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	return s
}

func collect(t *testing.T, s *Source) source.Reading {
	t.Helper()
	r, err := s.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	for _, m := range r.Metrics {
		if defined[m.ID] {
			t.Errorf("metric %s defined twice", m.ID)
		}
		defined[m.ID] = true
	}
	for id := range r.Counters {
		if !defined[id] {
			t.Errorf("counter %s has no definition", id)
		}
	}
	for _, e := range r.Events {
		if !defined[e.GetMetricId()] {
			t.Errorf("event on %s, which has no definition", e.GetMetricId())
		}
	}
	return r
}

// TestAgainstClientAndServer asks the lab's server (in B) from A: answers
// delayed 2, 10 and 40 ms, errors of each kind, and queries it never
// answers, over IPv4 and IPv6. Every count must equal what the server
// sent and the client received, the latency percentiles must be within
// the histogram's error of the client's own timings, timeouts must be
// counted once the timeout passed, and the slow, failed and unanswered
// queries must be evidence naming them.
func TestAgainstClientAndServer(t *testing.T) {
	lab := netlab.New(t)
	a, err := netns.Resolve(lab.A)
	if err != nil {
		t.Fatal(err)
	}
	b, err := netns.Resolve(lab.B)
	if err != nil {
		t.Fatal(err)
	}
	// Counting in A only: other tests' DNS on this host stays out.
	s := open(t, Options{Env: source.Env{Netns: a, EvidencePerSecond: 1000}, Slow: 30 * time.Millisecond})
	srv4 := serveDNS(t, b, lab.IPB)
	srv6 := serveDNS(t, b, lab.IP6B)
	base := collect(t, s)
	led := sourcetest.NewLedger(base.Counters)

	type plan struct {
		prefix string
		n      int
	}
	plans := []plan{{"ok-2", 20}, {"ok-10", 15}, {"ok-40", 5}, {"nx", 6}, {"fail", 4}, {"refused", 3}, {"drop", 2}}
	var answers []answer
	id := uint16(100)
	for _, p := range plans {
		for i := range p.n {
			id++
			srv := srv4
			if i%3 == 2 { // a third over IPv6
				srv = srv6
			}
			answers = append(answers, ask(t, a, srv.Addr, id, fmt.Sprintf("%s-%d.test.example", p.prefix, i), 300*time.Millisecond))
		}
	}
	sentAt := time.Now()

	// Oracle: what the client got, and what the servers say.
	want := map[string]uint64{}
	var lat []float64
	var timedOut []string
	for _, an := range answers {
		want[catalog.DNS]++
		switch {
		case an.timedOut:
			want[catalog.DNSTimeouts]++
			timedOut = append(timedOut, an.name)
			continue
		case an.rcode != rcodeNoError:
			want[catalog.DNSErrors]++
			want[catalog.DNSRcode(catalog.RcodeName(uint8(an.rcode))).ID]++
		}
		lat = append(lat, float64(an.latency.Nanoseconds()))
	}
	recv4, sent4 := srv4.counts()
	recv6, sent6 := srv6.counts()
	if uint64(recv4+recv6) != want[catalog.DNS] || len(timedOut) != 2 ||
		sent4[rcodeNXDomain]+sent6[rcodeNXDomain] != 6 || sent4[rcodeServFail]+sent6[rcodeServFail] != 4 ||
		sent4[rcodeRefused]+sent6[rcodeRefused] != 3 {
		t.Fatalf("oracle: servers received %d+%d, sent %v %v; client %v, timed out %v", recv4, recv6, sent4, sent6, want, timedOut)
	}

	// Collect until the unanswered queries have timed out (1 s after the
	// last was sent) and their evidence is read.
	var events []*nbsv1.Event
	hist := loglinear.New()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := collect(t, s)
		led.Add(r.Counters, r.Retired)
		events = append(events, r.Events...)
		if h := r.Histograms[catalog.DNSLatency]; h != nil {
			hist.Merge(h)
		}
		if time.Since(sentAt) > testTimeout && led.Inc[catalog.DNSTimeouts] >= want[catalog.DNSTimeouts] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("timeouts %d after 10 s, want %d", led.Inc[catalog.DNSTimeouts], want[catalog.DNSTimeouts])
		}
		time.Sleep(100 * time.Millisecond)
	}

	for _, id := range []string{catalog.DNS, catalog.DNSErrors, catalog.DNSTimeouts,
		catalog.DNSRcode("nxdomain").ID, catalog.DNSRcode("servfail").ID, catalog.DNSRcode("refused").ID} {
		if led.Inc[id] != want[id] {
			t.Errorf("%s grew %d, the client saw %d", id, led.Inc[id], want[id])
		}
	}
	t.Logf("counted: %d queries, %d errors, %d timeouts", led.Inc[catalog.DNS], led.Inc[catalog.DNSErrors], led.Inc[catalog.DNSTimeouts])
	if got := sumChildren(led, catalog.DNSErrors); got != want[catalog.DNSErrors] {
		t.Errorf("the rcode children of dns/errors grew %d, want %d", got, want[catalog.DNSErrors])
	}

	// By client: A's one owner; by server: each address its own.
	sourcetest.CheckSum(t, led, catalog.DNSClients)
	sourcetest.CheckSum(t, led, catalog.DNSTimeouts)
	if led.Inc[catalog.DNSClients] != want[catalog.DNS] {
		t.Errorf("dns/clients grew %d, want %d", led.Inc[catalog.DNSClients], want[catalog.DNS])
	}
	server := func(ip string) map[string]uint64 {
		base := catalog.DNSServers + "/" + catalog.MetricSegment(ip)
		return map[string]uint64{"queries": led.Inc[base], "errors": led.Inc[base+"/"+catalog.DNSServerErrors],
			"timeouts": led.Inc[base+"/"+catalog.DNSServerTimeouts]}
	}
	s4, s6 := server(lab.IPB.String()), server(lab.IP6B.String())
	if s4["queries"] != uint64(recv4) || s6["queries"] != uint64(recv6) ||
		s4["errors"] != uint64(sent4[rcodeServFail]+sent4[rcodeRefused]) || s6["errors"] != uint64(sent6[rcodeServFail]+sent6[rcodeRefused]) ||
		s4["timeouts"]+s6["timeouts"] != 2 || s4["queries"]+s6["queries"] != led.Inc[catalog.DNSServers] {
		t.Errorf("by server: %s %v (received %d, sent %v), %s %v (received %d, sent %v), dns/servers %d",
			lab.IPB, s4, recv4, sent4, lab.IP6B, s6, recv6, sent6, led.Inc[catalog.DNSServers])
	}

	// Latency: every answer, at the client's percentiles within the
	// histogram's error (a bucket is 1/16 of its power of two wide, and
	// the kernel's time excludes the client's own system calls, which
	// the slack allows for).
	slices.Sort(lat)
	if hist.Count != uint64(len(lat)) {
		t.Errorf("latency histogram holds %d answers, the client got %d", hist.Count, len(lat))
	}
	for _, q := range []float64{0.5, 0.9, 0.99} {
		client := lat[max(int(math.Ceil(q*float64(len(lat))))-1, 0)]
		got := hist.Quantile(q)
		t.Logf("p%g: kernel %.2f ms, client %.2f ms", q*100, got/1e6, client/1e6)
		if got > client*(1+1.0/16) || got < client*(1-1.0/16)-float64(slack) {
			t.Errorf("p%g: kernel %.3f ms, client %.3f ms: beyond the histogram's error", q*100, got/1e6, client/1e6)
		}
	}

	// Evidence: each failed, slow (40 ms > 30 ms) and unanswered query
	// by name, on the metric it explains, and nothing else.
	// An answer is slow by the kernel's time, which is the client's less
	// up to slack: one the client waited 30 ms + slack for must be
	// evidence, one under 30 ms must not; between, either (a loaded
	// machine makes the server's 10 ms sleeps that long too).
	wantEv := map[string]string{}
	client := map[string]time.Duration{}
	maybe := map[string]bool{}
	for _, an := range answers {
		name := an.name + "."
		client[name] = an.latency
		switch {
		case an.timedOut:
			wantEv[name] = catalog.DNSTimeouts
		case an.rcode != 0:
			wantEv[name] = catalog.DNSRcode(catalog.RcodeName(uint8(an.rcode))).ID
		case an.latency >= 30*time.Millisecond+slack:
			wantEv[name] = catalog.DNSLatency
		case an.latency >= 30*time.Millisecond:
			maybe[name] = true
		}
	}
	got := map[string]string{}
	slowEv := loglinear.New() // the kernel's own latency of each answer over 30 ms, from its evidence
	for _, e := range events {
		f := e.GetFields()
		name := f["name"]
		got[name] = e.GetMetricId()
		if f["netns"] != strconv.FormatUint(uint64(a.Inode), 10) || f["qtype"] != "A" || f["server"] == "" {
			t.Errorf("event %v on %s", f, e.GetMetricId())
		}
		if f["outcome"] == "timeout" {
			continue
		}
		ms, err := strconv.ParseFloat(f["latency_ms"], 64)
		if err != nil {
			t.Errorf("event %v: latency_ms: %v", f, err)
			continue
		}
		// Per query: the kernel's time is the client's less its own
		// system calls and wake-up.
		k := time.Duration(math.Round(ms * 1e6))
		if k > client[name] || k < client[name]-slack {
			t.Errorf("%s: kernel %v, client %v", name, k, client[name])
		}
		if k >= 30*time.Millisecond {
			slowEv.Record(uint64(k.Nanoseconds()))
		}
	}
	for name, id := range wantEv {
		if got[name] != id {
			t.Errorf("evidence of %s: on %q, want %s", name, got[name], id)
		}
	}
	for name, id := range got {
		if wantEv[name] == "" && !(maybe[name] && id == catalog.DNSLatency) {
			t.Errorf("evidence of %s on %s, which the client got in %v", name, id, client[name])
		}
	}
	if slowAnswers := countOn(got, catalog.DNSLatency); slowAnswers < 5 {
		t.Errorf("%d slow answers have evidence, want at least the 5 of 40 ms", slowAnswers)
	}

	// Counting A only, the programs' runs in A are counted for the
	// overhead budget: at least every query sent and answer received.
	runs, err := s.RunsInScope()
	if err != nil {
		t.Fatal(err)
	}
	if runs[probe.HookQuery] < want[catalog.DNS] || runs[probe.HookAnswer] < uint64(len(lat)) {
		t.Errorf("runs in scope %v; want at least %d queries and %d answers", runs, want[catalog.DNS], len(lat))
	}
	// The histogram's buckets from 30 ms on hold exactly the answers the
	// evidence timed there.
	for i := loglinear.Index(uint64(30 * time.Millisecond)); i <= loglinear.Index(uint64(time.Minute)); i++ {
		if hist.Counts[i] != slowEv.Counts[i] && loglinear.Lower(i) >= uint64(30*time.Millisecond) {
			t.Errorf("latency bucket from %v holds %d answers, the evidence %d", time.Duration(loglinear.Lower(i)), hist.Counts[i], slowEv.Counts[i])
		}
	}
}

func countOn(got map[string]string, id string) int {
	n := 0
	for _, v := range got {
		if v == id {
			n++
		}
	}
	return n
}

func sumChildren(led *sourcetest.Ledger, parent string) uint64 {
	sum, _ := sourcetest.ChildSum(led.Inc, parent)
	return sum
}

// TestOwners asks a server inside each namespace of an owner lab (a pod's,
// a named one, a process's), over loopback, with the probe counting every
// namespace: each owner's children of dns/clients and dns/errors/nxdomain
// must equal what its server received and sent, add up to their parents,
// and the evidence must name the owner.
func TestOwners(t *testing.T) {
	l := sourcetest.NewOwnerLab(t)
	s := open(t, Options{Env: source.Env{Netns: l.Self, AllNetns: true, Owners: l.Resolver, TopOwners: 64,
		EvidencePerSecond: 10000}, MaxEventsPerInterval: 1000})
	base := collect(t, s)
	led := sourcetest.NewLedger(base.Counters)
	collectFn := func() (map[string]uint64, []string, []*nbsv1.Event) {
		r := collect(t, s)
		return r.Counters, r.Retired, r.Events
	}
	counts := []int{7, 5, 3}
	servers := make([]*dnsServer, len(l.Cases))
	for i, c := range l.Cases {
		servers[i] = serveDNS(t, c.H, netipLoopback)
		for j := range counts[i] {
			ask(t, c.H, servers[i].Addr, uint16(j+1), fmt.Sprintf("ok-0-%d.owner.example", j), time.Second)
			ask(t, c.H, servers[i].Addr, uint16(j+100), fmt.Sprintf("nx-%d.owner.example", j), time.Second)
		}
	}
	events := l.Collect(t, led, collectFn)
	nx := catalog.DNSRcode("nxdomain").ID
	for i, c := range l.Cases {
		recv, sent := servers[i].counts()
		if recv != 2*counts[i] || sent[rcodeNXDomain] != counts[i] {
			t.Fatalf("%s: oracle: server received %d, sent %v", c.Label, recv, sent)
		}
		if got := led.Inc[catalog.DNSClients+"/"+c.ID]; got != uint64(recv) {
			t.Errorf("%s/%s = %d, its server received %d", catalog.DNSClients, c.ID, got, recv)
		}
		if got := led.Inc[nx+"/"+c.ID]; got != uint64(sent[rcodeNXDomain]) {
			t.Errorf("%s/%s = %d, its server sent %d NXDOMAIN", nx, c.ID, got, sent[rcodeNXDomain])
		}
		l.CheckEvents(t, events, c, nx)
	}
	sourcetest.CheckSum(t, led, catalog.DNSClients)
	sourcetest.CheckSum(t, led, nx)
	// Counting every namespace, every run is the source's own.
	if runs, err := s.RunsInScope(); err != nil || runs != nil {
		t.Errorf("RunsInScope = %v, %v; want nil (every run in scope)", runs, err)
	}
}

// TestTimeoutEvidenceCapped: the evidence of timed-out queries, which the
// agent makes itself (no kernel rate limit), passes the per-interval cap,
// and what the cap gives up is counted; the timeouts themselves are all
// counted.
func TestTimeoutEvidenceCapped(t *testing.T) {
	const unanswered, maxEvents = 5, 3
	lab := netlab.New(t)
	a, err := netns.Resolve(lab.A)
	if err != nil {
		t.Fatal(err)
	}
	b, err := netns.Resolve(lab.B)
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, Options{Env: source.Env{Netns: a}, MaxEventsPerInterval: maxEvents})
	srv := serveDNS(t, b, lab.IPB)
	base := collect(t, s)
	led := sourcetest.NewLedger(base.Counters)
	for i := range unanswered {
		if an := ask(t, a, srv.Addr, uint16(i+1), fmt.Sprintf("drop-%d.cap.example", i), 50*time.Millisecond); !an.timedOut {
			t.Fatalf("drop-%d answered", i)
		}
	}
	// All five time out before the next collection, so that one reading
	// would carry them all but for the cap.
	time.Sleep(testTimeout + 100*time.Millisecond)
	var events []*nbsv1.Event
	deadline := time.Now().Add(10 * time.Second)
	for led.Inc[catalog.DNSTimeouts] < unanswered {
		if time.Now().After(deadline) {
			t.Fatalf("%d timeouts after 10 s, want %d", led.Inc[catalog.DNSTimeouts], unanswered)
		}
		r := collect(t, s)
		led.Add(r.Counters, r.Retired)
		events = append(events, r.Events...)
		time.Sleep(100 * time.Millisecond)
		if len(r.Events) > maxEvents {
			t.Errorf("a reading carries %d events, the cap is %d", len(r.Events), maxEvents)
		}
	}
	c, err := s.EvidenceCounts()
	if err != nil {
		t.Fatal(err)
	}
	if led.Inc[catalog.DNSTimeouts] != unanswered || len(events) != maxEvents ||
		c.Kept != maxEvents || c.Dropped[source.CapInterval] != unanswered-maxEvents {
		t.Errorf("timeouts %d, events %d, counted kept %d and capped %d; want %d, %d, %d, %d",
			led.Inc[catalog.DNSTimeouts], len(events), c.Kept, c.Dropped[source.CapInterval],
			unanswered, maxEvents, maxEvents, unanswered-maxEvents)
	}
}

// TestFoldKeepsCounting folds every idle counter out of the kernel's map
// at once: the counts must go on adding up across the fold, and a key
// counted again after its fold must add to what was folded.
func TestFoldKeepsCounting(t *testing.T) {
	lab := netlab.New(t)
	a, err := netns.Resolve(lab.A)
	if err != nil {
		t.Fatal(err)
	}
	b, err := netns.Resolve(lab.B)
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, Options{Env: source.Env{Netns: a}, foldAbove: -1, foldIdle: 1})
	srv := serveDNS(t, b, lab.IPB)
	base := collect(t, s)
	led := sourcetest.NewLedger(base.Counters)
	nx := catalog.DNSRcode("nxdomain").ID
	id := uint16(0)
	last := map[string]uint64{}
	round := func(n int) {
		for range n {
			id++
			ask(t, a, srv.Addr, id, fmt.Sprintf("nx-%d.fold.example", id), time.Second)
		}
		for range 3 { // counted, then idle twice: folded
			r := collect(t, s)
			// A source's counters are cumulative: one that went back
			// would lose what was folded (the ledger reads it as a
			// restart).
			for id, v := range r.Counters {
				if v < last[id] {
					t.Errorf("%s went back from %d to %d", id, last[id], v)
				}
				last[id] = v
			}
			led.Add(r.Counters, r.Retired)
		}
	}
	round(3)
	folded := s.probeFolded()
	round(2)
	if folded == 0 || s.probeFolded() <= folded {
		t.Errorf("folded keys %d after the first round, %d after the second: want some, then more", folded, s.probeFolded())
	}
	if led.Inc[catalog.DNS] != 5 || led.Inc[nx] != 5 || led.Inc[catalog.DNSClients] != 5 {
		t.Errorf("across folds: queries %d, nxdomain %d, by client %d; want 5 each", led.Inc[catalog.DNS], led.Inc[nx], led.Inc[catalog.DNSClients])
	}
	sourcetest.CheckSum(t, led, catalog.DNSClients)
	sourcetest.CheckSum(t, led, nx)
}

// Without BPF the source measures nothing, says why in its capability, and
// refuses to attach with that reason; there is no /proc fallback.
func TestWithoutBPF(t *testing.T) {
	s, err := Open(context.Background(), Options{Env: source.Env{DisableBPF: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	caps := s.Capabilities()
	if len(caps) != 1 || caps[0].GetName() != capName || caps[0].GetAvailable() || caps[0].GetReason() != source.BPFDisabled {
		t.Fatalf("capabilities %v, want %s unavailable: %s", caps, capName, source.BPFDisabled)
	}
	if err := s.SetActive(context.Background(), true); err == nil || !strings.Contains(err.Error(), source.BPFDisabled) {
		t.Errorf("SetActive(true) = %v, want the reason", err)
	}
	r, err := s.Collect(context.Background())
	if err != nil || len(r.Metrics) != 0 || len(r.Counters) != 0 || len(r.Events) != 0 {
		t.Errorf("Collect = %+v, %v; want nothing", r, err)
	}
	if s.Programs() != nil {
		t.Errorf("programs %v without BPF", s.Programs())
	}
}

// TestGlibcResolver lets glibc's own resolver (getent, through `ip netns
// exec` and a resolv.conf of the lab namespace's) ask the lab's server: it
// sends A and AAAA queries in parallel from one socket, with EDNS, as
// applications do. Every query the server received must be counted, every
// answer it sent timed, and every NXDOMAIN counted as such.
func TestGlibcResolver(t *testing.T) {
	if _, err := exec.LookPath("getent"); err != nil {
		netlab.SkipOrFail(t, "getent: %v", err)
	}
	lab := netlab.New(t)
	a, err := netns.Resolve(lab.A)
	if err != nil {
		t.Fatal(err)
	}
	b, err := netns.Resolve(lab.B)
	if err != nil {
		t.Fatal(err)
	}
	srv := serveDNS(t, b, lab.IPB)
	// ip netns exec mounts /etc/netns/<name>/resolv.conf over /etc/resolv.conf.
	dir := filepath.Join("/etc/netns", lab.A)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	conf := fmt.Sprintf("nameserver %s\noptions timeout:2 attempts:1 edns0\n", lab.IPB)
	if err := os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	s := open(t, Options{Env: source.Env{Netns: a}})
	base := collect(t, s)
	led := sourcetest.NewLedger(base.Counters)
	hist := loglinear.New()
	for i, name := range []string{"ok-1-a.glibc.example", "nx-b.glibc.example", "ok-3-c.glibc.example", "nx-d.glibc.example"} {
		out, err := exec.Command("ip", "netns", "exec", lab.A, "getent", "ahosts", name).CombinedOutput()
		// getent exits 2 for a name that does not exist or has no address.
		var ee *exec.ExitError
		if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 2) {
			t.Fatalf("getent %d: %v: %s", i, err, out)
		}
	}
	received, sent := srv.counts()
	answered := 0
	for _, v := range sent {
		answered += v
	}
	eventually := time.Now().Add(5 * time.Second)
	for {
		r := collect(t, s)
		led.Add(r.Counters, r.Retired)
		if h := r.Histograms[catalog.DNSLatency]; h != nil {
			hist.Merge(h)
		}
		if hist.Count >= uint64(answered) || time.Now().After(eventually) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("glibc: the server received %d queries, answered %v", received, sent)
	if received < 8 || sent[rcodeNXDomain] < 4 {
		t.Fatalf("oracle: glibc sent %d queries, %v answered; want A and AAAA for each of 4 names", received, sent)
	}
	if led.Inc[catalog.DNS] != uint64(received) || hist.Count != uint64(answered) ||
		led.Inc[catalog.DNSRcode("nxdomain").ID] != uint64(sent[rcodeNXDomain]) || led.Inc[catalog.DNSTimeouts] != 0 {
		t.Errorf("counted %d queries, %d answers timed, %d NXDOMAIN, %d timeouts; the server received %d, answered %v",
			led.Inc[catalog.DNS], hist.Count, led.Inc[catalog.DNSRcode("nxdomain").ID], led.Inc[catalog.DNSTimeouts], received, sent)
	}
}
