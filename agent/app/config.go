package app

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/nodecred"
	latencyrxprobe "github.com/nbs-project/nbs/agent/probe/latencyrx"
	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/agent/source/flows"
	pingsrc "github.com/nbs-project/nbs/agent/source/ping"
	"github.com/nbs-project/nbs/agent/spool"
	"github.com/nbs-project/nbs/internal/netns"
	"github.com/nbs-project/nbs/internal/schema"
	"github.com/nbs-project/nbs/internal/tlsfiles"
)

type Config struct {
	CollectorAddress  string
	NodeName          string
	Interval          time.Duration
	Netns             string
	Labels            Labels
	BufferReports     int
	EvidencePerSecond uint
	// EvidencePerInterval caps each evidence source's events in one report
	// (0: all --evidence.per-second lets through in an interval, see
	// source.EvidencePerInterval).
	EvidencePerInterval uint
	// TopOwners is how many owners of network namespaces (pods,
	// containers, ...) a per-namespace counter splits into children of
	// their own; the rest share "other" (0: catalog.DefaultTopOwners).
	TopOwners     int
	SnapshotEvery time.Duration
	BPF           bool
	// PingTargets are always pinged: "host" or "name=host", comma-separated.
	PingTargets string
	// PingInterval spaces the echoes to each target (0: 1s).
	PingInterval time.Duration
	// PingAddress is announced to the collector for peers to ping: an IP,
	// "" to detect the watched namespace's primary IPv4, "none" for none.
	PingAddress string
	// CgroupPath is the cgroup v2 directory whose connections TX
	// timestamping samples ("": the hierarchy's root, the whole node).
	CgroupPath string
	// TxSample times 1 in this many TCP connections (0: off).
	TxSample uint
	// OverheadBudget is the percent of one CPU all BPF programs may use
	// before triggered ones are detached (0: 1%).
	OverheadBudget float64
	// TriggeredHold keeps triggered sources attached after their trouble
	// clears (0: 2m); TriggeredMax is their longest stretch (0: 15m).
	TriggeredHold, TriggeredMax time.Duration
	// LatencyRXAlways keeps the receive-latency programs attached whenever
	// the budget allows; false attaches them only when triggered.
	LatencyRXAlways bool
	// LatencyRXSample times 1 in LatencyRXSample TCP segments, UDP
	// sockets and packets (agent/probe/latencyrx.Options.ReadSample; 0 is
	// its default); an operator's expand times every one while it lasts.
	LatencyRXSample int
	// DNSAlways keeps the DNS programs attached whenever the budget
	// allows; false attaches them only while the node is expanded.
	DNSAlways bool
	// FlowsEnable measures the flow map's edges and lists the owners'
	// addresses (agent/source/flows); FlowsTop is how many edges a report
	// names before folding the rest into "other".
	FlowsEnable bool
	FlowsTop    int
	// FlowsEvery is how often a report carries the edges and addresses
	// (0: every report).
	FlowsEvery time.Duration
	// TLS to the collector: any of these turns it on.
	CollectorTLS        bool
	CollectorCA         string
	CollectorCert       string
	CollectorKey        string
	CollectorServerName string
	// CredentialFile keeps the node credential issued at enrollment (""
	// keeps it in memory only); BootstrapTokenFile holds the fleet token
	// that enrolls the node when it has no credential.
	CredentialFile     string
	BootstrapTokenFile string
	// SpoolDir keeps un-acked reports across restarts ("": in memory only);
	// SpoolMaxBytes bounds it (0: spool.DefaultMaxBytes).
	SpoolDir      string
	SpoolMaxBytes int64
	// PinDir is the bpffs directory where the always-on counter probes
	// (tcp_reset, drops) pin their maps and programs, so they count while
	// no agent runs and the next agent reports it: "" for
	// DefaultPinRoot/<node name>, "none" to pin nothing.
	PinDir string
	// Unpin removes what the agent pinned in PinDir and exits (the
	// uninstall path).
	Unpin bool
	// FlushTimeout is how long a stopping agent (SIGTERM) waits for the
	// collector to ack its final report (0: it does not wait; the report
	// stays in the spool for the next agent).
	FlushTimeout time.Duration
	// MaxProcs, when above 0, is the running agent's GOMAXPROCS, set once
	// its programs are loaded (the load decodes kernel BTF, and its garbage
	// is collected faster on every CPU). It is the process's: nbs-agent
	// sets it (runningMaxProcs), an agent run inside another program
	// leaves it 0.
	MaxProcs int
	// TimerSlack, when above 0, is the least timer slack (PR_SET_TIMERSLACK)
	// of every thread of the running agent, set with MaxProcs: see
	// raiseTimerSlack. Also the process's: nbs-agent sets it, an agent run
	// inside another program leaves it 0.
	TimerSlack time.Duration
}

