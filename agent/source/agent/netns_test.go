package agent

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/agent/source/latencyrx"
	"github.com/nbs-project/nbs/internal/netns"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// A --netns agent's receive latency, expanded while another namespace
// carries heavy traffic: its programs run for every packet on the host,
// but are charged only the runs in their namespace, so a budget the host's
// traffic alone would break keeps them attached; and what they measure in
// their namespace still matches the reader's own SO_TIMESTAMPING.
func TestNetnsSourceChargedOwnWork(t *testing.T) {
	lab, other := netlab.New(t), netlab.New(t)
	h, err := netns.Resolve(lab.B)
	if err != nil {
		t.Fatal(err)
	}
	rx, err := latencyrx.Open(context.Background(), latencyrx.Options{Env: source.Env{Netns: h}, Triggered: true,
		// Every read timed, for the exact count against the reader's.
		ReadSample: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rx.Close() })
	if rx.Programs() == nil {
		netlab.SkipOrFail(t, "agent: receive latency unavailable: %s", rx.Capabilities()[0].GetReason())
	}
	s := newSelf(t, Options{Sources: []source.Source{rx}, BudgetPercent: 100, Hold: time.Second, MaxOn: time.Hour})
	collect(t, s)
	now := time.Now()
	expand := now.Add(time.Hour)
	s.Adapt(context.Background(), now, result(nil), expand)
	if !rx.Active() {
		t.Fatal("expand did not attach the receive latency programs")
	}

	stop := other.Flood(t, 2)
	defer stop()
	time.Sleep(2 * time.Second)
	r := collect(t, s)
	real := r.Gauges[catalog.Agent] / 100 // every run, as the kernel counts them
	charged, _ := s.Usage()
	t.Logf("under the other namespace's flood: BPF %.3f%% of a CPU, charged %.4f%%", 100*real, 100*charged)
	if real <= 0 || charged >= real/4 {
		t.Fatalf("charged %.4f%% of %.3f%%: want the foreign runs (most of them) left out", 100*charged, 100*real)
	}
	// A budget between the two: charging every run would detach.
	s.ctl.Budget = (real + charged) / 2
	s.Adapt(context.Background(), time.Now(), result(nil), expand)
	if !rx.Active() {
		t.Fatalf("detached under a %.3f%% budget by another namespace's traffic", 100*s.ctl.Budget)
	}

	// The oracle, with the flood still on: a UDP reader in B that waits
	// before each read, against its own software RX timestamps.
	const datagrams, delay = 20, 20 * time.Millisecond
	own := slowUDPReader(t, lab, datagrams, delay)
	total, ok := collect(t, rx).Histograms[catalog.LatencyRX]
	if !ok || total.Count != datagrams {
		t.Fatalf("latency/rx: %v, want exactly the %d datagrams read in B", total, datagrams)
	}
	for _, q := range []float64{0.5, 0.9} {
		got, want := total.Quantile(q), quantile(own, q)
		t.Logf("arrival to read p%.0f: probe %.3f ms, reader's SO_TIMESTAMPING %.3f ms", 100*q, got/1e6, want/1e6)
		if math.Abs(got-want) > want/16+1e6 {
			t.Errorf("arrival to read p%.0f: probe %.3f ms, reader's SO_TIMESTAMPING %.3f ms: more than 1/16 + 1 ms apart",
				100*q, got/1e6, want/1e6)
		}
	}
	collect(t, s)
	s.Adapt(context.Background(), time.Now(), result(nil), expand)
	if !rx.Active() {
		t.Error("detached after the oracle's interval")
	}
}

