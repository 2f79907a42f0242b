// Package uplink streams an agent's reports to the collector: Hello, then
// every report in sequence, resending what was not acked after a reconnect,
// with backoff and jitter between attempts.
package uplink

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/nbs-project/nbs/agent/spool"
	"github.com/nbs-project/nbs/internal/schema"
	"github.com/nbs-project/nbs/internal/wire"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// Outbox is the queue of reports the uplink sends (agent/spool's Spool):
// it numbers them, cut to wire's limits, and keeps them until acked.
type Outbox interface {
	// Take returns the reports with a sequence above seq, in order and at
	// most about maxBytes of them (at least one), each with its encoding,
	// and a channel that is closed when there are more to read.
	Take(seq uint64, maxBytes int64) ([]spool.Sending, <-chan struct{})
	// Ack forgets a report the collector stored.
	Ack(seq uint64)
	// Discard forgets a report that can never be delivered, counting it as
	// dropped.
	Discard(seq uint64)
	// Definition returns the definition of a metric some held report uses,
	// as recorded with it, for a replay the current agent cannot describe.
	Definition(id string) (*nbsv1.MetricDefinition, bool)
	// Len is the number of reports not acked yet.
	Len() int
}

// Agent is what the uplink needs from the rest of the agent.
type Agent interface {
	// Hello describes the node now, with every metric it knows.
	Hello() *nbsv1.Hello
	// Definition returns a metric's definition, for metrics that appear
	// after the Hello of a stream.
	Definition(id string) (*nbsv1.MetricDefinition, bool)
	// ApplyConfig receives each Config the collector pushes.
	ApplyConfig(*nbsv1.Config)
}

// Identity proves the node's name to a collector that enrolls nodes.
type Identity interface {
	// Proof is what the next Hello carries (nil: nothing).
	Proof() *nbsv1.NodeAuth
	// Enrolled keeps the credential the collector just issued.
	Enrolled(credential string) error
	// Refused sees a PermissionDenied answer; true when the next attempt
	// carries another proof and should come soon.
	Refused(err error) bool
}

type Options struct {
	Address    string
	MinBackoff time.Duration
	MaxBackoff time.Duration
	DialOpts   []grpc.DialOption
	// TLS, when set, secures the stream; nil means plaintext.
	TLS *tls.Config
	// Identity, when set, proves the node's name in every Hello.
	Identity Identity
}

type Uplink struct {
	opts   Options
	outbox Outbox
	agent  Agent
	log    *slog.Logger
}

func New(opts Options, outbox Outbox, agent Agent, log *slog.Logger) *Uplink {
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 500 * time.Millisecond
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 30 * time.Second
	}
	return &Uplink{opts: opts, outbox: outbox, agent: agent, log: log}
}

// Run keeps a stream open until ctx ends.
func (u *Uplink) Run(ctx context.Context) error {
	creds := insecure.NewCredentials()
	if u.opts.TLS != nil {
		creds = credentials.NewTLS(u.opts.TLS)
	}
	dial := append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}),
	}, u.opts.DialOpts...)
	conn, err := grpc.NewClient(u.opts.Address, dial...)
	if err != nil {
		return fmt.Errorf("collector address %q: %w", u.opts.Address, err)
	}
	defer conn.Close()
	client := nbsv1.NewAgentServiceClient(conn)

	backoff := u.opts.MinBackoff
	for {
		start := time.Now()
		acked, err := u.session(ctx, client)
		if ctx.Err() != nil {
			return nil
		}
		// A stream that worked for a while earns a quick reconnect.
		if acked > 0 || time.Since(start) > u.opts.MaxBackoff {
			backoff = u.opts.MinBackoff
		}
		refused := status.Code(err) == codes.PermissionDenied
		if refused {
			// Retrying the same proof soon changes nothing; an operator's
			// fix (re-enrolling, a new certificate) is picked up at the next try.
			backoff = u.opts.MaxBackoff
			if u.opts.Identity != nil && u.opts.Identity.Refused(err) {
				backoff = u.opts.MinBackoff
			}
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		if refused {
			u.log.Error("the collector refuses this node", "address", u.opts.Address, "err", err,
				"retry_in", wait.Round(time.Millisecond), "unacked", u.outbox.Len())
		} else {
			u.log.Warn("collector stream ended; reconnecting", "address", u.opts.Address, "err", err,
				"in", wait.Round(time.Millisecond), "unacked", u.outbox.Len())
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil
		}
		backoff = min(backoff*2, u.opts.MaxBackoff)
	}
}

// session runs one stream; it returns how many reports were acked on it.
func (u *Uplink) session(ctx context.Context, client nbsv1.AgentServiceClient) (int, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.Connect(sctx, grpc.ForceCodecV2(newExactCodec()))
	if err != nil {
		return 0, fmt.Errorf("open stream: %w", err)
	}
	hello := u.agent.Hello()
	if u.opts.Identity != nil {
		hello.Auth = u.opts.Identity.Proof()
	}
	announced := make(map[string]bool, len(hello.GetMetrics()))
	for _, m := range hello.GetMetrics() {
		announced[m.GetId()] = true
	}
	if err := stream.Send(&nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Hello{Hello: hello}}); err != nil {
		// Send reports io.EOF and keeps the stream's real status for Recv.
		_, rerr := stream.Recv()
		return 0, fmt.Errorf("send hello: %w", errors.Join(err, rerr))
	}

	type recvResult struct {
		acked int
		err   error
	}
	recvDone := make(chan recvResult, 1)
	go func() {
		n, err := u.receive(stream)
		recvDone <- recvResult{n, err}
		cancel()
	}()

	var cursor uint64
	var sendErr error
