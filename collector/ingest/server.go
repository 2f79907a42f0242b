// Package ingest is the collector's gRPC side: it validates what agents send,
// hands reports to the batching writer and acks them after commit.
package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/telemetry"
	"github.com/nbs-project/nbs/collector/tenant"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// Registry is what a stream needs from the store to register a node.
type Registry interface {
	// AdmitNodes decides for each name whether a Hello from it may
	// register under a limit of max nodes, counting reserved new names
	// admitted before and not registered yet (store.AdmitNodes): fresh
	// marks admitted names without a node; total is the node count when
	// one is refused.
	AdmitNodes(ctx context.Context, names []string, max, reserved int) (admitted, fresh []bool, total int, err error)
	// RegisterNodes stores a batch of Hellos' nodes and definitions, a
	// result (or error) per Hello (store.RegisterNodes).
	RegisterNodes(ctx context.Context, regs []store.Registration, maxMetrics int) []store.Registered
	// UpsertDefinitions stores definitions a stream's reports bring.
	UpsertDefinitions(ctx context.Context, nodeID int32, defs []store.MetricDef) (map[string]int32, error)
}

// ConfigSource computes the effective Config for a node (thresholds, peers,
// expand requests).
type ConfigSource interface {
	ConfigFor(ctx context.Context, node store.Node) (*nbsv1.Config, error)
}

// StaticConfig sends the same Config to every node: the catalogue defaults.
type StaticConfig struct{}

func (StaticConfig) ConfigFor(context.Context, store.Node) (*nbsv1.Config, error) {
	return &nbsv1.Config{Version: 1}, nil
}

type Server struct {
	nbsv1.UnimplementedAgentServiceServer

	registry     Registry
	writer       *Writer
	config       ConfigSource
	guard        PingGuard // nil: no tenancy checks of ping targets
	auth         Authenticator
	tenant       tenant.Key
	limits       Limits
	helloTimeout time.Duration
	sendTimeout  time.Duration
	registering  chan struct{} // a slot per Hello being registered (ServerOptions.Hellos)
	// authenticating: a slot per Hello being authenticated, which may
	// take a database connection of its own.
	authenticating chan struct{}
	registrar      *registrar
	// quotas, when set, bound each tenant's nodes (admitTenant).
	quotas TenantQuotas
	// helloBytes bounds the Hellos being received or waiting for a slot:
	// each reserves helloReserve before its Hello is read.
	helloBytes  *semaphore.Weighted
	helloBudget int64
	catalogues  catalogues
	// runner handles reports off the streams' handler goroutines
	// (handleAside), whose stacks then stay at 8 KiB.
	runner  *runner
	tasks   reportTasks
	log     *slog.Logger
	metrics *telemetry.Metrics

	mu      sync.Mutex
	streams map[string]*stream       // by node name: the one stream that speaks for it
	clock   map[string]time.Duration // node → estimated clock offset, from its stream's reports
	open    int                      // streams being served, with a Hello or not
	perIP   map[string]int           // open streams by source address
	tenants tenantGate
}

// DefaultSendTimeout is how long one message to an agent may wait for the
// agent to read before its stream is ended. An agent that reads nothing for
// this long is wedged; it reconnects and gets the newest Config.
const DefaultSendTimeout = 30 * time.Second

// clockSamples is how many recent reports a node's clock offset is
// estimated from.
const clockSamples = 16

// DefaultHelloTimeout is how long a new stream may take to send its Hello;
// a stream that never does holds a goroutine and buffers until it ends.
const DefaultHelloTimeout = 10 * time.Second

