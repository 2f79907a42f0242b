package loadgen

import (
	"testing"

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