// slowUDPReader sends n datagrams from A to a reader in B that reads each
// after delay, and returns the reader's own arrival-to-read times: its
// SO_TIMESTAMPING software RX stamp against the return of recvmsg.
func slowUDPReader(t *testing.T, lab *netlab.Lab, n int, delay time.Duration) []float64 {
	t.Helper()
	dst := netip.AddrPortFrom(lab.IPB, 9110)
	var rx, tx int
	if err := lab.Do(lab.B, func() (err error) {
		if rx, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		tv := unix.Timeval{Sec: 3}
		if err := unix.SetsockoptTimeval(rx, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return err
		}
		if err := unix.SetsockoptInt(rx, unix.SOL_SOCKET, unix.SO_TIMESTAMPING,
			unix.SOF_TIMESTAMPING_RX_SOFTWARE|unix.SOF_TIMESTAMPING_SOFTWARE); err != nil {
			return err
		}
		return unix.Bind(rx, &unix.SockaddrInet4{Addr: dst.Addr().As4(), Port: int(dst.Port())})
	}); err != nil {
		t.Fatalf("reader in %s: %v", lab.B, err)
	}
	t.Cleanup(func() { unix.Close(rx) })
	if err := lab.Do(lab.A, func() (err error) {
		tx, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		return err
	}); err != nil {
		t.Fatalf("sender in %s: %v", lab.A, err)
	}
	t.Cleanup(func() { unix.Close(tx) })
	to := &unix.SockaddrInet4{Addr: dst.Addr().As4(), Port: int(dst.Port())}
	buf, oob := make([]byte, 256), make([]byte, 512)
	var own []float64
	for i := range n {
		if err := unix.Sendto(tx, []byte(fmt.Sprintf("datagram %d", i)), 0, to); err != nil {
			t.Fatalf("sendto: %v", err)
		}
		time.Sleep(delay)
		_, oobn, _, _, err := unix.Recvmsg(rx, buf, oob, 0)
		returned := time.Now()
		if err != nil {
			t.Fatalf("recvmsg %d: %v", i, err)
		}
		stamp, err := rxStamp(oob[:oobn])
		if err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
		own = append(own, float64(returned.Sub(stamp).Nanoseconds()))
	}
	return own
}

func rxStamp(oob []byte) (time.Time, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return time.Time{}, err
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SO_TIMESTAMPING && len(m.Data) >= 16 {
			return time.Unix(int64(binary.NativeEndian.Uint64(m.Data[0:])), int64(binary.NativeEndian.Uint64(m.Data[8:]))), nil
		}
	}
	return time.Time{}, fmt.Errorf("no SO_TIMESTAMPING in %d control messages", len(msgs))
}

// quantile is the q-quantile of vs by loglinear's rule (rank ceil(q*n)).
func quantile(vs []float64, q float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	return s[max(int(math.Ceil(q*float64(len(s))))-1, 0)]
}

// By default the receive latency source is always on: the agent attaches
// it with nothing in trouble and nobody looking, and says why.
func TestReceiveLatencyAlwaysOnByDefault(t *testing.T) {
	lab := netlab.New(t)
	h, err := netns.Resolve(lab.B)
	if err != nil {
		t.Fatal(err)
	}
	rx, err := latencyrx.Open(context.Background(), latencyrx.Options{Env: source.Env{Netns: h}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rx.Close() })
	if rx.Programs() == nil {
		netlab.SkipOrFail(t, "agent: receive latency unavailable: %s", rx.Capabilities()[0].GetReason())
	}
	if !rx.AlwaysOn() || !strings.Contains(rx.Capabilities()[0].GetReason(), "always attached") {
		t.Fatalf("not always on by default: %v", rx.Capabilities())
	}
	s := newSelf(t, Options{Sources: []source.Source{rx}, BudgetPercent: 100, Hold: time.Second, MaxOn: time.Second})
	collect(t, s)
	s.Adapt(context.Background(), time.Now(), result(nil), time.Time{})
	if !rx.Active() {
		t.Fatal("not attached without trouble or expand")
	}
	ev := collect(t, s).Events
	if len(ev) != 1 || ev[0].GetFields()["action"] != "attached" || ev[0].GetFields()["reason"] != "always on" {
		t.Errorf("events %v, want one attach, always on", ev)
	}
	// Past --triggered.max it stays.
	time.Sleep(1100 * time.Millisecond)
	collect(t, s)
	s.Adapt(context.Background(), time.Now(), result(nil), time.Time{})
	if !rx.Active() {
		t.Error("detached after --triggered.max")
	}
}

