package loadgen

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // the codec this one falls back on
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// codec encodes what the simulated agents send. A Hello carrying the
// fleet's tree is its node's own fields followed by the tree's encoding,
// made once and shared by every node: a repeated field may come in any
// number of pieces, so the collector decodes the same Hello. Every
// message is encoded into a buffer of its own size, not one from gRPC's
// pool (a power of two: 128 KiB for a 73 KiB Hello): a stream's message
// stays in its buffer until the collector reads it, which, while a fleet
// registers, is minutes for thousands of streams. Both held about 160 KiB
// a node waiting to register (BENCHMARKS.md, "The simulator's memory per
// node").
type codec struct {
	tree []byte // the fleet's definitions as Hello's metrics field
	base encoding.CodecV2
}

var (
	helloField   = (&nbsv1.ConnectRequest{}).ProtoReflect().Descriptor().Fields().ByName("hello").Number()
	metricsField = (&nbsv1.Hello{}).ProtoReflect().Descriptor().Fields().ByName("metrics").Number()
)

func newCodec(defs []*nbsv1.MetricDefinition) (*codec, error) {
	c := &codec{base: encoding.GetCodecV2("proto")}
	if c.base == nil {
		return nil, fmt.Errorf("loadgen: no proto codec registered")
	}
	for _, d := range defs {
		b, err := proto.Marshal(d)
		if err != nil {
			return nil, fmt.Errorf("loadgen: encode definition %s: %w", d.Id, err)
		}
		c.tree = protowire.AppendTag(c.tree, metricsField, protowire.BytesType)
		c.tree = protowire.AppendBytes(c.tree, b)
	}
	return c, nil
}

func (c *codec) Name() string { return "proto" }

func (c *codec) Unmarshal(data mem.BufferSlice, v any) error { return c.base.Unmarshal(data, v) }

// treeHello is a Hello to be sent with the fleet's tree as its
// definitions (Hello.Metrics is left empty: the codec adds the tree).
type treeHello struct{ hello *nbsv1.Hello }

func (c *codec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case treeHello:
		body, err := proto.Marshal(m.hello)
		if err != nil {
			return nil, err
		}
		head := protowire.AppendTag(make([]byte, 0, 10+len(body)), helloField, protowire.BytesType)
		head = protowire.AppendVarint(head, uint64(len(body)+len(c.tree)))
		head = append(head, body...)
		return mem.BufferSlice{mem.SliceBuffer(head), mem.SliceBuffer(c.tree)}, nil
	case proto.Message:
		b, err := proto.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	return c.base.Marshal(v)
}
