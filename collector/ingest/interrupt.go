package ingest

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// streamCancelKey holds, in an agent stream's context, the function that
// cancels the context gRPC's Recv and Send wait on.
type streamCancelKey struct{}

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

func interruptible(ctx context.Context, _ *tap.Info) (context.Context, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	return context.WithValue(ctx, streamCancelKey{}, cancel), nil
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
func streamContext(ctx context.Context) (context.Context, context.CancelCauseFunc, bool) {
	cancel, ok := ctx.Value(streamCancelKey{}).(context.CancelCauseFunc)
	sw, writes := grpc.ServerTransportStreamFromContext(ctx).(statusWriter)
	if !ok || !writes {
		ctx, cancel := context.WithCancelCause(ctx)
		return ctx, cancel, false
	}
	return ctx, func(cause error) {
		if ctx.Err() == nil {
			if st, ok := status.FromError(cause); ok && cause != nil && st.Code() != codes.Canceled {
				_ = sw.WriteStatus(st) // it fails only once a status is written
			}
		}
		cancel(cause)
	}, true
}
