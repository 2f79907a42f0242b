package loadgen

import (
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// TestCodecSharesTheTree: a Hello sent with the shared tree decodes, as the
// collector decodes it, to the Hello with the tree as its definitions; other
// messages are encoded as proto encodes them.
func TestCodecSharesTheTree(t *testing.T) {
	tree := NewTree()
	c, err := newCodec(tree.Defs)
	if err != nil {
		t.Fatal(err)
	}
	hello := func() *nbsv1.Hello {
		return &nbsv1.Hello{NodeName: "sim-7", InstanceId: 42, AgentVersion: "loadgen", IntervalMs: 10000,
			Labels: map[string]string{"customer": "c7", "sim": "true"}}
	}
	report := &nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Report{Report: &nbsv1.Report{Sequence: 3,
		Samples: []*nbsv1.Sample{{MetricId: tree.Roots[0].Id, Value: 1.5}}}}}
	full := hello()
	full.Metrics = tree.Defs
	for _, tc := range []struct {
		name      string
		send      any
		want      proto.Message
		sharedLen int // bytes shared with every node's Hello
	}{
		{"hello with the tree", treeHello{hello()}, &nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Hello{Hello: full}}, len(c.tree)},
		{"report", report, report, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := c.Marshal(tc.send)
			if err != nil {
				t.Fatal(err)
			}
			got := &nbsv1.ConnectRequest{}
			if err := c.Unmarshal(data, got); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(got, tc.want) {
				t.Fatalf("decoded %v, want %v", got, tc.want)
			}
			if tc.sharedLen > 0 {
				last := data[len(data)-1].ReadOnlyData()
				if len(last) != tc.sharedLen || &last[0] != &c.tree[0] {
					t.Errorf("the Hello's definitions are not the shared encoding of the tree")
				}
				if own := data.Len() - tc.sharedLen; own > 512 {
					t.Errorf("a node's own part of its Hello is %d bytes, want under 512", own)
				}
			}
		})
	}
}

// TestCodecDecodesAnswers: an Ack decodes as the protobuf runtime decodes
// it, a Config is left undecoded (the simulator acts on none), and
// anything else, an Ack with a field this codec does not know included,
// is the runtime's.
func TestCodecDecodesAnswers(t *testing.T) {
	c, err := newCodec(nil)
	if err != nil {
		t.Fatal(err)
	}
	ack := func(a *nbsv1.Ack) *nbsv1.ConnectResponse {
		return &nbsv1.ConnectResponse{Msg: &nbsv1.ConnectResponse_Ack{Ack: a}}
	}
	unknown := protowire.AppendVarint(protowire.AppendTag(nil, 9, protowire.VarintType), 5)
	for _, tc := range []struct {
		name string
		in   []byte
		want *nbsv1.ConnectResponse
	}{
		{"ack", marshal(t, ack(&nbsv1.Ack{Sequence: 1 << 40})), ack(&nbsv1.Ack{Sequence: 1 << 40})},
		{"duplicate", marshal(t, ack(&nbsv1.Ack{Sequence: 7, Duplicate: true})), ack(&nbsv1.Ack{Sequence: 7, Duplicate: true})},
		{"empty ack", marshal(t, ack(&nbsv1.Ack{})), ack(&nbsv1.Ack{})},
		{"ack with an unknown field", protowire.AppendBytes(protowire.AppendTag(nil, ackField, protowire.BytesType),
			append(marshal(t, &nbsv1.Ack{Sequence: 3}), unknown...)), nil},
		{"reject", marshal(t, &nbsv1.ConnectResponse{Msg: &nbsv1.ConnectResponse_Reject{Reject: &nbsv1.Reject{Sequence: 4, Reason: "no"}}}), nil},
		{"enrolled", marshal(t, &nbsv1.ConnectResponse{Msg: &nbsv1.ConnectResponse_Enrolled{Enrolled: &nbsv1.Enrolled{NodeCredential: "k"}}}), nil},
		{"config", marshal(t, &nbsv1.ConnectResponse{Msg: &nbsv1.ConnectResponse_Config{Config: &nbsv1.Config{Version: 3,
			PingTargets: []string{"10.0.0.1"}}}}), &nbsv1.ConnectResponse{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := &nbsv1.ConnectResponse{}
			if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(tc.in)}, got); err != nil {
				t.Fatal(err)
			}
			want := tc.want
			if want == nil { // the runtime's decoding
				want = &nbsv1.ConnectResponse{}
				if err := proto.Unmarshal(tc.in, want); err != nil {
					t.Fatal(err)
				}
			}
			if !proto.Equal(got, want) {
				t.Fatalf("decoded %v, want %v", got, want)
			}
		})
	}
	// Not protobuf: an error, not a guess.
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{0x0a, 0x05, 0x08})}, &nbsv1.ConnectResponse{}); err == nil {
		t.Fatal("a truncated answer decoded without an error")
	}
}

func marshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
