package latency

import (
	"strconv"
	"strings"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/procnet"
	"github.com/nbs-project/nbs/agent/source"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// TCPECNPath is the namespace's ECN setting, read from inside it.
const TCPECNPath = "/proc/sys/net/ipv4/tcp_ecn"

// ecn is what latency/ecn keeps between collections.
type ecn struct {
	// why latency/ecn is absent, "" while present; on says it was defined
	// (to retire it should the counters go).
	why string
	on  bool
	// The kernel's CE, ECT(0) and ECT(1) counts at the previous reading,
	// for the interval's ce_share; have says there was one.
	prev [3]uint64
	have bool
	// mode is net.ipv4.tcp_ecn as last read, modeWhy why it could not be.
	mode    int64
	modeWhy string
}

// readECNMode reads the watched namespace's net.ipv4.tcp_ecn, -1 if it
// cannot (the reason kept for the capability).
func (s *Source) readECNMode() int64 {
	b, err := s.ns.ReadFile(TCPECNPath)
	if err == nil {
		var v int64
		if v, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
			s.ecn.modeWhy = ""
			return v
		}
	}
	if why := err.Error(); why != s.ecn.modeWhy {
		s.ecn.modeWhy = why
		s.log.Warn("latency: cannot read net.ipv4.tcp_ecn; latency/ecn/tcp_ecn has no value", "netns", s.ns.String(), "err", err)
	}
	return -1
}

// addECN puts latency/ecn into r from one reading of the namespace's SNMP
// counters (c: snmp and netstat, c6: snmp6) and its tcp_ecn (mode, -1 if
// unknown). Counters are the kernel's since boot (SinceBoot); ce_share is
// this source's, of the interval since its previous collection.
func (s *Source) addECN(r *source.Reading, c, c6 procnet.Counters, mode int64) {
	ceName := catalog.ECNCECounters[0]
	if _, ok := c[ceName]; !ok {
		s.ecn.why = "the kernel counts no ECN codepoints (no " + ceName + " in /proc/net/netstat)"
		s.ecn.have = false
		if s.ecn.on {
			r.Retired = append(r.Retired, catalog.LatencyECN)
			s.ecn.on = false
		}
		return
	}
	s.ecn.why, s.ecn.on, s.ecn.mode = "", true, mode
	delivered, hasDelivered := c[catalog.ECNDeliveredCECounter]
	for _, m := range catalog.ECNTree() {
		switch {
		case m.ID == catalog.LatencyECNDeliveredCE && !hasDelivered: // before Linux 4.20
		case m.ID == catalog.LatencyECNMode && mode < 0:
		default:
			r.Metrics = append(r.Metrics, m)
		}
	}
	r.Counters[catalog.LatencyECN] = c[catalog.ECNCECounters[0]] + c6[catalog.ECNCECounters[1]]
	if hasDelivered {
		r.Counters[catalog.LatencyECNDeliveredCE] = delivered
	}
	if r.Gauges == nil {
		r.Gauges = map[string]float64{}
	}
	if mode >= 0 {
		r.Gauges[catalog.LatencyECNMode] = float64(mode)
	}
	cur := [3]uint64{r.Counters[catalog.LatencyECN]}
	for i, names := range catalog.ECNCapableCounters {
		cur[i+1] = c[names[0]] + c6[names[1]]
	}
	prev, have := s.ecn.prev, s.ecn.have
	s.ecn.prev, s.ecn.have = cur, true
	var ce, capable uint64
	for i := range cur {
		if cur[i] < prev[i] {
			have = false // not the counters of the previous reading: no interval to speak of
		}
		capable += cur[i] - prev[i]
	}
	ce = cur[0] - prev[0]
	if !have || capable == 0 {
		// Nothing ECN-capable arrived: nothing to mark, so no share, not 0%.
		r.Idle = append(r.Idle, catalog.LatencyECNShare)
		return
	}
	r.Gauges[catalog.LatencyECNShare] = 100 * float64(ce) / float64(capable)
}

// ecnCapability says whether latency/ecn is measured, and how this
// namespace's TCP uses ECN.
func (s *Source) ecnCapability() *nbsv1.Capability {
	if s.ecn.why != "" {
		return &nbsv1.Capability{Name: capECN, Available: false, Reason: "no latency/ecn in " + s.ns.String() + ": " + s.ecn.why}
	}
	mode := "net.ipv4.tcp_ecn unreadable (" + s.ecn.modeWhy + ")"
	if s.ecn.modeWhy == "" {
		mode = "net.ipv4.tcp_ecn=" + strconv.FormatInt(s.ecn.mode, 10) + ": " + ecnModeMeaning(s.ecn.mode)
	}
	return &nbsv1.Capability{Name: capECN, Available: true, Reason: "latency/ecn from IpExt and Ip6 In{CE,ECT0,ECT1,NoECT}Pkts " +
		"and TcpExtTCPDeliveredCE of " + s.ns.String() + "; " + mode}
}

func ecnModeMeaning(mode int64) string {
	switch mode {
	case 0:
		return "TCP never uses ECN here, marks arrive only on other protocols' traffic"
	case 1:
		return "TCP asks for ECN on outgoing connections and accepts it on incoming ones"
	case 2:
		return "TCP accepts ECN when a peer asks, never asks (the default)"
	}
	return "an Accurate ECN mode of a newer kernel"
}