type ServerOptions struct {
	Limits       Limits
	HelloTimeout time.Duration
	// SendTimeout ends a stream whose agent has not taken one message for
	// this long (default DefaultSendTimeout).
	SendTimeout time.Duration
	Config      ConfigSource
	// Auth verifies node names (default: OpenNames).
	Auth Authenticator
	// Tenant is the label key naming a node's tenant (default
	// tenant.DefaultKey): a node whose tenant changes starts a new row.
	Tenant tenant.Key
	// Registrations bounds the database connections registering Hellos
	// takes at once (default DefaultRegistrations): one is the
	// registrar's, which stores every waiting Hello's node and
	// definitions in one batch; the rest (at least one) authenticate
	// Hellos. So a fleet reconnecting at once cannot take every database
	// connection from the writers that ack reports.
	Registrations int
	// Hellos bounds the Hellos being registered at once (default
	// DefaultHellos): admitted, authenticated and stored, waiting on the
	// registrar's batches. The rest wait their turn.
	Hellos int
	// HelloBytes bounds the memory of Hellos being received or waiting
	// to be registered (default DefaultHelloBytes): a stream reserves
	// HelloReserve of it before its Hello is read, and keeps only what
	// its Hello holds once decoded (its definitions are shared with every
	// stream that brought the same ones). Past it, new streams wait before
	// their Hello is read: gRPC flow control holds the agents back, each
	// with at most its stream window (64 KiB) of its Hello buffered here,
	// instead of the several times its size a decoded Hello takes.
	HelloBytes int64
	// Quotas, when set, bound each tenant's new nodes: the operator's
	// quota, else Limits.MaxNodesPerTenant.
	Quotas TenantQuotas
	// PingGuard finds ping targets naming another tenant's node (default:
	// Config, when it is one; none otherwise).
	PingGuard PingGuard
}

// DefaultRegistrations is how many database connections registering
// Hellos holds at most: the registrar's and one authenticating.
const DefaultRegistrations = 2

// DefaultHellos is how many Hellos are registered at once: enough to
// fill the registrar's batches while the one before is stored.
const DefaultHellos = 2 * defaultBatch

// DefaultHelloBytes is the memory Hellos being received or waiting to be
// registered may take: 256 Hellos being read at once.
const DefaultHelloBytes = 64 << 20

// HelloReserve is what a stream reserves of ServerOptions.HelloBytes
// before its Hello is read: more than the agent's whole catalogue
// (about 100 KB). A larger Hello must find the rest free at once, or is
// refused with Unavailable (the agent retries).
const HelloReserve = 256 << 10

func NewServer(reg Registry, w *Writer, opts ServerOptions, log *slog.Logger, m *telemetry.Metrics) *Server {
	if opts.HelloTimeout <= 0 {
		opts.HelloTimeout = DefaultHelloTimeout
	}
	if opts.SendTimeout <= 0 {
		opts.SendTimeout = DefaultSendTimeout
	}
	if opts.Config == nil {
		opts.Config = StaticConfig{}
	}
	if opts.Limits == (Limits{}) {
		opts.Limits = DefaultLimits()
	}
	if opts.Auth == nil {
		opts.Auth = OpenNames{}
	}
	if opts.Tenant == "" {
		opts.Tenant = tenant.DefaultKey
	}
	if opts.Registrations <= 0 {
		opts.Registrations = DefaultRegistrations
	}
	if opts.Hellos <= 0 {
		opts.Hellos = DefaultHellos
	}
	if opts.HelloBytes < HelloReserve {
		opts.HelloBytes = DefaultHelloBytes
	}
	if g, ok := opts.Config.(PingGuard); ok && opts.PingGuard == nil {
		opts.PingGuard = g
	}
	return &Server{registry: reg, writer: w, config: opts.Config, guard: opts.PingGuard, auth: opts.Auth, tenant: opts.Tenant, limits: opts.Limits, helloTimeout: opts.HelloTimeout,
		sendTimeout: opts.SendTimeout, registering: make(chan struct{}, opts.Hellos),
		authenticating: make(chan struct{}, max(1, opts.Registrations-1)), registrar: newRegistrar(reg, opts.Limits, log),
		helloBytes: semaphore.NewWeighted(opts.HelloBytes), helloBudget: opts.HelloBytes,
		quotas: opts.Quotas, tenants: tenantGate{pending: map[string]int{}},
		runner: newRunner(), log: log, metrics: m, streams: map[string]*stream{}, perIP: map[string]int{}, clock: map[string]time.Duration{}}
}