// An operator's expand makes the receive latency source time every packet
// and UDP socket, not its sample, for the expand's duration; over the
// overhead budget it goes back to its sample at once (still attached: the
// cost that broke the budget was the expand's) and stays there until that
// expand ends. Events say each change and why.
func TestReceiveLatencyExpandTimesEverything(t *testing.T) {
	lab := netlab.New(t)
	h, err := netns.Resolve(lab.B)
	if err != nil {
		t.Fatal(err)
	}
	rx, err := latencyrx.Open(context.Background(), latencyrx.Options{Env: source.Env{Netns: h}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rx.Close() })
	if rx.Programs() == nil {
		netlab.SkipOrFail(t, "agent: receive latency unavailable: %s", rx.Capabilities()[0].GetReason())
	}
	s := newSelf(t, Options{Sources: []source.Source{rx}, BudgetPercent: 100, Hold: time.Second, MaxOn: time.Hour})
	ctx := context.Background()
	collect(t, s)
	now := time.Now()
	s.Adapt(ctx, now, result(nil), time.Time{})
	if !rx.Active() || rx.Expanded() {
		t.Fatalf("before any expand: attached %v, expanded %v; want attached, sampling", rx.Active(), rx.Expanded())
	}
	until := now.Add(time.Minute)
	s.Adapt(ctx, now.Add(time.Second), result(nil), until)
	if !rx.Expanded() {
		t.Fatal("an expand did not make the source time everything")
	}
	s.Adapt(ctx, until, result(nil), until)
	if rx.Expanded() {
		t.Fatal("still timing everything once the expand ended")
	}
	actions := func(evs []*nbsv1.Event) []string {
		var out []string
		for _, e := range evs {
			if a := e.GetFields()["action"]; strings.HasPrefix(a, "measuring") {
				out = append(out, a+": "+e.GetFields()["reason"])
			}
		}
		return out
	}
	want := []string{"measuring everything: an operator expanded the node", "measuring its sample: the expand ended"}
	if got := actions(collect(t, s).Events); !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}

	// A budget the expanded programs break.
	s.opts.BudgetPercent = 1e-6
	until = time.Now().Add(time.Minute)
	s.Adapt(ctx, time.Now(), result(nil), until)
	if !rx.Expanded() {
		t.Fatal("the second expand did not make the source time everything")
	}
	dst := netip.AddrPortFrom(lab.IPB, 9300)
	err = lab.Do(lab.B, func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		t.Cleanup(func() { unix.Close(fd) })
		return unix.Bind(fd, &unix.SockaddrInet4{Addr: dst.Addr().As4(), Port: int(dst.Port())})
	})
	if err != nil {
		t.Fatal(err)
	}
	lab.SendUDP(t, lab.A, dst, 200, 64, 0)
	if r := collect(t, s); r.Gauges[catalog.Agent] <= 1e-6 {
		t.Fatalf("BPF used %g%% of a CPU: not over the budget, nothing to test", r.Gauges[catalog.Agent])
	}
	s.Adapt(ctx, time.Now(), result(nil), until)
	if rx.Expanded() || !rx.Active() {
		t.Fatalf("over the budget while expanded: expanded %v, attached %v; want the sample, attached", rx.Expanded(), rx.Active())
	}
	got := actions(collect(t, s).Events)
	if len(got) != 1 || !strings.HasPrefix(got[0], "measuring its sample: over budget, ") || !strings.HasSuffix(got[0], "back to the sample until the expand ends") {
		t.Errorf("events %q, want the return to the sample over the budget", got)
	}
	s.Adapt(ctx, time.Now(), result(nil), until)
	if rx.Expanded() {
		t.Error("timing everything again within the expand that broke the budget")
	}
}