// minInterval is the shortest interval a report may cover: the collector
// refuses shorter ones (ingest's MinInterval).
const minInterval = 100 * time.Millisecond

// DefaultPinRoot holds each agent's pin directory, by node name.
const DefaultPinRoot = "/sys/fs/bpf/nbs"

// pinDir is where the probes pin, "" for nowhere.
func (c *Config) pinDir() string {
	switch c.PinDir {
	case "none":
		return ""
	case "":
		return filepath.Join(DefaultPinRoot, c.NodeName)
	}
	return c.PinDir
}

// DefaultConfig is the production configuration.
func DefaultConfig() Config {
	host, _ := os.Hostname()
	return Config{
		CollectorAddress:  "127.0.0.1:7701",
		NodeName:          host,
		Interval:          10 * time.Second,
		BufferReports:     8640, // 24 h at the default interval
		EvidencePerSecond: 20,
		TopOwners:         catalog.DefaultTopOwners,
		SnapshotEvery:     5 * time.Minute,
		BPF:               true,
		PingInterval:      time.Second,
		TxSample:          64,
		OverheadBudget:    1,
		TriggeredHold:     2 * time.Minute,
		TriggeredMax:      15 * time.Minute,
		LatencyRXAlways:   true,
		LatencyRXSample:   latencyrxprobe.DefaultReadSample,
		DNSAlways:         true,
		FlowsEnable:       true,
		FlowsTop:          flows.DefaultTop,
		FlowsEvery:        flows.DefaultEvery,
		CredentialFile:    nodecred.DefaultFile,
		SpoolDir:          "/var/lib/nbs/spool",
		SpoolMaxBytes:     spool.DefaultMaxBytes,
		FlushTimeout:      5 * time.Second,
	}
}

