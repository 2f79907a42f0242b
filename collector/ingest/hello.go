package ingest

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/nbs-project/nbs/collector/store"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// registerNode stores the node and its Hello's definitions (in the
// registrar's next batch) and returns its id, the definitions' ids and how
// many of the node's stored definitions lie outside them. A Hello that
// repeats the definitions its node last registered writes none of them: a
// collector restart has every agent say Hello again with the same tree.
func (s *Server) registerNode(ctx context.Context, node store.Node, cat *catalogue, place *reservation) (int32, map[string]streamMetric, int, error) {
	resolved := cat.resolved()
	out := s.registrar.register(ctx, store.Registration{Node: node, Defs: cat.defs, Hash: cat.hash, NeedIDs: resolved == nil}, place)
	if out.Err != nil {
		if ctx.Err() != nil {
			return 0, nil, 0, status.FromContextError(ctx.Err()).Err()
		}
		s.log.Error("register node", "node", node.Name, "err", out.Err)
		return 0, nil, 0, status.Error(codes.Unavailable, "collector cannot reach its database; retry later")
	}
	if out.TooMany {
		s.metrics.Rejects.WithLabelValues("too_many_metrics").Inc()
		return 0, nil, 0, status.Errorf(codes.ResourceExhausted, "hello: node %s would have %d metric definitions (%d stored from earlier Hellos + %d in this one), at most %d allowed (--ingest.max-metrics-per-node): delete the node to start afresh",
			node.Name, out.Others+len(cat.defs), out.Others, len(cat.defs), s.limits.MaxMetrics)
	}
	if out.IDs == nil {
		// Metric ids are global: a catalogue another node registered
		// needs no query at all.
		return out.ID, resolved, out.Others, nil
	}
	return out.ID, cat.resolve(out.IDs), out.Others, nil
}

// receiveHello reads and checks a stream's Hello within the server's Hello
// budget (ServerOptions.HelloBytes) and reduces it to what registering it
// needs: the node and its interned catalogue. It returns how much of the
// budget the stream still holds; release it once registered.
func (s *Server) receiveHello(ctx context.Context, gs nbsv1.AgentService_ConnectServer) (*nbsv1.Hello, store.Node, *catalogue, int64, error) {
	var node store.Node
	// Reserved before the Hello is read: past the budget, a stream waits
	// here, with at most its stream window of its Hello in gRPC's buffers.
	if err := s.helloBytes.Acquire(ctx, HelloReserve); err != nil {
		return nil, node, nil, 0, status.FromContextError(ctx.Err()).Err()
	}
	held := int64(HelloReserve)
	fail := func(err error) (*nbsv1.Hello, store.Node, *catalogue, int64, error) {
		s.helloBytes.Release(held)
		return nil, node, nil, 0, err
	}
	hello, err := s.awaitHello(ctx, gs)
	if err != nil {
		return fail(err)
	}
	if size := int64(proto.Size(hello)); size > held {
		if size > s.helloBudget || !s.helloBytes.TryAcquire(size-held) {
			s.metrics.Rejects.WithLabelValues("hello_budget").Inc()
			return fail(status.Errorf(codes.Unavailable, "hello of %d bytes: the collector is registering other nodes' Hellos; retry later", size))
		}
		held = size
	}
	node, defs, rej := s.limits.checkHello(hello)
	if rej != nil {
		s.metrics.Rejects.WithLabelValues(rej.reason).Inc()
		code := codes.InvalidArgument
		if rej.reason == "too_many_capabilities" || rej.reason == "too_many_metrics" {
			code = codes.ResourceExhausted
		}
		return fail(status.Error(code, rej.msg))
	}
	// From here on the Hello names its node canonically, for the
	// authenticator as for the store (schema.CanonicalNodeName).
	hello.NodeName = node.Name
	cat := s.catalogues.intern(defs)
	// The definitions are in the catalogue now (or were already, and
	// these copies are garbage): what waits for a slot is the node alone.
	hello.Metrics = nil
	if rest := int64(proto.Size(hello)); rest < held {
		s.helloBytes.Release(held - rest)
		held = rest
	}
	return hello, node, cat, held, nil
}

func (s *Server) awaitHello(ctx context.Context, gs nbsv1.AgentService_ConnectServer) (*nbsv1.Hello, error) {
	type result struct {
		m   *nbsv1.ConnectRequest
		err error
	}
	ch := make(chan result, 1)
	// Recv has no deadline of its own; this goroutine ends when the stream does.
	go func() {
		m, err := gs.Recv()
		ch <- result{m, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			s.countRecvError(r.err)
			if errors.Is(r.err, io.EOF) {
				return nil, status.Error(codes.InvalidArgument, "the stream ended before its Hello")
			}
			return nil, r.err
		}
		if h := r.m.GetHello(); h != nil {
			return h, nil
		}
		s.metrics.Rejects.WithLabelValues("protocol").Inc()
		return nil, status.Error(codes.InvalidArgument, "the first message of a stream must be a Hello")
	case <-time.After(s.helloTimeout):
		s.metrics.Rejects.WithLabelValues("protocol").Inc()
		return nil, status.Errorf(codes.DeadlineExceeded, "no Hello within %s", s.helloTimeout)
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}
