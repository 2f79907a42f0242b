package ingest

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/nbs-project/nbs/internal/tlsfiles"
	"github.com/nbs-project/nbs/internal/wire"
)

// Config is the ingest part of the collector's configuration: what agents
// may send and hold (--ingest.*), and how their streams are served
// (--grpc.*). The listen address is the app's, which owns the listeners.
type Config struct {
	// Limits bound what one agent, or all of them, may hold or send; the
	// app sets MaxAge from the retention of raw reports.
	Limits
	// HelloTimeout is how long a new stream may take to send its Hello.
	HelloTimeout time.Duration
	// SendTimeout ends an agent stream whose agent has not read one message
	// for this long, so it holds no more than its pending Config.
	SendTimeout time.Duration
	// MaxMsgSize is the largest message an agent may send.
	MaxMsgSize int
	// StreamWindow bounds what one stream may have in flight: with gRPC's
	// default auto-tuned windows a collector buffered ~2 GB when Postgres
	// fell behind.
	StreamWindow int32
	// MaxConns and MaxConnsPerAddress bound the gRPC listener's
	// connections, in all and from one address (collector/connlimit): an
	// agent holds one, and agents behind one NAT share an address. Zero
	// follows the stream limits (Conns): raising --ingest.max-streams or
	// --ingest.max-streams-per-address for a fleet behind NAT raises these
	// with them, so one knob is enough.
	MaxConns           int
	MaxConnsPerAddress int
	// TLS for agent streams; with ClientCAFile, agents must present a
	// certificate it signed (mutual TLS).
	TLSCertFile  string
	TLSKeyFile   string
	ClientCAFile string
}

// DefaultConfig is the production configuration: plaintext streams until
// certificates are given.
func DefaultConfig() Config {
	return Config{
		Limits:       DefaultLimits(),
		HelloTimeout: DefaultHelloTimeout,
		SendTimeout:  DefaultSendTimeout,
		MaxMsgSize:   wire.MaxMessageBytes,
		StreamWindow: 64 << 10,
	}
}

// Conns is the gRPC listener's bound on connections, in all and from one
// address: as set, or twice the stream limits when zero, because an agent
// reconnecting holds its old connection for a moment beside its new one.
func (c *Config) Conns() (total, perAddress int) {
	total, perAddress = c.MaxConns, c.MaxConnsPerAddress
	if total == 0 {
		total = 2 * c.MaxStreams
	}
	if perAddress == 0 {
		perAddress = min(2*c.MaxStreamsPerIP, total)
	}
	return total, perAddress
}

// RegisterFlags binds the flags, with the values already in c
// (DefaultConfig's, usually) as their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.TLSCertFile, "grpc.tls-cert-file", c.TLSCertFile, "PEM certificate for agent streams (TLS); without it the stream is plaintext")
	fs.StringVar(&c.TLSKeyFile, "grpc.tls-key-file", c.TLSKeyFile, "PEM private key of --grpc.tls-cert-file")
	fs.StringVar(&c.ClientCAFile, "grpc.tls-client-ca-file", c.ClientCAFile, "PEM CA that must have signed every agent's client certificate (mutual TLS)")
	fs.IntVar(&c.MaxMsgSize, "grpc.max-message-bytes", c.MaxMsgSize, "largest message an agent may send")
	fs.DurationVar(&c.SendTimeout, "grpc.send-timeout", c.SendTimeout, "an agent that reads nothing from its stream for this long is disconnected (it reconnects and gets the newest config)")
	fs.IntVar(&c.MaxStreams, "ingest.max-streams", c.MaxStreams, "concurrent agent streams on this collector, with a Hello or not; more are refused with ResourceExhausted")
	fs.IntVar(&c.MaxStreamsPerIP, "ingest.max-streams-per-address", c.MaxStreamsPerIP, "concurrent agent streams from one source IP address")
	fs.IntVar(&c.MaxConns, "grpc.max-connections", c.MaxConns, "most open gRPC connections (an agent holds one); more wait to be accepted; 0: twice --ingest.max-streams")
	fs.IntVar(&c.MaxConnsPerAddress, "grpc.max-connections-per-address", c.MaxConnsPerAddress, "most open gRPC connections from one source IP address; more are closed at once; 0: twice --ingest.max-streams-per-address, so raising that for agents behind one NAT raises this too")
	fs.DurationVar(&c.HelloTimeout, "ingest.hello-timeout", c.HelloTimeout, "how long a new stream may take to send its Hello")
	fs.IntVar(&c.MaxNodes, "ingest.max-nodes", c.MaxNodes, "registered nodes; a Hello from a new node beyond it is refused (delete unused nodes with nbs-collector nodes delete)")
	fs.IntVar(&c.MaxNodesPerTenant, "ingest.max-nodes-per-tenant", c.MaxNodesPerTenant, "registered nodes of one tenant, unless an operator set its quota (nbs-collector nodes quota set TENANT N); a Hello from a new node of a tenant at its quota is refused; 0: no quota but --ingest.max-nodes")
	fs.IntVar(&c.MaxMetrics, "ingest.max-metrics-per-node", c.MaxMetrics, "metric definitions per node, counted across all its Hellos and streams")
	fs.IntVar(&c.MaxCapabilities, "ingest.max-capabilities", c.MaxCapabilities, "capabilities per Hello")
	fs.IntVar(&c.MaxSamples, "ingest.max-samples", c.MaxSamples, "samples per report")
	fs.IntVar(&c.MaxHistograms, "ingest.max-histograms", c.MaxHistograms, "histograms per report")
	fs.IntVar(&c.MaxEvents, "ingest.max-events", c.MaxEvents, "events per report")
	fs.IntVar(&c.MaxFlowEdges, "ingest.max-flow-edges", c.MaxFlowEdges, "flow edges per report, its other edges included (docs/flow-map.md)")
	fs.IntVar(&c.MaxAddressHolders, "ingest.max-address-holders", c.MaxAddressHolders, "address holders per report (docs/flow-map.md)")
	fs.DurationVar(&c.MaxFutureSkew, "ingest.max-future-skew", c.MaxFutureSkew, "how far ahead of the collector's clock a report may be dated (what it may move is clamped to the collector's clock anyway)")
}

