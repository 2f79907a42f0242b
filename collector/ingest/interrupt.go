package ingest

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// streamCancelKey holds, in an agent stream's context, its interruptor.
type streamCancelKey struct{}

// interruptor is what InterruptibleStreams leaves in a stream's context:
// the function that cancels the context gRPC's Recv and Send wait on, and
// the context gRPC made for the stream, which that one derives from.
type interruptor struct {
	cancel context.CancelCauseFunc
	made   context.Context
}

// InterruptibleStreams is the gRPC server option that lets the agent
// service end a stream while its handler waits in Recv: a newer stream of
// the node replaced it, an operator revoked the node, or its agent stopped
// reading. gRPC's Recv waits on the stream's own context, which a handler
// cannot cancel; this gives every stream a cancellable one (grpc.InTapHandle
// is the only hook that can replace it).
//
// With it, the handler's goroutine receives and no second goroutine per
// stream waits for it: one goroutine stack (8–16 KiB) less per connected
// node. Without it (a gRPC server built without this option, or a
// grpc-go whose transport stream no longer writes its own status), Connect
// receives on a goroutine of its own, as it must. grpc.InTapHandle is
// experimental in grpc-go, and a server takes only one: another tap would
// have to do this too.
func InterruptibleStreams() grpc.ServerOption {
	return grpc.InTapHandle(interruptible)
}

func interruptible(made context.Context, _ *tap.Info) (context.Context, error) {
	ctx, cancel := context.WithCancelCause(made)
	return context.WithValue(ctx, streamCancelKey{}, interruptor{cancel: cancel, made: made}), nil
}

// statusWriter is what gRPC's server transport stream does besides
// grpc.ServerTransportStream: write the stream's final status.
type statusWriter interface {
	WriteStatus(*status.Status) error
}

// streamContext is the context a stream is served with and the function
// that ends it with a cause. With InterruptibleStreams (true), it is the
// stream's own context, and ending it first writes the cause's status: a
// Recv or Send that the cancel interrupts would otherwise answer the agent
// with Canceled itself, and the first status written is the one it gets.
// Else (false) it is a context derived from the stream's, which Recv does
// not see.
//
// made is the context gRPC made for the stream, which the served one
// derives from: it ends when the agent goes away or the server stops, and
// only the cancel also ends the served one. Registering the node queries
// the database with it, before anything can call the cancel: a query
// (pgx watches its context) made with the served context would leave a
// table of its children in it for the whole life of the stream (Go's
// context keeps that table once made; about 250 bytes a connected node).
func streamContext(ctx context.Context) (served, made context.Context, cancel context.CancelCauseFunc, interruptible bool) {
	in, ok := ctx.Value(streamCancelKey{}).(interruptor)
	sw, writes := grpc.ServerTransportStreamFromContext(ctx).(statusWriter)
	if !ok || !writes {
		served, cancel := context.WithCancelCause(ctx)
		return served, ctx, cancel, false
	}
	return ctx, in.made, func(cause error) {
		if ctx.Err() == nil {
			if st, ok := status.FromError(cause); ok && cause != nil && st.Code() != codes.Canceled {
				_ = sw.WriteStatus(st) // it fails only once a status is written
			}
		}
		in.cancel(cause)
	}, true
}
