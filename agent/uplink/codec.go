package uplink

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// exactCodec is gRPC's proto codec but for the messages the agent sends,
// which it encodes into a buffer of their own size. gRPC's takes one from
// pools of 256 B to 1 MiB: a report past 32 KiB took 1 MiB, and as the
// pools empty at each garbage collection, a new 1 MiB nearly every report
// (a quarter of an idle agent's allocation, each a step towards the next
// collection and its peak memory). Its name is gRPC's codec's: the stream
// says application/grpc+proto, which a collector decodes with that codec,
// as it did application/grpc.
type exactCodec struct{ encoding.CodecV2 }

func newExactCodec() exactCodec {
	return exactCodec{encoding.GetCodecV2(grpcproto.Name)}
}

func (exactCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("encode %T: not a protocol buffer", v)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}