// Connect serves one agent's stream: Hello, then reports until either side ends it.
//
// It is kept thin on purpose: its goroutine waits in Recv for the whole
// life of the stream, and registering the node may grow its stack (an
// Authenticator or ConfigSource querying the database runs on it). Go
// halves a parked goroutine's stack only while it uses less than a quarter
// of it, 800 bytes of guard included: for an idle stream's 16 KiB to shrink
// back to 8 KiB, the frames from gRPC's handler goroutine down to its wait
// in Recv must take under about 3.2 KiB, and gRPC's own take all but about
// 130 bytes of that (grpc-go 1.85, amd64). So the setup is in begin and the
// teardown in finish, which have returned or not started while it waits,
// there are no defers here, and the receiving loop is in this frame. Its
// margin is about 50 bytes: TestIdleStreamStack fails when a change here
// or in grpc-go takes it (an idle stream then costs 8 KiB more).
func (s *Server) Connect(grpcStream nbsv1.AgentService_ConnectServer) error {
	sv, err := s.begin(grpcStream)
	if err != nil {
		return err
	}
	if !sv.interruptible {
		return s.finish(sv, s.recvAside(sv))
	}
	// Ending the stream from outside cancels the context Recv waits on:
	// this goroutine receives, and no other waits for it. This is
	// recvLoop, in this frame: a frame less on the way to Recv.
	for {
		if err := grpcStream.RecvMsg(&sv.in); err != nil {
			s.countRecvError(err)
			return s.finish(sv, err)
		}
		if err := s.handleAside(sv, &sv.in.ConnectRequest); err != nil {
			return s.finish(sv, err)
		}
	}
}

// served is a stream being served: what receiving needs and what its end
// releases.
type served struct {
	gs            nbsv1.AgentService_ConnectServer
	ctx           context.Context
	cancel        context.CancelCauseFunc
	interruptible bool
	from          string
	st            *stream
	cat           *catalogue
	// in is what each message is received into (Codec), reused: it
	// holds nothing between two messages (handleAside releases it).
	in inbound
}

// begin admits the stream and registers its Hello (start); on an error
// it has released everything it took.
func (s *Server) begin(grpcStream nbsv1.AgentService_ConnectServer) (*served, error) {
	ctx, made, cancel, interruptible := streamContext(grpcStream.Context())
	from := peerAddr(ctx)
	if err := s.admit(from); err != nil {
		cancel(nil)
		return nil, err
	}
	st, cat, err := s.start(ctx, made, cancel, grpcStream, from)
	if err != nil {
		s.release(from)
		cancel(nil)
		return nil, err
	}
	sv := &served{gs: grpcStream, ctx: ctx, cancel: cancel, interruptible: interruptible, from: from, st: st, cat: cat}
	sv.in.metrics = &st.metrics
	return sv, nil
}

// finish ends a stream begin started, once receiving stopped with
// recvErr: its sender is closed, its node's entry, catalogue and
// admission released. A panic while receiving ends the process (gRPC does
// not recover it), so nothing is left to release then.
func (s *Server) finish(sv *served, recvErr error) error {
	sv.cancel(nil)
	sv.st.close()
	err := s.ended(sv.ctx, sv.st, recvErr)
	s.unregister(sv.st)
	s.catalogues.release(sv.cat)
	s.release(sv.from)
	return err
}

// recvAside receives on a goroutine of its own, for a gRPC server without
// InterruptibleStreams: Recv cannot be interrupted then, so the receiver
// may outlive this function by a moment; returning ends the gRPC stream,
// which ends its Recv.
func (s *Server) recvAside(sv *served) error {
	recvDone := make(chan error, 1)
	go func() { recvDone <- s.recvLoop(sv) }()
	select {
	case err := <-recvDone:
		return err
	case <-sv.ctx.Done(): // ended from outside, by a failed Send, or the agent went away
		return nil
	}
}