// Validate reports every problem at once.
func (c *Config) Validate() error {
	var errs []error
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		errs = append(errs, errors.New("--grpc.tls-cert-file and --grpc.tls-key-file go together"))
	}
	if c.ClientCAFile != "" && c.TLSCertFile == "" {
		errs = append(errs, errors.New("--grpc.tls-client-ca-file needs --grpc.tls-cert-file and --grpc.tls-key-file"))
	}
	if c.SendTimeout < time.Second || c.SendTimeout > time.Hour {
		errs = append(errs, fmt.Errorf("--grpc.send-timeout %s must be from 1s to 1h", c.SendTimeout))
	}
	if c.MaxMsgSize < 64<<10 || c.MaxMsgSize > 64<<20 {
		errs = append(errs, fmt.Errorf("--grpc.max-message-bytes %d must be from 64 KiB to 64 MiB", c.MaxMsgSize))
	}
	for _, l := range []struct {
		flag   string
		v, max int
	}{
		{"--ingest.max-streams", c.MaxStreams, 1 << 20}, {"--ingest.max-streams-per-address", c.MaxStreamsPerIP, 1 << 20},
		{"--ingest.max-nodes", c.MaxNodes, 1 << 24}, {"--ingest.max-metrics-per-node", c.MaxMetrics, 1 << 20},
		{"--ingest.max-capabilities", c.MaxCapabilities, 1 << 16}, {"--ingest.max-samples", c.MaxSamples, 1 << 20},
		{"--ingest.max-histograms", c.MaxHistograms, 1 << 20}, {"--ingest.max-events", c.MaxEvents, 1 << 20},
		{"--ingest.max-flow-edges", c.MaxFlowEdges, 1 << 20}, {"--ingest.max-address-holders", c.MaxAddressHolders, 1 << 20},
	} {
		if l.v < 1 || l.v > l.max {
			errs = append(errs, fmt.Errorf("%s %d must be from 1 to %d", l.flag, l.v, l.max))
		}
	}
	if c.HelloTimeout < time.Second || c.HelloTimeout > 5*time.Minute {
		errs = append(errs, fmt.Errorf("--ingest.hello-timeout %s must be from 1s to 5m", c.HelloTimeout))
	}
	if c.MaxFutureSkew < 0 || c.MaxFutureSkew > 24*time.Hour {
		errs = append(errs, fmt.Errorf("--ingest.max-future-skew %s must be from 0 to 24h", c.MaxFutureSkew))
	}
	if c.MaxNodesPerTenant < 0 || c.MaxNodesPerTenant > 1<<24 {
		errs = append(errs, fmt.Errorf("--ingest.max-nodes-per-tenant %d must be from 0 (none) to %d", c.MaxNodesPerTenant, 1<<24))
	}
	for _, l := range []struct {
		flag string
		v    int
	}{{"--grpc.max-connections", c.MaxConns}, {"--grpc.max-connections-per-address", c.MaxConnsPerAddress}} {
		if l.v < 0 || l.v > 1<<21 {
			errs = append(errs, fmt.Errorf("%s %d must be from 0 (twice the stream limit) to %d", l.flag, l.v, 1<<21))
		}
	}
	if total, per := c.Conns(); c.MaxConns >= 0 && per > total {
		errs = append(errs, fmt.Errorf("--grpc.max-connections-per-address %d is more than --grpc.max-connections %d", per, total))
	}
	// gRPC ignores windows below 64 KiB.
	if c.StreamWindow < 64<<10 || c.StreamWindow > 16<<20 {
		errs = append(errs, fmt.Errorf("stream window %d must be from 64 KiB to 16 MiB", c.StreamWindow))
	}
	return errors.Join(errs...)
}

// maxConnectionIdle ends a gRPC connection without a stream: agents
// between two streams reconnect within seconds.
const maxConnectionIdle = 2 * time.Minute

// GRPCOptions are the gRPC server's options for agent streams: the
// message size, the flow-control windows, keepalives, streams the service
// can end while it receives (InterruptibleStreams), the codec that decodes
// reports into reused messages (Codec) and, with a
// certificate, TLS (mutual with a client CA).
func (c *Config) GRPCOptions(log *slog.Logger) ([]grpc.ServerOption, error) {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(c.MaxMsgSize),
		grpc.InitialWindowSize(c.StreamWindow),
		grpc.InitialConnWindowSize(16 * c.StreamWindow),
		// A connection has HelloTimeout to finish its TLS handshake (gRPC's
		// default is two minutes), and one with no stream for
		// maxConnectionIdle is closed: an agent always holds a stream, so
		// only a client holding a place keeps one idle.
		grpc.ConnectionTimeout(c.HelloTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, MaxConnectionIdle: maxConnectionIdle}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		InterruptibleStreams(),
		ServerCodec(),
	}
	if c.TLSCertFile != "" {
		tlsCfg, err := tlsfiles.Server(c.TLSCertFile, c.TLSKeyFile, c.ClientCAFile, log)
		if err != nil {
			return nil, fmt.Errorf("gRPC TLS: %w", err)
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	return opts, nil
}
