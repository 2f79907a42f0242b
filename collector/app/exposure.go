package app

import (
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/nbs-project/nbs/collector/nodeauth"
)

// loopbackOnly reports whether the listen address addr takes connections
// from this host only: a loopback IP literal (127.0.0.0/8, ::1) or
// localhost. Every other host, the empty one (all interfaces) included,
// counts as reachable from other hosts; a host name is not resolved, so the
// rule does not depend on DNS at start. A proxy or port-forward in front of
// a loopback address is the operator's own exposure, made on purpose.
func loopbackOnly(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// loopbackOf is addr's port on 127.0.0.1, for messages that suggest it.
func loopbackOf(addr string) string {
	port := "7701"
	if _, p, err := net.SplitHostPort(addr); err == nil && p != "" {
		port = p
	}
	return net.JoinHostPort("127.0.0.1", port)
}

// errNodeAuthNotChosen is why a collector reachable from other hosts does
// not start without a node-auth choice: with none, anyone who reaches the
// port registers nodes under any customer's labels or takes a connected
// name over by replacing its stream, and a default must not do that.
func errNodeAuthNotChosen(addr string) error {
	return fmt.Errorf("--grpc.listen-address %s is reachable from other hosts and --grpc.node-auth is not set, so anyone who reaches it could report as any node: "+
		"pass --grpc.node-auth=enroll --grpc.bootstrap-token-file FILE (with --grpc.tls-cert-file and --grpc.tls-key-file), "+
		"or --grpc.node-auth=mtls with --grpc.tls-client-ca-file, or --grpc.node-auth=none to accept any node name on a trusted network; "+
		"or listen on loopback only (--grpc.listen-address %s)", addr, loopbackOf(addr))
}

// nodeAuthWarnings are the ways a valid configuration still lets others
// report as nodes: each is logged at every start and listed by /readyz,
// where a probe or an operator sees it long after the start-up log is gone.
// A loopback-only listen address has none: only this host reaches it.
func (c *Config) nodeAuthWarnings(mode nodeauth.Mode) []string {
	if loopbackOnly(c.GRPCAddr) {
		return nil
	}
	var warns []string
	switch {
	case mode == nodeauth.ModeNone:
		w := fmt.Sprintf("--grpc.node-auth=none on --grpc.listen-address %s, which other hosts can reach: anyone who reaches it can report as any node, "+
			"under any customer's labels, and take a connected node's name over by replacing its stream; "+
			"use --grpc.node-auth=enroll or mtls unless every host that reaches the port is trusted", c.GRPCAddr)
		if c.Ingest.TLSCertFile == "" {
			w += "; the streams are plaintext too (--grpc.tls-cert-file, --grpc.tls-key-file)"
		}
		warns = append(warns, w)
	case mode == nodeauth.ModeEnroll && c.Ingest.TLSCertFile == "":
		warns = append(warns, fmt.Sprintf("nodes enroll over plaintext on --grpc.listen-address %s, which other hosts can reach: "+
			"whoever reads the network sees the bootstrap token and node credentials and can report as those nodes; "+
			"set --grpc.tls-cert-file and --grpc.tls-key-file (and --collector.tls-ca-file on the agents)", c.GRPCAddr))
	}
	return warns
}
