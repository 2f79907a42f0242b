package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/alert"
	"github.com/nbs-project/nbs/internal/pgcluster"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// The map of the render benchmark: 100 nodes of 50 pods each (5,000
// owners), each pod a client of 10 pods on the next 10 nodes (50,000 edges,
// every one resolved to its server owner); every 97th edge has 400
// NO_SOCKET resets (CRIT), every 13th 2 drops (WARN).
const (
	benchNodes      = 100
	benchPods       = 50
	benchPeersOfPod = 10
)

func benchPod(node, pod int) (*nbsv1.FlowOwner, string) {
	name := fmt.Sprintf("bench/app-%d-%d", node, pod)
	return &nbsv1.FlowOwner{Id: fmt.Sprintf("pod:bench.app-%d-%d", node, pod), Kind: "pod", Name: name, Workload: fmt.Sprintf("bench/app-%d", node)},
		fmt.Sprintf("10.%d.%d.%d", 100+node/200, node%200, pod+1)
}

func benchFlowNodes() []flowNode {
	var nodes []flowNode
	i := 0
	for n := range benchNodes {
		fn := flowNode{name: fmt.Sprintf("bench-%d", n), labels: map[string]string{"customer": "bench"}}
		for p := range benchPods {
			o, addr := benchPod(n, p)
			fn.holders = append(fn.holders, &nbsv1.AddressHolder{Address: addr, Owner: o})
			for k := range benchPeersOfPod {
				_, peer := benchPod((n+1+k)%benchNodes, (p*7+k)%benchPods)
				e := &nbsv1.FlowEdge{Local: o, Role: nbsv1.FlowRole_FLOW_ROLE_CLIENT, LocalAddress: addr, PeerAddress: peer, PeerPort: 8080,
					Opened: uint64(1 + i%50), Closed: uint64(1 + i%50), BytesSent: uint64(1000 * (1 + i%7)), BytesReceived: uint64(5000 * (1 + i%5))}
				switch {
				case i%97 == 0:
					e.ResetsReceived = map[string]uint64{"no_socket": 400}
				case i%13 == 0:
					e.Drops = map[string]uint64{"netfilter": 2}
				}
				fn.flows = append(fn.flows, e)
				i++
			}
		}
		nodes = append(nodes, fn)
	}
	return nodes
}

// BenchmarkFlowMapPage: the map page in Chromium on 5,000 owners and 50,000
// edges that 100 simulated agents sent through the collector's gRPC ingest
// (a real collector on a real PostgreSQL): the time from navigation to the
// graph painted, the API's reads included, beside its anchor (a filter that
// leaves a few edges) in the same run (flowmap_bench.mjs prints both).
//
//	cd web && npm run build && cd .. && go test ./web/e2e -run '^$' -bench FlowMapPage -benchtime 1x -v
func BenchmarkFlowMapPage(b *testing.B) {
	webDir, err := filepath.Abs("..")
	if err != nil {
		b.Fatal(err)
	}
	nodeBin, err := exec.LookPath("node")
	if err != nil {
		b.Skipf("node (Node.js) is not installed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(webDir, "dist", "index.html")); err != nil {
		b.Skipf("the UI is not built: run `cd web && npm run build` first (%v)", err)
	}
	dbURL := pgcluster.Database(b)
	httpAddr, grpcAddr, adminToken := startCollector(b, dbURL, alert.DefaultConfig())
	nbs := site{base: "http://" + httpAddr, token: adminToken}
	if code, body := nbs.do(b, http.MethodGet, "/api/v1/flows", ""); code == http.StatusNotFound && strings.Contains(body, "route") {
		b.Skipf("this collector has no GET /api/v1/flows: %.200s", body)
	}
	start := time.Now()
	for i, n := range benchFlowNodes() {
		sendFlows(b, grpcAddr, n, uint64(5000+i))
	}
	b.Logf("sent %d edges from %d nodes in %s", benchNodes*benchPods*benchPeersOfPod, benchNodes, time.Since(start).Round(time.Millisecond))
	eventually(b, 2*time.Minute, func() string {
		code, body := nbs.do(b, http.MethodGet, "/api/v1/flows?limit=1", "")
		var m struct {
			Total int `json:"total_edges"`
		}
		if err := json.Unmarshal([]byte(body), &m); code != http.StatusOK || err != nil {
			return fmt.Sprintf("GET /api/v1/flows: HTTP %d %v %.200s", code, err, body)
		}
		if want := benchNodes * benchPods * benchPeersOfPod; m.Total != want {
			return fmt.Sprintf("%d edges, want %d", m.Total, want)
		}
		return ""
	})
	for range b.N {
		cmd := exec.Command(nodeBin, filepath.Join(webDir, "e2e", "flowmap_bench.mjs"))
		cmd.Dir = webDir
		cmd.Env = append(os.Environ(), "NBS_URL="+nbs.base, "NBS_TOKEN="+adminToken, "NBS_BENCH_ANCHOR_QUERY=owner=bench/app-7-3", "NBS_CHROMIUM="+chromium)
		out := &lineLogger{t: b}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Run(); err != nil {
			b.Fatalf("the flow map benchmark in Chromium: %v", err)
		}
	}
}
