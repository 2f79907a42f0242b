package loadgen

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// TestCodecSharesTheTree: a Hello sent with the shared tree decodes, as the
// collector decodes it, to the Hello with the tree as its definitions, and
// a node's own part of it is small.
func TestCodecSharesTheTree(t *testing.T) {
	tree := NewTree()
	c, err := newCodec(tree.Defs)
	if err != nil {
		t.Fatal(err)
	}
	hello := &nbsv1.Hello{NodeName: "sim-7", InstanceId: 42, AgentVersion: "loadgen", IntervalMs: 10000,
		Labels: map[string]string{"customer": "c7", "sim": "true"}}
	head, err := c.helloHead(5, hello)
	if err != nil {
		t.Fatal(err)
	}
	if string(head[:5]) != "\x00\x00\x00\x00\x00" {
		t.Fatalf("the prefix left for gRPC's is %x", head[:5])
	}
	got := &nbsv1.ConnectRequest{}
	if err := proto.Unmarshal(append(head[5:], c.tree...), got); err != nil {
		t.Fatal(err)
	}
	full := proto.Clone(hello).(*nbsv1.Hello)
	full.Metrics = tree.Defs
	if want := (&nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Hello{Hello: full}}); !proto.Equal(got, want) {
		t.Fatalf("decoded %v, want %v", got, want)
	}
	if own := len(head); own > 512 {
		t.Errorf("a node's own part of its Hello is %d bytes, want under 512", own)
	}
}

// TestCodecDecodesAnswers: an Ack decodes as the protobuf runtime decodes
// it, a Config is left undecoded (the simulator acts on none), and
// anything else, an Ack with a field this codec does not know included,
// is the runtime's.
func TestCodecDecodesAnswers(t *testing.T) {
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
			if err := decodeAnswer(tc.in, got); err != nil {
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
	if err := decodeAnswer([]byte{0x0a, 0x05, 0x08}, &nbsv1.ConnectResponse{}); err == nil {
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
