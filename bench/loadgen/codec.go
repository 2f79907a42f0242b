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

// Unmarshal decodes an Ack itself and leaves a Config undecoded: a
// node's goroutine decodes its answers in Recv, and the protobuf
// runtime's decoding (a Config's map of thresholds most) took that
// goroutine's stack past 4 KiB, where it stayed while it waited: 8 KiB a
// node (BENCHMARKS.md, "The simulator's memory per node"). The simulator
// acts on no Config. Anything else, or an Ack with fields this does not
// know, goes to the protobuf runtime.
func (c *codec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*nbsv1.ConnectResponse); ok && len(data) == 1 && decodeResponse(data[0].ReadOnlyData(), r) {
		return nil
	}
	return c.base.Unmarshal(data, v)
}

var (
	ackField    = (&nbsv1.ConnectResponse{}).ProtoReflect().Descriptor().Fields().ByName("ack").Number()
	configField = (&nbsv1.ConnectResponse{}).ProtoReflect().Descriptor().Fields().ByName("config").Number()
	ackSeqField = (&nbsv1.Ack{}).ProtoReflect().Descriptor().Fields().ByName("sequence").Number()
	ackDupField = (&nbsv1.Ack{}).ProtoReflect().Descriptor().Fields().ByName("duplicate").Number()
)

// decodeResponse decodes b into r when it is one Ack or one Config (left
// undecoded: r.Msg stays nil), and says whether it did.
func decodeResponse(b []byte, r *nbsv1.ConnectResponse) bool {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || typ != protowire.BytesType {
		return false
	}
	body, m := protowire.ConsumeBytes(b[n:])
	if m < 0 || n+m != len(b) {
		return false
	}
	switch num {
	case configField:
		r.Msg = nil
		return true
	case ackField:
	default:
		return false
	}
	ack := &nbsv1.Ack{}
	for len(body) > 0 {
		num, typ, n := protowire.ConsumeTag(body)
		if n < 0 || typ != protowire.VarintType {
			return false
		}
		v, m := protowire.ConsumeVarint(body[n:])
		if m < 0 {
			return false
		}
		switch num {
		case ackSeqField:
			ack.Sequence = v
		case ackDupField:
			ack.Duplicate = protowire.DecodeBool(v)
		default:
			return false
		}
		body = body[n+m:]
	}
	r.Msg = &nbsv1.ConnectResponse_Ack{Ack: ack}
	return true
}

// treeHello is a Hello to be sent with the fleet's tree as its
// definitions (Hello.Metrics is left empty: the codec adds the tree).
type treeHello struct{ hello *nbsv1.Hello }

func (c *codec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case treeHello:
		head, err := c.helloHead(0, m.hello)
		if err != nil {
			return nil, err
		}
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

// helloHead is the encoding of a ConnectRequest with Hello h up to the
// fleet's tree, which follows it (c.tree), after prefix bytes left for
// the caller (gRPC's message prefix).
func (c *codec) helloHead(prefix int, h *nbsv1.Hello) ([]byte, error) {
	body, err := proto.Marshal(h)
	if err != nil {
		return nil, err
	}
	head := protowire.AppendTag(make([]byte, prefix, prefix+10+len(body)), helloField, protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(len(body)+len(c.tree)))
	return append(head, body...), nil
}
