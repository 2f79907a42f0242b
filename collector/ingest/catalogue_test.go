package ingest

import (
	"context"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nbs-project/nbs/collector/store"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// Nodes whose Hellos bring the same definitions share one catalogue and
// one path → metric map; it is forgotten once no stream uses it.
func TestHelloCataloguesAreShared(t *testing.T) {
	srv, _, client := startServer(t)
	var streams []*agentStream
	for _, n := range []string{"n1", "n2"} {
		s, m, err := open(t, client, n, cred("cred-"+n), 1, nil)
		if err != nil || m.GetConfig() == nil {
			t.Fatalf("%s: %v, %v; want its Config", n, m, err)
		}
		streams = append(streams, s)
	}
	if n := srv.catalogues.len(); n != 1 {
		t.Errorf("%d catalogues for two nodes with the same definitions, want 1", n)
	}
	srv.mu.Lock()
	a, b := srv.streams["n1"].metrics.base, srv.streams["n2"].metrics.base
	srv.mu.Unlock()
	if len(a) != 1 || reflect.ValueOf(a).UnsafePointer() != reflect.ValueOf(b).UnsafePointer() {
		t.Errorf("the two streams' metrics are %v and %v, want one shared map of one metric", a, b)
	}
	for _, s := range streams {
		s.cancel()
	}
	for deadline := time.Now().Add(10 * time.Second); srv.catalogues.len() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d catalogues left after every stream ended", srv.catalogues.len())
		}
	}
}

// Hellos are read within a byte budget: with room for one, a second
// stream's Hello waits until the first stream's Hello is registered, and a
// Hello larger than its reservation that finds no room is refused with
// Unavailable (the agent retries).
func TestHelloBudget(t *testing.T) {
	srv, _, client := startServerWith(t, ServerOptions{Auth: credentialAuth{}, HelloBytes: HelloReserve})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	silent, err := client.Connect(ctx) // reserves the whole budget, sends nothing yet
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); srv.openStreams() != 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the silent stream never opened")
		}
	}
	type answer struct {
		m   *nbsv1.ConnectResponse
		err error
	}
	second := make(chan answer, 1)
	h2 := &nbsv1.Hello{NodeName: "n2", InstanceId: 2, IntervalMs: 1000, Auth: cred("cred-n2"),
		Metrics: []*nbsv1.MetricDefinition{{Id: "tcp_reset", Title: "resets", Unit: "1/s", Kind: nbsv1.MetricKind_METRIC_KIND_RATE}}}
	go func() {
		s, err := client.Connect(ctx)
		if err == nil {
			err = s.Send(&nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Hello{Hello: h2}})
		}
		if err != nil {
			second <- answer{nil, err}
			return
		}
		m, err := s.Recv()
		second <- answer{m, err}
	}()
	select {
	case a := <-second:
		t.Fatalf("a second Hello was answered (%v, %v) while the budget was taken", a.m, a.err)
	case <-time.After(300 * time.Millisecond):
	}
	hello := &nbsv1.Hello{NodeName: "n1", InstanceId: 1, IntervalMs: 1000, Auth: cred("cred-n1"),
		Metrics: []*nbsv1.MetricDefinition{{Id: "tcp_reset", Title: "resets", Unit: "1/s", Kind: nbsv1.MetricKind_METRIC_KIND_RATE}}}
	if err := silent.Send(&nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Hello{Hello: hello}}); err != nil {
		t.Fatal(err)
	}
	if m, err := silent.Recv(); err != nil || m.GetConfig() == nil {
		t.Fatalf("first Hello: %v, %v; want its Config", m, err)
	}
	if a := <-second; a.err != nil || a.m.GetConfig() == nil {
		t.Fatalf("second Hello once the first was registered: %v, %v; want its Config", a.m, a.err)
	}

	// Budget for one reservation, and a Hello larger than it.
	_, _, client = startServerWith(t, ServerOptions{Auth: credentialAuth{}, HelloBytes: HelloReserve})
	big, err := client.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	desc := strings.Repeat("d", 4000)
	hello = &nbsv1.Hello{NodeName: "n3", InstanceId: 3, IntervalMs: 1000, Auth: cred("cred-n3")}
	for i := range 100 {
		id := "tcp_reset"
		if i > 0 {
			id = "tcp_reset/r" + strings.Repeat("x", i)
		}
		hello.Metrics = append(hello.Metrics, &nbsv1.MetricDefinition{Id: id, Title: "t", Description: desc, Kind: nbsv1.MetricKind_METRIC_KIND_RATE})
	}
	if err := big.Send(&nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Hello{Hello: hello}}); err != nil {
		t.Fatal(err)
	}
	if m, err := big.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("a %d-byte Hello with no room beyond its reservation: %v, %v; want Unavailable", len(desc)*100, m, err)
	}
}

