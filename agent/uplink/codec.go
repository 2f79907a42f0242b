package uplink

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
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
	if e, ok := v.(encodedReport); ok {
		if len(e.defs) > 0 {
			return mem.BufferSlice{mem.SliceBuffer(e.head), mem.SliceBuffer(e.report), mem.SliceBuffer(e.defs)}, nil
		}
		return mem.BufferSlice{mem.SliceBuffer(e.head), mem.SliceBuffer(e.report)}, nil
	}
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

// encodedReport is a ConnectRequest carrying a report that is already
// encoded (the outbox's encoding): the request's encoding is the report
// field's tag and length (head), then the report's bytes, then the
// encoding of the definitions sent with it (Report.new_metrics, which the
// outbox's encoding does not hold): elements of a repeated field may come
// anywhere in a message, so the collector decodes the report with them.
type encodedReport struct{ head, report, defs []byte }

func newEncodedReport(report []byte, defs []*nbsv1.MetricDefinition) (encodedReport, error) {
	var extra []byte
	if len(defs) > 0 {
		field := (&nbsv1.Report{}).ProtoReflect().Descriptor().Fields().ByName("new_metrics").Number()
		for _, d := range defs {
			extra = protowire.AppendTag(extra, field, protowire.BytesType)
			var err error
			if extra, err = (proto.MarshalOptions{}).MarshalAppend(protowire.AppendVarint(extra, uint64(proto.Size(d))), d); err != nil {
				return encodedReport{}, fmt.Errorf("encode the definition of %s: %w", d.GetId(), err)
			}
		}
	}
	field := (&nbsv1.ConnectRequest{}).ProtoReflect().Descriptor().Fields().ByName("report").Number()
	head := protowire.AppendTag(make([]byte, 0, 12), field, protowire.BytesType)
	return encodedReport{head: protowire.AppendVarint(head, uint64(len(report)+len(extra))), report: report, defs: extra}, nil
}

func (e encodedReport) size() int { return len(e.head) + len(e.report) + len(e.defs) }