send:
	for {
		reports, changed := u.outbox.Take(cursor, wire.MaxMessageBytes)
		for _, h := range reports {
			r := h.Report
			var req any
			var n int
			defs := u.newMetrics(r, announced)
			if h.Encoded != nil && len(r.GetNewMetrics()) == 0 {
				// As the outbox encoded it, not a second time; the
				// definitions it brings, appended (a repeated field's
				// elements may come anywhere in a message): on a busy
				// node nearly every report brings one, and the report
				// was copied and encoded again for it.
				e, err := newEncodedReport(h.Encoded, defs)
				if err != nil {
					// A definition the agent made: cannot fail to encode.
					sendErr = fmt.Errorf("report %d: %w", r.GetSequence(), err)
					break send
				}
				req, n = e, e.size()
			} else {
				sent := r
				if len(defs) > 0 {
					sent = proto.Clone(r).(*nbsv1.Report)
					sent.NewMetrics = defs
				}
				m := &nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Report{Report: sent}}
				req, n = m, proto.Size(m)
			}
			if n > wire.MaxMessageBytes {
				// The outbox splits reports well below this; sending it would
				// end the stream on every attempt. The stream ends here
				// instead, as the definitions it carried count as announced.
				u.log.Error("dropping a report larger than the collector accepts", "seq", r.GetSequence(), "bytes", n, "max", wire.MaxMessageBytes)
				u.outbox.Discard(r.GetSequence())
				sendErr = fmt.Errorf("report %d: %d bytes, over %d", r.GetSequence(), n, wire.MaxMessageBytes)
				break send
			}
			if err := stream.SendMsg(req); err != nil {
				sendErr = err
				break send
			}
			cursor = r.GetSequence()
		}
		select {
		case <-changed:
		case <-sctx.Done():
			break send
		}
	}
	_ = stream.CloseSend()
	cancel()
	res := <-recvDone
	// The receive side holds the stream's real status; Send only says io.EOF.
	if res.err != nil && status.Code(res.err) != codes.Canceled {
		return res.acked, res.err
	}
	return res.acked, sendErr
}

// newMetrics returns the definitions of the metrics r uses that this
// stream's Hello did not announce, each after its parents, and records them
// announced. They go with the report as it is sent; the stored report is
// not modified: on another stream it may be announced differently.
func (u *Uplink) newMetrics(r *nbsv1.Report, announced map[string]bool) []*nbsv1.MetricDefinition {
	var defs []*nbsv1.MetricDefinition
	for _, id := range wire.MetricIDs(r) {
		if announced[id] {
			continue
		}
		if d, ok := u.definition(id); ok {
			defs = append(defs, d)
			announced[id] = true
		}
	}
	if len(defs) == 0 {
		return nil
	}
	// Parents must be defined before (or with) their children.
	var withParents []*nbsv1.MetricDefinition
	for _, d := range defs {
		withParents = append(withParents, u.missingAncestors(d.GetId(), announced)...)
		withParents = append(withParents, d)
	}
	return withParents
}

func (u *Uplink) missingAncestors(id string, announced map[string]bool) []*nbsv1.MetricDefinition {
	var chain []*nbsv1.MetricDefinition
	for p := schema.Parent(id); p != ""; p = schema.Parent(p) {
		if announced[p] {
			break
		}
		if d, ok := u.definition(p); ok {
			chain = append([]*nbsv1.MetricDefinition{d}, chain...)
			announced[p] = true
		}
	}
	return chain
}

// definition prefers the agent's current definition and falls back to the
// one recorded with a spooled report, for metrics a restarted agent does not
// know (yet, or any more).
func (u *Uplink) definition(id string) (*nbsv1.MetricDefinition, bool) {
	if d, ok := u.agent.Definition(id); ok {
		return d, true
	}
	return u.outbox.Definition(id)
}

func (u *Uplink) receive(stream nbsv1.AgentService_ConnectClient) (int, error) {
	acked := 0
	for {
		m, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return acked, errors.New("collector closed the stream")
			}
			return acked, err
		}
		switch msg := m.GetMsg().(type) {
		case *nbsv1.ConnectResponse_Ack:
			u.outbox.Ack(msg.Ack.GetSequence())
			acked++
		case *nbsv1.ConnectResponse_Reject:
			// The collector can never store it: keeping it would block nothing
			// but would be resent forever.
			u.log.Error("collector rejected a report", "seq", msg.Reject.GetSequence(), "reason", msg.Reject.GetReason())
			u.outbox.Discard(msg.Reject.GetSequence())
		case *nbsv1.ConnectResponse_Config:
			u.agent.ApplyConfig(msg.Config)
		case *nbsv1.ConnectResponse_Enrolled:
			if u.opts.Identity == nil {
				u.log.Error("the collector enrolled this node, but the agent has no place to keep the credential; an operator must re-enroll it")
				continue
			}
			if err := u.opts.Identity.Enrolled(msg.Enrolled.GetNodeCredential()); err != nil {
				u.log.Error("enrolled, but the node credential is not saved: this agent keeps reporting, but after a restart an operator must re-enroll the node (nbs-collector nodes reenroll NODE)", "err", err)
				continue
			}
			u.log.Info("enrolled: the collector bound this node's name to a node credential, saved for later streams")
		}
	}
}
