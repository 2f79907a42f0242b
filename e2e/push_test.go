package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	collectorapp "github.com/nbs-project/nbs/collector/app"
	"github.com/nbs-project/nbs/internal/pgcluster"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// rawAgent is a bare gRPC client speaking for one node: it sends a Hello
// and keeps the newest Config it reads, or reads nothing at all.
type rawAgent struct {
	name   string
	stream nbsv1.AgentService_ConnectClient

	mu     sync.Mutex
	latest *nbsv1.Config
	err    error
}

// connectRaw opens a stream for name with the given metrics (tcp_reset and
// tcp_reset/sent when none). A reader reads every message; a stuck one
// reads none and has fixed 64 KiB windows, so the collector's sends to it
// block once that much is in flight.
func connectRaw(t *testing.T, addr, name string, labels map[string]string, reads bool, metrics ...*nbsv1.MetricDefinition) *rawAgent {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if !reads {
		opts = append(opts, grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); conn.Close() })
	stream, err := nbsv1.NewAgentServiceClient(conn).Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h := hello(name).GetHello()
	h.Labels = labels
	if len(metrics) > 0 {
		h.Metrics = metrics
	}
	if err := stream.Send(&nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Hello{Hello: h}}); err != nil {
		t.Fatal(err)
	}
	a := &rawAgent{name: name, stream: stream}
	if reads {
		go func() {
			for {
				m, err := stream.Recv()
				a.mu.Lock()
				if err != nil {
					a.err = err
					a.mu.Unlock()
					return
				}
				if c := m.GetConfig(); c != nil {
					a.latest = c
				}
				a.mu.Unlock()
			}
		}()
		// The first Config comes once the collector has registered the
		// node and its metrics: a test's next step (an override, which
		// must name a metric some node has) may rely on that.
		eventually(t, 15*time.Second, func() string {
			if cfg, err := a.config(); cfg == nil {
				return fmt.Sprintf("%s: no Config yet (stream: %v)", name, err)
			}
			return ""
		})
	}
	return a
}

// config is the newest Config read, and the stream's error if it ended.
func (a *rawAgent) config() (*nbsv1.Config, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.latest, a.err
}

// warnOf says what warn the agent's newest Config gives metric, or why not.
func (a *rawAgent) hasWarn(metric string, warn float64) string {
	cfg, err := a.config()
	switch {
	case err != nil:
		return fmt.Sprintf("%s: stream ended: %v", a.name, err)
	case cfg == nil:
		return a.name + ": no Config yet"
	case cfg.GetThresholds()[metric] == nil:
		return fmt.Sprintf("%s: Config has no threshold for %s", a.name, metric)
	case cfg.GetThresholds()[metric].GetWarn() != warn:
		return fmt.Sprintf("%s: %s warn %v, want %v", a.name, metric, cfg.GetThresholds()[metric].GetWarn(), warn)
	}
	return ""
}