// RegisterFlags binds the configuration to flags, with the values already
// in c (DefaultConfig's, usually) as their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.CollectorAddress, "collector.address", c.CollectorAddress, "collector gRPC address host:port")
	fs.BoolVar(&c.CollectorTLS, "collector.tls", c.CollectorTLS, "use TLS to the collector, verified against the system's CAs (implied by the other --collector.tls-* flags)")
	fs.StringVar(&c.CollectorCA, "collector.tls-ca-file", c.CollectorCA, "PEM CA to verify the collector's certificate with")
	fs.StringVar(&c.CollectorCert, "collector.tls-cert-file", c.CollectorCert, "PEM client certificate, for collectors that require mutual TLS")
	fs.StringVar(&c.CollectorKey, "collector.tls-key-file", c.CollectorKey, "PEM private key of --collector.tls-cert-file")
	fs.StringVar(&c.CollectorServerName, "collector.tls-server-name", c.CollectorServerName, "name to verify in the collector's certificate (default: the host of --collector.address)")
	fs.StringVar(&c.NodeName, "node.name", c.NodeName, "this node's name in the fleet (default: the host name)")
	fs.StringVar(&c.CredentialFile, "node.credential-file", c.CredentialFile, "where the node credential issued at enrollment is kept (0600, replaced atomically); presented in every Hello")
	fs.StringVar(&c.BootstrapTokenFile, "node.bootstrap-token-file", c.BootstrapTokenFile, "file holding the fleet bootstrap token, presented once to enroll this node when it has no node credential yet")
	fs.DurationVar(&c.Interval, "interval", c.Interval, "report interval")
	fs.StringVar(&c.Netns, "netns", c.Netns, "watch one network namespace only: a name under /run/netns or a path (default: every namespace for BPF, the agent's own for /proc)")
	fs.Var(&c.Labels, "labels", "node labels k=v,... (e.g. rack=r12,zone=b), used for grouping, thresholds, alerts and reports; where the collector verifies node names, the tenant label (customer) and any label an operator bound are the collector's, and what this flag says of them is ignored")
	fs.IntVar(&c.BufferReports, "buffer.reports", c.BufferReports, "un-acked reports kept while the collector is unreachable (8640 = 24h at 10s); the oldest are dropped beyond")
	fs.UintVar(&c.EvidencePerSecond, "evidence.per-second", c.EvidencePerSecond, "evidence events per second the kernel may emit (rate limit enforced in BPF)")
	fs.UintVar(&c.EvidencePerInterval, "evidence.per-interval", c.EvidencePerInterval, fmt.Sprintf("evidence events of each source (resets, drops) kept per report; beyond, they are counted in agent/evidence/dropped/<source>/interval_cap (0: all --evidence.per-second lets through in an interval, i.e. per-second x (interval + 2s), at most %d)", source.MaxEvidencePerInterval))
	fs.IntVar(&c.TopOwners, "owners.top", c.TopOwners, "owners of network namespaces (pods, containers, `ip netns` names, processes) shown as children of their own under each reset and drop reason; the rest are counted in <reason>/other")
	fs.DurationVar(&c.SnapshotEvery, "snapshot.every", c.SnapshotEvery, "send the full tree this often, so history exists at coarse grain")
	fs.BoolVar(&c.BPF, "bpf", c.BPF, "use eBPF; false forces the /proc fallback")
	fs.StringVar(&c.PingTargets, "ping.targets", c.PingTargets, "hosts to ping always, comma-separated: an IP or DNS name, optionally named (gw=10.0.0.1); the collector adds fleet peers")
	fs.DurationVar(&c.PingInterval, "ping.interval", c.PingInterval, "spacing of ICMP echoes to each ping target")
	fs.StringVar(&c.PingAddress, "ping.address", c.PingAddress, "address peers should ping to reach this node (default: the primary IPv4 of the watched namespace; \"none\" to announce none)")
	fs.StringVar(&c.CgroupPath, "cgroup.path", c.CgroupPath, "cgroup v2 directory whose processes' TCP connections TX timestamping samples (default: the root of the cgroup v2 mount, i.e. the whole node)")
	fs.UintVar(&c.TxSample, "tx-timestamping.sample", c.TxSample, "time 1 in this many TCP connections with BPF TX timestamping (sendmsg → qdisc → driver → ACK); 1 = every connection, 0 = off")
	fs.Float64Var(&c.OverheadBudget, "overhead.budget", c.OverheadBudget, "percent of one CPU the agent's BPF programs may use; triggered (per-packet) programs are detached beyond it")
	fs.DurationVar(&c.TriggeredHold, "triggered.hold", c.TriggeredHold, "keep triggered programs (qdisc sojourn, per-flow detail) attached this long after their branch is healthy again")
	fs.IntVar(&c.LatencyRXSample, "latency.rx.sample", c.LatencyRXSample, fmt.Sprintf("time 1 in this many TCP segments, UDP sockets and packets for latency/rx (a power of two from 1, every one, to %d); while an operator has the node expanded every one is timed, within --overhead.budget", latencyrxprobe.MaxReadSample))
	fs.BoolVar(&c.LatencyRXAlways, "latency.rx.always", c.LatencyRXAlways, "keep the receive-latency programs (latency/rx, netstacklat's cost per run) attached whenever --overhead.budget allows; false attaches them only while the latency branch is in trouble or the node is expanded, like the other triggered programs")
	fs.BoolVar(&c.FlowsEnable, "flows.enable", c.FlowsEnable, "measure the flow map: each interval, this node's TCP connections by owner and peer (opened, failed, closed, resets by reason, retransmits, bytes, RTT) from state changes, retransmits and resets only, and the addresses its owners hold (capability bpf.flows says why not where the kernel cannot)")
	fs.IntVar(&c.FlowsTop, "flows.top", c.FlowsTop, fmt.Sprintf("flow-map edges a report names, the worst and busiest first; the rest are summed into one \"other\" edge so totals stay exact (1 to %d)", flows.MaxTop))
	fs.DurationVar(&c.FlowsEvery, "flows.every", c.FlowsEvery, "how often a report carries the flow map's edges and addresses, what the intervals between counted summed into it (the collector keeps edges per minute, so 1m loses no detail and writes a sixth of the rows of 10s reports); 0 sends them with every report")
	fs.BoolVar(&c.DNSAlways, "dns.always", c.DNSAlways, "keep the DNS programs (the dns root: queries, answer latency, errors, timeouts; a test of every packet sent and received for UDP port 53) attached whenever --overhead.budget allows; false attaches them only while the node is expanded")
	fs.DurationVar(&c.TriggeredMax, "triggered.max", c.TriggeredMax, "longest stretch triggered programs stay attached; then they rest for --triggered.hold")
	fs.StringVar(&c.SpoolDir, "spool.dir", c.SpoolDir, "directory keeping un-acked reports across agent restarts and reboots (\"\": memory only, lost on restart); one agent per directory")
	fs.StringVar(&c.PinDir, "bpf.pin-dir", c.PinDir, "bpffs directory where the reset and drop probes pin their counters and programs, so they go on counting while no agent runs and the next agent (a restart or an upgrade) reports those counts (default "+DefaultPinRoot+"/<node.name>; \"none\": nothing is pinned and a restart loses what was not yet collected); one agent per directory")
	fs.BoolVar(&c.Unpin, "bpf.unpin", c.Unpin, "remove what agents pinned in --bpf.pin-dir (the programs stop counting) and exit: the uninstall step")
	fs.DurationVar(&c.FlushTimeout, "shutdown.flush-timeout", c.FlushTimeout, "on SIGTERM the agent reports its last partial interval and waits this long for the collector to store it (what is not acked stays in --spool.dir for the next agent)")
	fs.Int64Var(&c.SpoolMaxBytes, "spool.max-bytes", c.SpoolMaxBytes, "bytes of un-acked reports kept; beyond, the oldest children are dropped first, then the oldest reports")
}

