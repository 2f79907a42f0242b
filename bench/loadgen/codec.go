package loadgen

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// codec encodes a node's Hello as its own fields followed by the fleet's
// tree, encoded once and shared by every node: a repeated field may come
// in any number of pieces, so the collector decodes the same Hello. A
// node waiting to register holds its own few hundred bytes, not the
// 73 KB tree, and the tree is written from the shared encoding
// (BENCHMARKS.md, "The simulator's memory per node").
type codec struct {
	tree []byte // the fleet's definitions as Hello's metrics field
}

var (
	helloField   = (&nbsv1.ConnectRequest{}).ProtoReflect().Descriptor().Fields().ByName("hello").Number()
	metricsField = (&nbsv1.Hello{}).ProtoReflect().Descriptor().Fields().ByName("metrics").Number()
)

func newCodec(defs []*nbsv1.MetricDefinition) (*codec, error) {
	c := &codec{}
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

// decodeAnswer decodes one of the collector's answers into r: an Ack by
// hand and a Config not at all (r.Msg stays nil: the simulator acts on
// none), anything else, an Ack with fields this does not know included,
// by the protobuf runtime. The runtime's decoding of a Config (its map of
// thresholds most) was most of what a node's goroutine grew its stack
// for when it decoded its answers (BENCHMARKS.md, "The simulator's memory
// per node"); now the connection's reader decodes them, and still
// without that garbage.
func decodeAnswer(b []byte, r *nbsv1.ConnectResponse) error {
	if decodeResponse(b, r) {
		return nil
	}
	return proto.Unmarshal(b, r)
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