// start receives and registers the stream's Hello and makes the stream
// its node's, with its Config on the way. The catalogue it returns is
// held until the stream ends. The database is queried with made, the
// context gRPC made for the stream (streamContext): until the stream is
// registered, nothing but its end cancels ctx, and made ends with it.
func (s *Server) start(ctx, made context.Context, cancel context.CancelCauseFunc, grpcStream nbsv1.AgentService_ConnectServer, from string) (*stream, *catalogue, error) {
	hello, node, cat, held, err := s.receiveHello(ctx, grpcStream)
	if err != nil {
		return nil, nil, err
	}
	keep := false
	defer func() {
		if !keep {
			s.catalogues.release(cat)
		}
	}()
	releaseHello := sync.OnceFunc(func() { s.helloBytes.Release(held) })
	defer releaseHello()
	select {
	case s.registering <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, status.FromContextError(ctx.Err()).Err()
	}
	registered := sync.OnceFunc(func() { <-s.registering; releaseHello() })
	defer registered()
	// The node limit before anything is bound to the name: a bootstrap
	// token's holder cannot fill the collector with credentials. A new
	// name admitted keeps its place under the limit until its node is
	// stored (or its Hello refused), so Hellos registering together
	// cannot pass the limit.
	admitted, total, place, err := s.registrar.admit(made, node.Name)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, status.FromContextError(ctx.Err()).Err()
		}
		s.log.Error("count nodes", "node", node.Name, "err", err)
		return nil, nil, status.Error(codes.Unavailable, "collector cannot reach its database; retry later")
	}
	defer s.registrar.release(place)
	if !admitted {
		s.metrics.Rejects.WithLabelValues("too_many_nodes").Inc()
		s.log.Warn("new node refused: node limit reached", "node", node.Name, "peer", from, "nodes", total, "limit", s.limits.MaxNodes)
		return nil, nil, status.Errorf(codes.ResourceExhausted, "the collector has %d nodes, at most %d allowed (--ingest.max-nodes): delete unused nodes (nbs-collector nodes delete) or raise the limit", total, s.limits.MaxNodes)
	}
	grant, err := s.authenticate(made, hello)
	if err != nil {
		s.metrics.Rejects.WithLabelValues("node_auth").Inc()
		s.log.Warn("hello refused", "node", node.Name, "peer", from, "err", err)
		return nil, nil, err
	}
	node.Labels, node.ClaimedLabels = grant.Apply(node.Labels)
	node.Tenant = s.tenant.Of(node.Labels)
	if node.ClaimedLabels != nil {
		s.metrics.LabelConflicts.Inc()
		s.log.Warn("hello claims labels bound otherwise by the operator; using the bound ones", "node", node.Name, "peer", from,
			"claimed", node.ClaimedLabels, "bound", grant.Bound)
	}
	if grant.Credential != "" {
		// Sent before anything can fail: the name is bound now, and the
		// credential is never shown again.
		if err := grpcStream.Send(&nbsv1.ConnectResponse{Msg: &nbsv1.ConnectResponse_Enrolled{
			Enrolled: &nbsv1.Enrolled{NodeCredential: grant.Credential}}}); err != nil {
			s.log.Error("node enrolled but its credential could not be sent; an operator must re-enroll it", "node", node.Name, "peer", from, "err", err)
			return nil, nil, err
		}
	}
	if place != nil {
		// A new name: its tenant's quota, once its tenant is known. An
		// enrollment's credential went to the agent already, so a node
		// refused here comes back with it once there is room.
		tenantDone, err := s.admitTenant(made, node.Tenant)
		if err != nil {
			var qe *quotaError
			if !errors.As(err, &qe) {
				s.log.Error("count a tenant's nodes", "node", node.Name, "tenant", node.Tenant, "err", err)
				return nil, nil, status.Error(codes.Unavailable, "collector cannot reach its database; retry later")
			}
			s.metrics.Rejects.WithLabelValues("too_many_nodes_in_tenant").Inc()
			s.log.Warn("new node refused: its tenant's node quota reached", "node", node.Name, "peer", from, "tenant", node.Tenant,
				"nodes", qe.nodes, "quota", qe.quota)
			return nil, nil, qe.GRPCStatus().Err()
		}
		defer tenantDone()
	}
	// Ping targets naming another tenant's node are left out before
	// anything is stored (PingGuard), and so is what reports say of them.
	foreign, err := s.foreignTargets(made, node, cat.defs)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, status.FromContextError(ctx.Err()).Err()
		}
		s.log.Error("check ping targets", "node", node.Name, "err", err)
		return nil, nil, status.Error(codes.Unavailable, "collector cannot reach its database; retry later")
	}
	if len(foreign) > 0 {
		s.refuseForeign(node, foreign, "hello")
		own := s.catalogues.intern(withoutSubtrees(cat.defs, foreign))
		s.catalogues.release(cat)
		cat = own
	}
	var base map[string]streamMetric
	var others int
	// The stream's own start: a report older than it is a resent one,
	// which may be from before a move (formerRow).
	node.LastHello = time.Now()
	node.ID, base, others, err = s.registerNode(made, node, cat, place)
	if err != nil {
		return nil, nil, err
	}
	registered()
	st := &stream{node: node, peer: from, metrics: metricSet{base: base}, otherDefs: int32(others), ctx: ctx, end: cancel, runner: s.runner}
	if len(foreign) > 0 {
		st.tenancy = &streamTenancy{foreign: foreign}
	}
	cfg, err := s.config.ConfigFor(made, node)
	if err != nil {
		s.log.Error("compute config", "node", node.Name, "err", err)
		return nil, nil, status.Error(codes.Unavailable, "collector cannot compute this node's config; retry later")
	}
	st.offerConfig(cfg)

	s.register(st)
	// Only now may anything reach the agent: once it has its Config, it
	// finds its node connected.
	st.sendMu.Lock()
	st.transmit = s.transmitter(grpcStream, st)
	st.startSender()
	st.sendMu.Unlock()
	s.log.Info("agent connected", "node", node.Name, "instance", fmt.Sprintf("%016x", node.InstanceID), "peer", from, "metrics", len(cat.defs))
	keep = true
	return st, cat, nil
}