// A catalogue resolved once keeps its map while registrations return the
// same ids, and takes the new ids when a retention pass deleted its paths
// and a later registration made them again.
func TestCatalogueTakesNewIDs(t *testing.T) {
	var cs catalogues
	c := cs.intern([]store.MetricDef{{Path: "a", Kind: store.KindRate}, {Path: "b", Kind: store.KindGauge}})
	first := c.resolve(map[string]int32{"a": 1, "b": 2})
	again := c.resolve(map[string]int32{"a": 1, "b": 2})
	if reflect.ValueOf(first).UnsafePointer() != reflect.ValueOf(again).UnsafePointer() {
		t.Error("the same ids made a new map")
	}
	renewed := c.resolve(map[string]int32{"a": 1, "b": 7})
	if got := renewed["b"]; got.id != 7 || got.kind != store.KindGauge {
		t.Errorf("after b was made again with id 7: %+v", got)
	}
	if got := c.resolved()["b"].id; got != 7 {
		t.Errorf("the catalogue resolves b to %d, want 7", got)
	}
	if first["b"].id != 2 {
		t.Error("a map handed out earlier was changed in place")
	}
}

// A Hello repeating a catalogue's definitions shares it whether it is
// found by comparison (same order) or by hash (another order); one that
// differs anywhere, -0 for 0 included, gets its own; and so do Hellos
// crafted to share a shape beyond those compared.
func TestInternFindsRepeatedCatalogues(t *testing.T) {
	base := func() []store.MetricDef {
		return []store.MetricDef{
			{Path: "a", Title: "A", Unit: "1/s", Kind: store.KindRate},
			{Path: "b", Title: "B", Unit: "s", Kind: store.KindHistogram, Scale: 1e9, Quantile: 0.99,
				DefaultThreshold: &store.Threshold{Warn: 0.1, Crit: 1, Comparison: "above", HoldIntervals: 3}},
			{Path: "c", Title: "C", Unit: "1", Kind: store.KindGauge},
		}
	}
	changed := func(f func(d []store.MetricDef) []store.MetricDef) []store.MetricDef { return f(base()) }
	for _, tc := range []struct {
		name   string
		defs   []store.MetricDef
		shared bool
	}{
		{"same, same order", base(), true},
		{"same, another order", changed(func(d []store.MetricDef) []store.MetricDef { d[0], d[2] = d[2], d[0]; return d }), true},
		{"a title", changed(func(d []store.MetricDef) []store.MetricDef { d[2].Title = "C'"; return d }), false},
		{"a threshold", changed(func(d []store.MetricDef) []store.MetricDef { d[1].DefaultThreshold.Crit = 2; return d }), false},
		{"no threshold", changed(func(d []store.MetricDef) []store.MetricDef { d[1].DefaultThreshold = nil; return d }), false},
		{"-0 for 0", changed(func(d []store.MetricDef) []store.MetricDef { d[0].Scale = math.Copysign(0, -1); return d }), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cs catalogues
			first := cs.intern(base())
			c := cs.intern(tc.defs)
			if got := c == first; got != tc.shared {
				t.Errorf("shared %v, want %v", got, tc.shared)
			}
			cs.release(c)
			cs.release(first)
			if len(cs.byHash) != 0 || len(cs.byShape) != 0 {
				t.Errorf("left after every release: %d by hash, %d by shape", len(cs.byHash), len(cs.byShape))
			}
		})
	}
	t.Run("many of one shape", func(t *testing.T) {
		var cs catalogues
		var held []*catalogue
		for i := range 2 * maxSameShape {
			held = append(held, cs.intern(changed(func(d []store.MetricDef) []store.MetricDef { d[1].Title = strconv.Itoa(i); return d })))
		}
		for i := range 2 * maxSameShape {
			again := cs.intern(changed(func(d []store.MetricDef) []store.MetricDef { d[1].Title = strconv.Itoa(i); return d }))
			if again != held[i] {
				t.Errorf("catalogue %d not shared", i)
			}
			held = append(held, again)
		}
		for _, c := range held {
			cs.release(c)
		}
		if len(cs.byHash) != 0 || len(cs.byShape) != 0 {
			t.Errorf("left after every release: %d by hash, %d by shape", len(cs.byHash), len(cs.byShape))
		}
	})
}