// errorMessage is the message of an API error answer, or the body as it is.
func errorMessage(body []byte) string {
	var e struct {
		Error struct{ Message string } `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		return e.Error.Message
	}
	return string(body)
}

func overrideBody(scope string, metric string, warn float64) string {
	return fmt.Sprintf(`{"scope":%s,"metric":%q,"threshold":{"warn":%v,"crit":%v,"comparison":"above","hold_intervals":1}}`, scope, metric, warn, warn*10)
}

const globalScope = `{"kind":"global"}`

// An agent that never reads does not delay threshold changes: every PUT
// returns promptly, and 20 honest agents all get each change, with no
// override of a metric they do not have.
func TestPushStuckAgentDoesNotDelayThresholds(t *testing.T) {
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0")
	var honest []*rawAgent
	for i := range 20 {
		honest = append(honest, connectRaw(t, col.grpcAddr, fmt.Sprintf("honest-%02d", i), nil, true))
	}
	// The stuck node's Configs outgrow its 64 KiB window once it has
	// overrides for its 300 long metric ids.
	metrics := []*nbsv1.MetricDefinition{{Id: "stuck", Title: "Stuck", Unit: "1/s", Kind: nbsv1.MetricKind_METRIC_KIND_RATE}}
	for i := range 300 {
		metrics = append(metrics, &nbsv1.MetricDefinition{Id: fmt.Sprintf("stuck/%s_%03d", strings.Repeat("x", 240), i),
			Title: "Stuck", Unit: "1/s", Kind: nbsv1.MetricKind_METRIC_KIND_RATE})
	}
	connectRaw(t, col.grpcAddr, "stuck-1", nil, false, metrics...)
	eventually(t, 10*time.Second, func() string {
		for _, a := range honest {
			if cfg, err := a.config(); cfg == nil {
				return fmt.Sprintf("%s has no Config yet (%v)", a.name, err)
			}
		}
		var thr struct {
			Thresholds []struct{ Metric string } `json:"thresholds"`
		}
		if code := col.getJSON(t, "/api/v1/nodes/stuck-1/thresholds", &thr); code != http.StatusOK || len(thr.Thresholds) != len(metrics) {
			return fmt.Sprintf("stuck-1: %d with %d metrics, want %d", code, len(thr.Thresholds), len(metrics))
		}
		return ""
	})

	// Before, each push queued one Config per stream and waited once the
	// stuck stream's queue of 256 was full: these 300 PUTs hung there.
	var slowest time.Duration
	client := &http.Client{Timeout: 10 * time.Second}
	put := func(body string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPut, "http://"+col.httpAddr+"/api/v1/thresholds", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+col.token)
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("PUT /thresholds with a stuck agent connected: %v (it must not wait for agents)", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("PUT /thresholds %s: %d %s", body[:min(len(body), 120)], resp.StatusCode, b)
		}
		slowest = max(slowest, time.Since(start))
	}
	for _, m := range metrics[1:] {
		put(overrideBody(`{"kind":"node","node":"stuck-1"}`, m.Id, 5))
	}
	for round := range 3 {
		warn := float64(70 + round)
		put(overrideBody(globalScope, "tcp_reset", warn))
		eventually(t, 10*time.Second, func() string {
			for _, a := range honest {
				if why := a.hasWarn("tcp_reset", warn); why != "" {
					return why
				}
			}
			return ""
		})
	}
	t.Logf("slowest of %d PUTs with a stuck agent: %s", len(metrics)+2, slowest.Round(time.Millisecond))
	if slowest > 2*time.Second {
		t.Errorf("a threshold PUT took %s with a stuck agent connected; it must not wait for agents", slowest)
	}
	for _, a := range honest {
		cfg, _ := a.config()
		for m := range cfg.GetThresholds() {
			if strings.HasPrefix(m, "stuck") {
				t.Fatalf("%s's Config carries the override of %s, a metric it does not have", a.name, m[:min(len(m), 40)])
			}
		}
	}
}

// A threshold PUT whose client hangs up still reaches the agents of another
// collector on the same database: the change is committed, so the NOTIFY
// that tells the other collector must not depend on the request.
func TestPushCancelledThresholdPutReachesOtherCollector(t *testing.T) {
	t.Parallel()
	db := pgcluster.Database(t)
	a := startCollector(t, db, "127.0.0.1:0")
	b := startCollector(t, db, "127.0.0.1:0")
	// Agents on A make A's own pushes take a while: before the fix, the
	// NOTIFY came after them, with the request's context.
	for i := range 20 {
		connectRaw(t, a.grpcAddr, fmt.Sprintf("near-%02d", i), nil, true)
	}
	far := connectRaw(t, b.grpcAddr, "far-1", nil, true)
	waitConfig := func(warn float64) {
		t.Helper()
		eventually(t, 10*time.Second, func() string { return far.hasWarn("tcp_reset", warn) })
	}
	// B's LISTEN is in place once an ordinary change reaches far-1.
	for warn := 1.0; ; warn++ {
		if code, body := a.call(t, http.MethodPut, "/api/v1/thresholds", overrideBody(globalScope, "tcp_reset", warn)); code != http.StatusOK {
			t.Fatalf("PUT: %d %s", code, body)
		}
		time.Sleep(200 * time.Millisecond)
		if far.hasWarn("tcp_reset", warn) == "" {
			break
		}
		if warn > 50 {
			t.Fatal("no threshold change reached the other collector's agent")
		}
	}

	// Each PUT is cancelled at a different moment after it was sent; when
	// it was stored, the other collector's agent must get it.
	stored := 0
	for i := range 20 {
		warn := float64(100 + i)
		ctx, cancel := context.WithCancel(context.Background())
		delay := time.Duration(i) * 2 * time.Millisecond
		trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { time.AfterFunc(delay, cancel) }}
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodPut,
			"http://"+a.httpAddr+"/api/v1/thresholds", strings.NewReader(overrideBody(globalScope, "tcp_reset", warn)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+a.token)
		req.Header.Set("Content-Type", "application/json")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
		cancel()
		// Did it commit? Then far-1 gets it.
		time.Sleep(300 * time.Millisecond)
		var list struct {
			Overrides []struct {
				Scope     struct{ Kind string }  `json:"scope"`
				Metric    string                 `json:"metric"`
				Threshold struct{ Warn float64 } `json:"threshold"`
			} `json:"overrides"`
		}
		a.getJSON(t, "/api/v1/thresholds", &list)
		for _, o := range list.Overrides {
			if o.Scope.Kind == "global" && o.Metric == "tcp_reset" && o.Threshold.Warn == warn {
				stored++
				waitConfig(warn)
			}
		}
	}
	t.Logf("%d of 20 cancelled PUTs were stored; each reached the other collector's agent", stored)
}

// Overrides are only for metrics their scope's nodes have, capped in
// number, and never make a Config larger than agents receive; selectors
// are bounded. Each refusal is a 400 (or 409) that says why.
func TestThresholdOverrideLimits(t *testing.T) {
	t.Parallel()
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0", func(c *collectorapp.Config) { c.NodeConfig.MaxOverrides = 4 })
	lim := connectRaw(t, col.grpcAddr, "lim-1", map[string]string{"customer": "acme"}, true)
	eventually(t, 20*time.Second, func() string {
		if cfg, err := lim.config(); cfg == nil {
			return fmt.Sprintf("lim-1 has no Config yet (%v)", err)
		}
		var nodes struct {
			Nodes []struct{ Name string } `json:"nodes"`
		}
		col.getJSON(t, "/api/v1/nodes", &nodes)
		if len(nodes.Nodes) != 1 {
			return fmt.Sprintf("%d nodes registered, want 1", len(nodes.Nodes))
		}
		return ""
	})

	labels := make([]string, 65)
	for i := range labels {
		labels[i] = fmt.Sprintf("%q:\"v\"", fmt.Sprintf("k%d", i))
	}
	cases := []struct {
		name, body string
		code       int
		want       string
	}{
		{"node lacks the metric", overrideBody(`{"kind":"node","node":"lim-1"}`, "udp_drop", 1), 400, "node lim-1 has no metric udp_drop (an override"},
		{"node lacks the parent", overrideBody(`{"kind":"node","node":"lim-1"}`, "tcp_reset/recv/x", 1), 400, "node lim-1 has no metric tcp_reset/recv/x nor its parent tcp_reset/recv"},
		{"unknown node", overrideBody(`{"kind":"node","node":"nope"}`, "tcp_reset", 1), 400, "node nope has no metric tcp_reset"},
		{"no node has the metric", overrideBody(globalScope, "no_such/metric", 1), 400, "no node has metric no_such/metric nor its parent no_such"},
		{"selector matches no node with it", overrideBody(`{"kind":"selector","selector":{"customer":"initech"}}`, "tcp_reset", 1), 400, "no node matching selector selector:customer=initech has metric tcp_reset"},
		{"65 selector labels", overrideBody(`{"kind":"selector","selector":{`+strings.Join(labels, ",")+`}}`, "tcp_reset", 1), 400, "selector names 65 labels, but a node has at most 64"},
		{"600 KB selector", overrideBody(`{"kind":"selector","selector":{"customer":"`+strings.Repeat("a", 600<<10)+`"}}`, "tcp_reset", 1), 400, "at most 4096"},
		{"global", overrideBody(globalScope, "tcp_reset", 1), 200, ""},
		{"global child", overrideBody(globalScope, "tcp_reset/sent", 1), 200, ""},
		{"node", overrideBody(`{"kind":"node","node":"lim-1"}`, "tcp_reset", 2), 200, ""},
		{"a child not yet reported", overrideBody(`{"kind":"selector","selector":{"customer":"acme"}}`, "tcp_reset/sent/no_socket", 2), 200, ""},
		{"past the cap", overrideBody(`{"kind":"selector","selector":{"customer":"acme"}}`, "tcp_reset", 3), 400, "there are already 4, the most allowed (limit --thresholds.max-overrides)"},
		{"an update past the cap", overrideBody(globalScope, "tcp_reset", 7), 200, ""},
	}
	for _, c := range cases {
		code, body := col.call(t, http.MethodPut, "/api/v1/thresholds", c.body)
		if code != c.code || !strings.Contains(errorMessage(body), c.want) {
			t.Errorf("%s: %d %.300s; want %d saying %q", c.name, code, body, c.code, c.want)
		}
	}
	eventually(t, 10*time.Second, func() string { return lim.hasWarn("tcp_reset", 2) })

	// The size guard. A node whose 11,500 metric ids fill 2.9 MB: with an
	// override for each, its Config would pass what agents are sent.
	db := pgcluster.Database(t)
	col2 := startCollector(t, db, "127.0.0.1:0", func(c *collectorapp.Config) { c.NodeConfig.MaxOverrides = 20000 })
	big := []*nbsv1.MetricDefinition{{Id: "big", Title: "Big", Unit: "1/s", Kind: nbsv1.MetricKind_METRIC_KIND_RATE}}
	for i := range 11500 {
		big = append(big, &nbsv1.MetricDefinition{Id: fmt.Sprintf("big/%s_%05d", strings.Repeat("y", 244), i), Title: "B", Unit: "1/s", Kind: nbsv1.MetricKind_METRIC_KIND_RATE})
	}
	bigAgent := connectRaw(t, col2.grpcAddr, "big-2", nil, true, big...)
	small := connectRaw(t, col2.grpcAddr, "small-2", nil, true)
	eventually(t, 30*time.Second, func() string {
		for _, a := range []*rawAgent{bigAgent, small} {
			if cfg, err := a.config(); cfg == nil {
				return fmt.Sprintf("%s has no Config yet (%v)", a.name, err)
			}
		}
		return ""
	})
	put := func(body string) (int, string) {
		code, b := col2.call(t, http.MethodPut, "/api/v1/thresholds", body)
		return code, errorMessage(b)
	}
	if code, body := put(overrideBody(`{"kind":"node","node":"big-2"}`, "big", 1)); code != http.StatusOK {
		t.Fatalf("the first override on big-2: %d %s", code, body)
	}
	// The rest straight into the table: 11,500 PUTs would take minutes,
	// and the guard reads what is stored.
	pool, err := pgxpool.New(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(t.Context(), `
		INSERT INTO threshold_overrides (scope_kind, selector, node, metric, threshold, disabled)
		SELECT 'global', '{}', '', 'big/' || repeat('y', 244) || '_' || lpad(i::text, 5, '0'),
		       '{"warn":1,"crit":10,"comparison":"above","hold_intervals":1}', false
		FROM generate_series(0, 11498) i`); err != nil {
		t.Fatal(err)
	}
	last := fmt.Sprintf("big/%s_%05d", strings.Repeat("y", 244), 11499)
	if code, body := put(overrideBody(globalScope, last, 1)); code != http.StatusConflict ||
		!strings.Contains(body, "node big-2's Config could be") || !strings.Contains(body, "more than the 3145728 bytes agents are sent") {
		t.Errorf("the override that takes big-2's Config past the limit: %d %.400s; want 409 naming the node and the limit", code, body)
	}
	// A change that leaves big-2's Config as it is, is allowed; and the
	// other nodes get it.
	if code, body := put(overrideBody(globalScope, "tcp_reset", 9)); code != http.StatusOK {
		t.Errorf("an override big-2 does not have: %d %.300s", code, body)
	}
	eventually(t, 10*time.Second, func() string { return small.hasWarn("tcp_reset", 9) })
	// big-2's Config, 3.3 MB, is still one agents receive.
	eventually(t, 20*time.Second, func() string {
		cfg, err := bigAgent.config()
		if err != nil {
			return fmt.Sprintf("big-2's stream: %v", err)
		}
		if n := len(cfg.GetThresholds()); n != 11500 {
			return fmt.Sprintf("big-2's Config has %d thresholds, want its 11,500 overrides", n)
		}
		return ""
	})
}

// What a client gives the HTTP side is checked before it is used: times far
// outside the calendar, huge expand durations and selectors are clear 400s
// (they were a 200 with an empty body, a 500, or the year 1734).
func TestPushHTTPParametersAreClear400s(t *testing.T) {
	t.Parallel()
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0")
	a := connectRaw(t, col.grpcAddr, "param-1", nil, true)
	eventually(t, 10*time.Second, func() string {
		if cfg, err := a.config(); cfg == nil {
			return fmt.Sprintf("no Config yet (%v)", err)
		}
		return ""
	})
	huge := strings.Repeat("a", 600<<10)
	cases := []struct {
		method, path, body string
		code               int
		want               string
	}{
		{"GET", "/api/v1/nodes/param-1/series?metric=tcp_reset&from=9e15", "", 400, "from: \"9e15\" is neither RFC 3339"},
		{"GET", "/api/v1/nodes/param-1/series?metric=tcp_reset&from=-9e15", "", 400, "from: \"-9e15\" is neither RFC 3339"},
		{"GET", "/api/v1/nodes/param-1/series?metric=tcp_reset&from=9000000000000000", "", 400, "outside 1970-01-01 to 9999-12-31"},
		{"GET", "/api/v1/nodes/param-1/series?metric=tcp_reset&from=-9000000000000000", "", 400, "outside 1970-01-01 to 9999-12-31"},
		{"GET", "/api/v1/nodes/param-1/series?metric=tcp_reset&to=9e15", "", 400, "to: \"9e15\" is neither RFC 3339"},
		{"GET", "/api/v1/nodes/param-1/series?metric=tcp_reset&step=9999999h", "", 400, "step \"9999999h\" must be a duration"},
		{"GET", "/api/v1/nodes/param-1/events?metric=tcp_reset&from=9e15", "", 400, "from: \"9e15\" is neither RFC 3339"},
		{"GET", "/api/v1/nodes/param-1/events?metric=tcp_reset&from=" + huge[:100], "", 400, "longer than 64 bytes"},
		{"POST", "/api/v1/nodes/param-1/expand", `{"seconds":9223372036854775807}`, 400, "seconds 9223372036854775807 must be from 1 to 3600"},
		{"POST", "/api/v1/nodes/param-1/expand", `{"seconds":-9223372036854775808}`, 400, "must be from 1 to 3600"},
		{"POST", "/api/v1/nodes/param-1/expand", `{"seconds":1e300}`, 400, "request body"},
		{"POST", "/api/v1/nodes/param-1/expand", `{"seconds":3600}`, 202, "\"until\""},
		{"PUT", "/api/v1/thresholds", overrideBody(`{"kind":"selector","selector":{"customer":"`+huge+`"}}`, "tcp_reset", 1), 400, "selector label customer value: 614400 bytes, at most 4096"},
		{"PUT", "/api/v1/thresholds", overrideBody(`{"kind":"selector","selector":{"`+huge[:100]+`":"x"}}`, "tcp_reset", 1), 400, "is not a valid label key"},
		{"POST", "/api/v1/alert-rules", `{"name":"BigSelector","state":"crit","for_intervals":1,"severity":"critical","selector":{"customer":"` + huge + `"}}`, 400, "selector label customer is longer than 256 bytes"},
		{"PUT", "/api/v1/thresholds", `{"x":"` + strings.Repeat("a", 2<<20) + `"}`, 413, "request body is larger than 1048576 bytes"},
	}
	for _, c := range cases {
		code, body := col.call(t, c.method, c.path, c.body)
		if code != c.code || !strings.Contains(errorMessage(body), c.want) {
			t.Errorf("%s %.100s: %d %.300s; want %d saying %q", c.method, c.path, code, body, c.code, c.want)
		}
	}
	// An expand's end is within the hour, not centuries away.
	code, body := col.call(t, "POST", "/api/v1/nodes/param-1/expand", `{"seconds":3600}`)
	var ans struct{ Until time.Time }
	if err := json.Unmarshal(body, &ans); code != http.StatusAccepted || err != nil || time.Until(ans.Until) > time.Hour+time.Minute || time.Until(ans.Until) < 59*time.Minute {
		t.Errorf("expand 3600s: %d %s (%v); want it to end in an hour", code, body, err)
	}
}

// Slow and idle HTTP clients are cut off by the timeouts, and while they
// hold their connections other clients are served.
func TestPushHTTPTimeouts(t *testing.T) {
	const (
		readHeader, read, idle = time.Second, 2 * time.Second, 2 * time.Second
		slack                  = 3 * time.Second
	)
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0", func(c *collectorapp.Config) {
		c.HTTP.ReadHeaderTimeout, c.HTTP.ReadTimeout, c.HTTP.IdleTimeout, c.HTTP.WriteTimeout = readHeader, read, idle, 5*time.Second
		// Every client here is 127.0.0.1: the timeouts, not the cap on
		// one address (TestNoAddressLocksOthersOut's), must free them.
		c.HTTP.MaxConnsPerAddress = c.HTTP.MaxConns
		c.Reads.StatementTimeout = 5 * time.Second // at most the write timeout
	})
	type held struct {
		conn   net.Conn
		r      *bufio.Reader
		opened time.Time
		limit  time.Duration
	}
	var conns []held
	for range 300 {
		// A request whose body never comes.
		c, err := net.Dial("tcp", col.httpAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "PUT /api/v1/thresholds HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{", col.httpAddr, col.token)
		conns = append(conns, held{c, bufio.NewReader(c), time.Now(), read})
	}
	for range 50 {
		// A kept-alive connection that asks nothing more.
		c, err := net.Dial("tcp", col.httpAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", col.httpAddr)
		r := bufio.NewReader(c)
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		conns = append(conns, held{c, r, time.Now(), idle})
	}
	// Others are served meanwhile.
	start := time.Now()
	if code, body := col.call(t, http.MethodGet, "/api/v1/nodes", ""); code != http.StatusOK {
		t.Errorf("GET /nodes while 350 connections are held: %d %s", code, body)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("GET /nodes took %s while 350 connections were held", took)
	}

	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []string
	for i, h := range conns {
		wg.Go(func() {
			h.conn.SetReadDeadline(h.opened.Add(h.limit + slack))
			_, err := io.Copy(io.Discard, h.r)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				mu.Lock()
				open = append(open, fmt.Sprintf("#%d (timeout %s)", i, h.limit))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(open) > 0 {
		t.Errorf("%d of %d connections still open %s past their timeout: %v", len(open), len(conns), slack, open[:min(len(open), 10)])
	}
}

// Past --http.max-connections, new connections wait to be accepted; the
// timeouts free the slots, and the waiting client is served then.
func TestPushHTTPConnectionLimit(t *testing.T) {
	const readHeader = time.Second
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0", func(c *collectorapp.Config) {
		c.HTTP.ReadHeaderTimeout, c.HTTP.MaxConns, c.HTTP.MaxConnsPerAddress = readHeader, 16, 16
	})
	// Sixteen connections that send nothing fill every slot. They come
	// from 127.0.0.2, so the client below (127.0.0.1) meets the server's
	// limit, not its own address's.
	holder := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	for range 16 {
		c, err := holder.Dial("tcp", col.httpAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	start := time.Now()
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + col.httpAddr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	took := time.Since(start)
	t.Logf("the 17th connection was served after %s", took.Round(time.Millisecond))
	if resp.StatusCode != http.StatusOK || took < readHeader/2 || took > readHeader+3*time.Second {
		t.Errorf("17th connection: %d after %s; want 200 once the header timeout (%s) freed a slot", resp.StatusCode, took, readHeader)
	}
}