// authenticate runs the Authenticator in one of the authentication
// slots: it may query the database.
func (s *Server) authenticate(ctx context.Context, hello *nbsv1.Hello) (Grant, error) {
	if _, ok := s.auth.(SelfBounded); ok {
		return s.auth.Authenticate(ctx, hello)
	}
	select {
	case s.authenticating <- struct{}{}:
	case <-ctx.Done():
		return Grant{}, status.FromContextError(ctx.Err()).Err()
	}
	defer func() { <-s.authenticating }()
	return s.auth.Authenticate(ctx, hello)
}

// ended is the status a stream ends with, once its receiving has stopped
// with recvErr and its sender is closed.
func (s *Server) ended(ctx context.Context, st *stream, recvErr error) error {
	node := st.node
	// Ended from outside (replaced, revoked), or by a Send that failed or
	// waited too long: that is the agent's answer.
	if cause := context.Cause(ctx); cause != nil {
		if sc, ok := status.FromError(cause); ok && sc.Code() != codes.Canceled {
			recvErr = cause
		}
	}
	if errors.Is(recvErr, io.EOF) {
		// The agent closed its side: a clean end, not an error.
		s.log.Info("agent closed its stream", "node", node.Name, "instance", fmt.Sprintf("%016x", node.InstanceID))
		return nil
	}
	s.log.Info("agent disconnected", "node", node.Name, "instance", fmt.Sprintf("%016x", node.InstanceID), "reason", recvErr)
	if status.Code(recvErr) == codes.Canceled || errors.Is(recvErr, context.Canceled) {
		return nil
	}
	return recvErr
}

// admit counts a new stream against the total and per-address limits;
// release undoes it when the stream ends.
func (s *Server) admit(from string) error {
	ip := hostOf(from)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open >= s.limits.MaxStreams {
		s.metrics.Rejects.WithLabelValues("too_many_streams").Inc()
		return status.Errorf(codes.ResourceExhausted, "the collector serves %d streams, at most %d allowed (--ingest.max-streams); retry later", s.open, s.limits.MaxStreams)
	}
	if s.perIP[ip] >= s.limits.MaxStreamsPerIP {
		s.metrics.Rejects.WithLabelValues("too_many_streams_per_address").Inc()
		return status.Errorf(codes.ResourceExhausted, "%d streams from %s, at most %d allowed per source address (--ingest.max-streams-per-address)", s.perIP[ip], ip, s.limits.MaxStreamsPerIP)
	}
	s.open++
	s.perIP[ip]++
	return nil
}

func (s *Server) openStreams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open
}

func (s *Server) release(from string) {
	ip := hostOf(from)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open--
	if s.perIP[ip]--; s.perIP[ip] <= 0 {
		delete(s.perIP, ip)
	}
}