// evidencePerInterval is the cap on each evidence source's events in one
// report.
func (c *Config) evidencePerInterval() int {
	if c.EvidencePerInterval > 0 {
		return int(c.EvidencePerInterval)
	}
	return source.EvidencePerInterval(uint32(c.EvidencePerSecond), c.Interval)
}

// pingAddress is what the Hello announces: the flag's address, nothing for
// "none", else the watched namespace's primary IPv4.
func (c *Config) pingAddress(ns netns.Handle) (string, error) {
	switch c.PingAddress {
	case "none":
		return "", nil
	case "":
		a, err := pingsrc.DetectAddress(ns)
		if err != nil || !a.IsValid() {
			return "", err
		}
		return a.String(), nil
	}
	a, err := netip.ParseAddr(c.PingAddress)
	if err != nil {
		return "", err
	}
	return a.Unmap().String(), nil
}

func (c *Config) Validate() error {
	var errs []error
	if c.CollectorAddress == "" {
		errs = append(errs, errors.New("--collector.address is required"))
	}
	if err := schema.CheckNodeName(c.NodeName); err != nil {
		errs = append(errs, fmt.Errorf("--node.name %.256q: %w", c.NodeName, err))
	} else {
		// The collector knows a node by its name in lower case
		// (schema.CanonicalNodeName); the agent says it that way too, so
		// its log, spool and credential file name the node the UI shows.
		c.NodeName = schema.CanonicalNodeName(c.NodeName)
	}
	if err := schema.CheckLabels(c.Labels); err != nil {
		errs = append(errs, fmt.Errorf("--labels: %w", err))
	}
	if c.Interval < minInterval || c.Interval > time.Hour {
		errs = append(errs, fmt.Errorf("--interval %s must be from 100ms to 1h", c.Interval))
	}
	if c.BufferReports < 1 || c.BufferReports > 1_000_000 {
		errs = append(errs, fmt.Errorf("--buffer.reports %d must be from 1 to 1000000", c.BufferReports))
	}
	if n := c.LatencyRXSample; n != 0 && (n < 1 || n > latencyrxprobe.MaxReadSample || n&(n-1) != 0) {
		errs = append(errs, fmt.Errorf("--latency.rx.sample %d must be a power of two from 1 to %d", n, latencyrxprobe.MaxReadSample))
	}
	if c.EvidencePerSecond > 100_000 {
		errs = append(errs, fmt.Errorf("--evidence.per-second %d is more than 100000", c.EvidencePerSecond))
	}
	if c.EvidencePerInterval > source.MaxEvidencePerInterval {
		errs = append(errs, fmt.Errorf("--evidence.per-interval %d is more than %d (a quarter of the events one report may carry)", c.EvidencePerInterval, source.MaxEvidencePerInterval))
	}
	if c.FlowsTop < 0 || c.FlowsTop > flows.MaxTop {
		errs = append(errs, fmt.Errorf("--flows.top %d must be from 1 to %d (0: %d)", c.FlowsTop, flows.MaxTop, flows.DefaultTop))
	}
	if c.FlowsEvery < 0 || c.FlowsEvery > time.Hour {
		errs = append(errs, fmt.Errorf("--flows.every %s must be from 0 (every report) to 1h", c.FlowsEvery))
	}
	if c.TopOwners < 0 || c.TopOwners > 100 {
		errs = append(errs, fmt.Errorf("--owners.top %d must be from 1 to 100 (0: %d)", c.TopOwners, catalog.DefaultTopOwners))
	}
	if _, err := pingsrc.ParseTargets(c.PingTargets); err != nil {
		errs = append(errs, fmt.Errorf("--ping.targets: %w", err))
	}
	if c.PingInterval != 0 && (c.PingInterval < 10*time.Millisecond || c.PingInterval > time.Hour) {
		errs = append(errs, fmt.Errorf("--ping.interval %s must be from 10ms to 1h", c.PingInterval))
	}
	if c.PingAddress != "" && c.PingAddress != "none" {
		if a, err := netip.ParseAddr(c.PingAddress); err != nil || a.Zone() != "" || a.IsUnspecified() || a.IsMulticast() || a.IsLoopback() {
			errs = append(errs, fmt.Errorf("--ping.address %q: want a unicast, non-loopback IP address without a zone, or \"none\"", c.PingAddress))
		}
	}
	if c.SnapshotEvery < c.Interval {
		errs = append(errs, fmt.Errorf("--snapshot.every %s is shorter than --interval %s", c.SnapshotEvery, c.Interval))
	}
	if c.SnapshotEvery > 24*time.Hour {
		// The collector rejects histograms accumulated over a longer span
		// (ingest.MaxHistogramSpan); a snapshot flushes them.
		errs = append(errs, fmt.Errorf("--snapshot.every %s is longer than 24h", c.SnapshotEvery))
	}
	if c.TxSample > 1<<20 {
		errs = append(errs, fmt.Errorf("--tx-timestamping.sample %d is more than %d", c.TxSample, 1<<20))
	}
	if c.OverheadBudget < 0 || c.OverheadBudget > 100 || math.IsNaN(c.OverheadBudget) {
		errs = append(errs, fmt.Errorf("--overhead.budget %g must be from 0 to 100 (percent of one CPU)", c.OverheadBudget))
	}
	if c.TriggeredHold < 0 || c.TriggeredHold > 24*time.Hour {
		errs = append(errs, fmt.Errorf("--triggered.hold %s must be from 0 to 24h", c.TriggeredHold))
	}
	if c.TriggeredMax < 0 || c.TriggeredMax > 24*time.Hour || (c.TriggeredMax > 0 && c.TriggeredMax < c.Interval) {
		errs = append(errs, fmt.Errorf("--triggered.max %s must be from --interval to 24h", c.TriggeredMax))
	}
	if c.BootstrapTokenFile != "" && c.CredentialFile == "" {
		errs = append(errs, errors.New("--node.bootstrap-token-file needs --node.credential-file, to keep the credential enrollment issues"))
	}
	if c.SpoolMaxBytes != 0 && (c.SpoolMaxBytes < 4<<20 || c.SpoolMaxBytes > 64<<30) {
		errs = append(errs, fmt.Errorf("--spool.max-bytes %d must be from 4 MiB (4194304) to 64 GiB", c.SpoolMaxBytes))
	}
	if d := c.pinDir(); d != "" && (!filepath.IsAbs(d) || filepath.Clean(d) == "/") {
		errs = append(errs, fmt.Errorf("--bpf.pin-dir %q must be an absolute directory below / (or \"none\")", c.PinDir))
	}
	if c.FlushTimeout < 0 || c.FlushTimeout > 10*time.Minute {
		errs = append(errs, fmt.Errorf("--shutdown.flush-timeout %s must be from 0 to 10m", c.FlushTimeout))
	}
	if c.CgroupPath != "" {
		var fs unix.Statfs_t
		if err := unix.Statfs(c.CgroupPath, &fs); err != nil || fs.Type != unix.CGROUP2_SUPER_MAGIC {
			errs = append(errs, fmt.Errorf("--cgroup.path %q is not a cgroup v2 directory", c.CgroupPath))
		}
	}
	return errors.Join(errs...)
}

// Labels is a flag.Value for k=v,k=v.
type Labels map[string]string

func (l *Labels) String() string {
	if l == nil || len(*l) == 0 {
		return ""
	}
	keys := make([]string, 0, len(*l))
	for k := range *l {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + (*l)[k]
	}
	return strings.Join(parts, ",")
}

func (l *Labels) Set(s string) error {
	if *l == nil {
		*l = Labels{}
	}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return fmt.Errorf("label %q: want key=value", part)
		}
		if err := schema.CheckLabelKey(k); err != nil {
			return fmt.Errorf("label key %.80q: %w", k, err)
		}
		(*l)[k] = v
	}
	return nil
}

// tls returns the stream's TLS configuration, nil for plaintext.
func (c *Config) tls(log *slog.Logger) (*tls.Config, error) {
	if !c.CollectorTLS && c.CollectorCA == "" && c.CollectorCert == "" && c.CollectorKey == "" && c.CollectorServerName == "" {
		return nil, nil
	}
	cfg, err := tlsfiles.Client(c.CollectorCA, c.CollectorCert, c.CollectorKey, c.CollectorServerName, log)
	if err != nil {
		return nil, fmt.Errorf("collector TLS: %w", err)
	}
	return cfg, nil
}
