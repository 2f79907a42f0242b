package latencysizes

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nbs-project/nbs/agent/probe/bpfhist"
	"github.com/nbs-project/nbs/internal/loglinear"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

func load(t *testing.T, opts Options) *Probe {
	t.Helper()
	p, err := Load(opts)
	if err != nil {
		netlab.SkipOrFail(t, "latencysizes: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// sizesOf returns the cumulative sizes of device name in namespace netns
// (parallel tests' labs have devices of the same names elsewhere).
func sizesOf(t *testing.T, p *Probe, netns uint32, name string) Sizes {
	t.Helper()
	devs, err := p.Devices()
	if err != nil {
		t.Fatal(err)
	}
	for d, s := range devs {
		if d.Name == name && d.Netns == netns {
			return *s
		}
	}
	return Sizes{}
}

type linkStats struct{ rxBytes, rxPackets, txBytes, txPackets uint64 }

// ipLink is the oracle: the device's own counters, `ip -s link`.
func ipLink(t *testing.T, lab *netlab.Lab, ns, dev string) linkStats {
	t.Helper()
	out := lab.Exec(t, ns, "ip", "-s", "-j", "link", "show", "dev", dev)
	var ls []struct {
		Stats struct {
			RX struct{ Bytes, Packets uint64 } `json:"rx"`
			TX struct{ Bytes, Packets uint64 } `json:"tx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal([]byte(out), &ls); err != nil || len(ls) != 1 {
		t.Fatalf("ip -s -j link show dev %s: %v: %q", dev, err, out)
	}
	s := ls[0].Stats
	return linkStats{s.RX.Bytes, s.RX.Packets, s.TX.Bytes, s.TX.Packets}
}

// capture runs tcpdump on dev in ns until the returned stop, which
// returns the frames captured leaving by dev: all of them, and those of at least 1,536
// bytes (where the histograms' bucket above the MTU's frames begins).
func capture(t *testing.T, lab *netlab.Lab, ns, dev string) (stop func() (all, large uint64)) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "cap.pcap")
	var ls []struct {
		Address string `json:"address"`
	}
	if out := lab.Exec(t, ns, "ip", "-j", "link", "show", "dev", dev); json.Unmarshal([]byte(out), &ls) != nil || len(ls) != 1 {
		t.Fatalf("ip -j link show dev %s: %q", dev, out)
	}
	// Frames leaving by dev are those from its address, filtered in the
	// kernel, so tcpdump's count of packets its filter passed is theirs
	// (-Q out filters in tcpdump, after that count).
	cmd := exec.Command("ip", "netns", "exec", ns, "tcpdump", "-i", dev, "-nn", "-s", "96", "-B", "16384",
		"--immediate-mode", "-U", "-w", file, "ether", "src", ls[0].Address)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("tcpdump: %v", err)
	}
	// tcpdump says it listens once its socket is bound.
	r := bufio.NewReader(stderr)
	line, err := r.ReadString('\n')
	if err != nil || !strings.Contains(line, "listening on") {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("tcpdump did not start: %q: %v", line, err)
	}
	return func() (uint64, uint64) {
		t.Helper()
		// Written packet by packet (-U): it has caught up once the file
		// stops growing, and only then may it stop, with nothing left in
		// its buffer.
		var size int64 = -1
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			fi, err := os.Stat(file)
			if err == nil && fi.Size() == size {
				break
			}
			if err == nil {
				size = fi.Size()
			}
		}
		_ = cmd.Process.Signal(syscall.SIGINT)
		rest, _ := io.ReadAll(r)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("tcpdump: %v: %s", err, rest)
		}
		// Its summary: "N packets captured", "M packets received by
		// filter", "K packets dropped by kernel".
		said := map[string]uint64{}
		for _, l := range strings.Split(string(rest), "\n") {
			if num, what, ok := strings.Cut(strings.TrimSpace(l), " packets "); ok {
				v, err := strconv.ParseUint(num, 10, 64)
				if err == nil {
					said[what] = v
				}
			}
		}
		if said["captured"] != said["received by filter"] || said["dropped by kernel"] != 0 {
			t.Fatalf("tcpdump missed packets, no oracle: %s", rest)
		}
		count := func(filter ...string) uint64 {
			out, err := exec.Command("tcpdump", append([]string{"-r", file, "-nn"}, filter...)...).Output()
			if err != nil {
				t.Fatalf("tcpdump -r: %v", err)
			}
			return uint64(strings.Count(string(out), "\n"))
		}
		return count(), count("greater", "1536")
	}
}

// snapshot reads the probe's sizes of vA and vB and the devices' own
// counters at one moment: a packet the lab sends on its own (IPv6
// neighbour discovery) between the reads would make them disagree, so the
// probe is read again after the devices, until nothing moved in between.
func snapshot(t *testing.T, lab *netlab.Lab, p *Probe, inA, inB uint32) (a, b Sizes, la, lb linkStats) {
	t.Helper()
	for range 10 {
		a, b = sizesOf(t, p, inA, "vA"), sizesOf(t, p, inB, "vB")
		la, lb = ipLink(t, lab, lab.A, "vA"), ipLink(t, lab, lab.B, "vB")
		a2, b2 := sizesOf(t, p, inA, "vA"), sizesOf(t, p, inB, "vB")
		if a2.Counts == a.Counts && b2.Counts == b.Counts {
			return a, b, la, lb
		}
	}
	t.Fatal("vA and vB never stopped sending long enough to read them")
	return
}

// large counts a histogram's values of at least 1,536 bytes.
func large(h *loglinear.Histogram) uint64 {
	from := loglinear.Index(1536)
	var n uint64
	for b, c := range h.Counts {
		if b >= from {
			n += c
		}
	}
	return n
}

func delta(prev, cur bpfhist.Hist) *loglinear.Histogram {
	var d bpfhist.Delta
	d.Reset(prev)
	return d.Next(cur)
}

// With offloads on and off on the lab's veth pair, the sizes move as the
// devices' own counters (`ip -s link`) and the wire (tcpdump on the
// sender's device) say they must: every packet and byte the driver was
// handed and the stack received is counted, exactly; the driver's frames
// of 1,536 bytes and more (above the MTU's 1,514) are tcpdump's, exactly;
// with TSO/GSO on, large packets are sent and received; with them and GRO
// off, TCP still sends large ones, but none reaches the driver or the
// receiving stack.
func TestSizesFollowOffloads(t *testing.T) {
	if _, err := exec.LookPath("tcpdump"); err != nil {
		netlab.SkipOrFail(t, "latencysizes: tcpdump not found: %v", err)
	}
	lab := netlab.New(t)
	p := load(t, Options{})
	if err := p.Attach(); err != nil {
		t.Fatal(err)
	}
	inA, inB := lab.Inode(t, lab.A), lab.Inode(t, lab.B)
	const n = 8 << 20

	for _, tc := range []struct {
		name     string
		offloads string // ethtool -K value
	}{
		{"on", "on"},
		{"off", "off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lab.Exec(t, lab.A, "ethtool", "-K", "vA", "tso", tc.offloads, "gso", tc.offloads)
			lab.Exec(t, lab.B, "ethtool", "-K", "vB", "gro", tc.offloads)
			a0, b0, la0, lb0 := snapshot(t, lab, p, inA, inB)
			stop := capture(t, lab, lab.A, "vA")
			lab.Bulk(t, n)
			wire, wireLarge := stop()
			a1, b1, la1, lb1 := snapshot(t, lab, p, inA, inB)

			sent, xmit, recv := delta(a0.Hist[Sent], a1.Hist[Sent]), delta(a0.Hist[Xmit], a1.Hist[Xmit]), delta(b0.Hist[Received], b1.Hist[Received])
			xc := Counts{Packets: a1.Counts[Xmit].Packets - a0.Counts[Xmit].Packets, Bytes: a1.Counts[Xmit].Bytes - a0.Counts[Xmit].Bytes}
			rc := Counts{Packets: b1.Counts[Received].Packets - b0.Counts[Received].Packets, Bytes: b1.Counts[Received].Bytes - b0.Counts[Received].Bytes}
			sc := Counts{
				Packets:    a1.Counts[Sent].Packets - a0.Counts[Sent].Packets,
				GSOPackets: a1.Counts[Sent].GSOPackets - a0.Counts[Sent].GSOPackets,
				GSOSegs:    a1.Counts[Sent].GSOSegs - a0.Counts[Sent].GSOSegs,
			}
			oTxP, oTxB := la1.txPackets-la0.txPackets, la1.txBytes-la0.txBytes
			oRxP, oRxB := lb1.rxPackets-lb0.rxPackets, lb1.rxBytes-lb0.rxBytes
			t.Logf("offloads %s: sent %d packets (%d GSO, %d segments), p50 %.0f p99 %.0f, %d of 1536 B+; "+
				"driver %d packets %d bytes (ip link %d, %d; tcpdump %d), mean %.0f (ip link %.0f), %d of 1536 B+ (tcpdump %d); "+
				"received %d packets %d bytes (ip link %d, %d), %d of 1536 B+",
				tc.offloads, sc.Packets, sc.GSOPackets, sc.GSOSegs, sent.Quantile(0.5), sent.Quantile(0.99), large(sent),
				xc.Packets, xc.Bytes, oTxP, oTxB, wire, xmit.Sum/float64(xmit.Count), float64(oTxB)/float64(oTxP), large(xmit), wireLarge,
				rc.Packets, rc.Bytes, oRxP, oRxB, large(recv))

			// Exact: the driver's packets and bytes are the device's; the
			// histograms hold every one. tcpdump watched a little less
			// (it starts after the first reading and stops before the
			// last, and the lab's own IPv6 neighbour discovery may fall
			// between), so its total may be short by those small packets;
			// its large ones, all the transfer's, are exact below.
			if xc.Packets != oTxP || xc.Bytes != oTxB || wire > xc.Packets || xc.Packets-wire > 4 || xmit.Count != xc.Packets {
				t.Errorf("driver: %d packets, %d bytes, %d in the histogram; ip link %d, %d; tcpdump %d", xc.Packets, xc.Bytes, xmit.Count, oTxP, oTxB, wire)
			}
			if large(xmit) != wireLarge {
				t.Errorf("driver: %d packets of 1536 B and more, tcpdump %d", large(xmit), wireLarge)
			}
			// Received without the Ethernet header, which the device counts.
			if rc.Packets != oRxP || rc.Bytes+14*rc.Packets != oRxB || recv.Count != rc.Packets {
				t.Errorf("received: %d packets, %d bytes (+14 each), %d in the histogram; ip link %d, %d", rc.Packets, rc.Bytes, recv.Count, oRxP, oRxB)
			}
			// The mean the histogram gives is the counters' within its
			// buckets' width (1/16 of a power of two).
			if mean, want := xmit.Sum/float64(xmit.Count), float64(oTxB)/float64(oTxP); mean < want*0.94 || mean > want*1.06 {
				t.Errorf("driver: mean size %.0f from the histogram, %.0f from ip link", mean, want)
			}
			// Every segment TCP handed down (gso_segs of a GSO packet, one
			// of any other) reaches the driver: whole with TSO on, cut by
			// software GSO into as many frames with it off.
			segs, frames := sc.Packets-sc.GSOPackets+sc.GSOSegs, sc.Packets
			if tc.offloads == "off" {
				frames = sc.Packets - sc.GSOPackets + sc.GSOSegs
			}
			if xc.Packets != frames || segs < n/1500 {
				t.Errorf("sent %d packets, %d of them GSO with %d segments: %d segments for %d bytes; driver %d packets, want %d",
					sc.Packets, sc.GSOPackets, sc.GSOSegs, segs, n, xc.Packets, frames)
			}
			if tc.offloads == "on" {
				if large(sent) == 0 || large(xmit) == 0 || large(recv) == 0 || sc.GSOPackets == 0 {
					t.Errorf("offloads on: packets of 1536 B and more sent %d (GSO %d), to the driver %d, received %d; want some of each",
						large(sent), sc.GSOPackets, large(xmit), large(recv))
				}
			} else if large(xmit) != 0 || large(recv) != 0 || large(sent) == 0 {
				// TCP still hands down packets of many segments (the
				// stack always does GSO since 4.x): the device, without
				// GSO, has them cut before its driver (validate_xmit_skb).
				t.Errorf("offloads off: packets of 1536 B and more to the driver %d, received %d, want none; sent %d, want some",
					large(xmit), large(recv), large(sent))
			}
		})
	}
	if s, err := p.Stats(); err != nil || s.DevFull != 0 {
		t.Errorf("stats %+v, %v: want no device refused", s, err)
	}
}

func TestMain(m *testing.M) { os.Exit(m.Run()) }