func hostOf(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// noteClock updates the node's clock offset: the largest of the recent
// (report time − receipt time). Transit and queueing only ever lower that
// difference, and a resent old report lowers it a lot, so the largest is
// the one closest to the true offset.
func (s *Server) noteClock(st *stream, d time.Duration) {
	st.offsets[st.nOffsets%clockSamples] = d
	st.nOffsets++
	est := st.offsets[0]
	for _, o := range st.offsets[1:min(st.nOffsets, clockSamples)] {
		est = max(est, o)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.streams[st.node.Name] == st {
		s.clock[st.node.Name] = est
	}
}

// ClockOffset is how far the node's clock is ahead of this collector's
// (negative: behind), estimated from the reports of its open stream.
func (s *Server) ClockOffset(node string) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.streams[node] == nil {
		return 0, false
	}
	d, ok := s.clock[node]
	return d, ok
}

// countRecvError counts a message gRPC refused as too large before the
// stream ends with it.
func (s *Server) countRecvError(err error) {
	if status.Code(err) == codes.ResourceExhausted {
		s.metrics.Rejects.WithLabelValues("message_too_large").Inc()
	}
}

func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

// recvLoop receives until the stream ends, on the goroutine recvAside
// starts (Connect does the same itself): one message at a time, handled by
// handle, which has returned by the time it waits again.
func (s *Server) recvLoop(sv *served) error {
	for {
		if err := sv.gs.RecvMsg(&sv.in); err != nil {
			s.countRecvError(err)
			return err
		}
		if err := s.handleAside(sv, &sv.in.ConnectRequest); err != nil {
			return err
		}
	}
}

// handle is one message from the agent.
// seen is room for checkReport (nil: it makes its own).
func (s *Server) handle(sv *served, m *nbsv1.ConnectRequest, seen map[string]bool) error {
	if sv.ctx.Err() != nil {
		// Replaced or revoked while this message was on its way.
		return sv.ctx.Err()
	}
	switch msg := m.GetMsg().(type) {
	case *nbsv1.ConnectRequest_Report:
		return s.handleReport(sv.ctx, sv.st, msg.Report, seen)
	case *nbsv1.ConnectRequest_Hello:
		s.metrics.Rejects.WithLabelValues("protocol").Inc()
		return status.Error(codes.InvalidArgument, "a second Hello on one stream: open a new stream to re-identify")
	default:
		s.metrics.Rejects.WithLabelValues("protocol").Inc()
		return status.Error(codes.InvalidArgument, "empty or unknown message: expected a Report")
	}
}

func (s *Server) handleReport(ctx context.Context, st *stream, r *nbsv1.Report, seen map[string]bool) error {
	received := time.Now()
	if r.GetSequence() > st.lastSeq {
		s.noteClock(st, time.Unix(0, r.GetTimeUnixNano()).Sub(received))
	}
	if err := s.guardReport(ctx, st, r); err != nil {
		return err
	}
	dest, err := s.destination(ctx, st, r)
	if err != nil {
		return err
	}
	arr := s.writer.arrays.get(arrayClass(r))
	rep, newDefs, rej := s.limits.checkReportInto(r, st, received, seen, arr)
	arr.hold(&rep)
	if rej != nil {
		s.writer.arrays.put(arr)
		s.metrics.Rejects.WithLabelValues(rej.reason).Inc()
		s.metrics.Reports.WithLabelValues("rejected").Inc()
		s.log.Warn("report rejected", "node", st.node.Name, "seq", r.GetSequence(), "reason", rej.msg)
		if rej.reason != "sequence_backwards" {
			st.lastSeq = max(st.lastSeq, r.GetSequence())
		}
		st.send(&nbsv1.ConnectResponse{Msg: &nbsv1.ConnectResponse_Reject{Reject: &nbsv1.Reject{Sequence: r.GetSequence(), Reason: rej.msg}}})
		return nil
	}
	if len(newDefs) > 0 {
		ids, err := s.registry.UpsertDefinitions(ctx, st.node.ID, newDefs)
		if err == nil && dest != st.node.ID {
			// The row the report goes to reads it by these too.
			_, err = s.registry.UpsertDefinitions(ctx, dest, newDefs)
		}
		if err != nil {
			s.writer.arrays.put(arr)
			s.log.Error("register new metric definitions", "node", st.node.Name, "err", err)
			return status.Error(codes.Unavailable, "collector cannot reach its database; retry later")
		}
		for _, d := range newDefs {
			st.metrics.add(d.Path, streamMetric{id: ids[d.Path], kind: d.Kind, path: d.Path})
		}
		// A Config carries only the overrides of metrics the node has: the
		// new ones may have some.
		s.PushConfig(ctx, st.node.Name)
	}
	st.lastSeq = rep.Seq
	rep.NodeID = dest
	rep.Received = received
	for i := range rep.Samples {
		rep.Samples[i].MetricID = metricID(&st.metrics, rep.Samples[i].Path)
	}
	for i := range rep.Histograms {
		rep.Histograms[i].MetricID = metricID(&st.metrics, rep.Histograms[i].Path)
	}
	for i := range rep.Events {
		rep.Events[i].MetricID = metricID(&st.metrics, rep.Events[i].Path)
	}
	seq := rep.Seq
	return s.writer.submit(ctx, rep, arr, func(duplicate bool, err error) {
		if err != nil {
			st.trySend(&nbsv1.ConnectResponse{Msg: &nbsv1.ConnectResponse_Reject{Reject: &nbsv1.Reject{
				Sequence: seq, Reason: "the database refused this report: " + err.Error()}}})
			return
		}
		st.trySend(newAck(seq, duplicate))
	})
}

// ackMessage is an Ack as sent, in one allocation rather than three: an
// agent is acked every report.
type ackMessage struct {
	resp  nbsv1.ConnectResponse
	oneof nbsv1.ConnectResponse_Ack
	ack   nbsv1.Ack
}

func newAck(seq uint64, duplicate bool) *nbsv1.ConnectResponse {
	m := new(ackMessage)
	m.ack.Sequence, m.ack.Duplicate = seq, duplicate
	m.oneof.Ack = &m.ack
	m.resp.Msg = &m.oneof
	return &m.resp
}

// metricID is the id of a metric checkReport accepted: every path it
// lets through is defined.
func metricID(m *metricSet, path string) int32 {
	sm, _ := m.get(path)
	return sm.id
}

// register makes st the stream of its node. A stream already there is an
// older one of the same node (an agent restarted while its old connection
// lingers): it is ended, so config pushes and the node's connected state
// follow the newest. Only authenticated streams get here, so an impostor
// cannot displace a node.
func (s *Server) register(st *stream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.streams[st.node.Name]; old != nil {
		s.log.Info("a new stream replaces the node's older one", "node", st.node.Name,
			"old_instance", fmt.Sprintf("%016x", old.node.InstanceID), "old_peer", old.peer,
			"instance", fmt.Sprintf("%016x", st.node.InstanceID), "peer", st.peer)
		old.end(status.Errorf(codes.Aborted, "node %s: replaced by a newer stream of the same node (instance %016x from %s)",
			st.node.Name, st.node.InstanceID, st.peer))
	}
	s.streams[st.node.Name] = st
	s.metrics.Streams.Set(float64(len(s.streams)))
}

func (s *Server) unregister(st *stream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// A newer stream may already have replaced this one.
	if s.streams[st.node.Name] == st {
		delete(s.streams, st.node.Name)
		delete(s.clock, st.node.Name)
	}
	s.metrics.Streams.Set(float64(len(s.streams)))
}

// Disconnect ends the node's stream on this collector, if it has one, with
// cause as the status its agent gets (e.g. PermissionDenied once revoked).
func (s *Server) Disconnect(node string, cause error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.streams[node]
	if st == nil {
		return false
	}
	delete(s.streams, node)
	delete(s.clock, node)
	s.metrics.Streams.Set(float64(len(s.streams)))
	st.end(cause)
	return true
}

// Connected reports whether a node has a stream open on this collector.
func (s *Server) Connected(node string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streams[node] != nil
}

// PushConfig recomputes the effective Config of the named nodes connected
// here (all of them when names is empty) and leaves it in each stream's
// mailbox. It waits for no agent: each stream's own sender delivers it.
func (s *Server) PushConfig(ctx context.Context, names ...string) {
	s.mu.Lock()
	var targets []*stream
	if len(names) == 0 {
		for _, st := range s.streams {
			targets = append(targets, st)
		}
	} else {
		for _, n := range names {
			if st := s.streams[n]; st != nil {
				targets = append(targets, st)
			}
		}
	}
	s.mu.Unlock()
	for _, st := range targets {
		if st.ctx.Err() != nil {
			continue
		}
		cfg, err := s.config.ConfigFor(ctx, st.node)
		if ctx.Err() != nil {
			return // the collector is stopping
		}
		if err != nil {
			s.log.Error("compute config", "node", st.node.Name, "err", err)
			continue
		}
		st.offerConfig(cfg)
		st.recheckPing.Store(true)
	}
}
