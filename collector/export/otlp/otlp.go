// Package otlp pushes the export (collector/export) to an OTLP/HTTP
// receiver — an OpenTelemetry Collector, Prometheus 3's
// /api/v1/otlp/v1/metrics, Mimir, any OTLP backend — with the
// OpenTelemetry Go SDK's exporter (otlpmetrichttp): the snapshot is built
// into the SDK's metricdata and the SDK encodes and sends it.
//
// Each node is one Resource (service.name "nbs-agent",
// service.instance.id and host.name the node, nbs.tenant its tenant), so
// one request carries one node (the SDK exporter sends one Resource per
// request); requests go out a few at a time. Counters are cumulative
// monotonic Sums, the rest Gauges. Names are the Prometheus families'
// with their unit in the OTLP unit field, built so that a Prometheus OTLP
// receiver stores the scrape's names again (docs/export-otlp.md).
package otlp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"golang.org/x/net/http/httpguts"

	"github.com/nbs-project/nbs/collector/export"
	"github.com/nbs-project/nbs/internal/buildinfo"
)

// Options are the limits of one sender.
type Options struct {
	// MaxRequestBytes caps one request's body, the OTLP protobuf before
	// compression. A node's request past it is split in halves (by
	// metric, then by data point) until each fits; a single data point
	// that does not fit is refused as permanent. Default 4 MiB: what
	// the OpenTelemetry Collector's OTLP/gRPC receiver takes, and well
	// within Prometheus's.
	MaxRequestBytes int
	// Parallel is how many requests are in flight at once. Default 4.
	Parallel int
}

// DefaultTimeout bounds one request when the Receiver sets none.
const DefaultTimeout = 10 * time.Second

const (
	defaultMaxRequestBytes = 4 << 20
	defaultParallel        = 4
	maxTokenBytes          = 16 << 10
)

// Sender sends snapshots to one OTLP receiver. It is safe for concurrent
// use; its counters' start times are its own (see starts).
type Sender struct {
	r         export.Receiver
	opts      Options
	exporters chan *otlpmetrichttp.Exporter
	all       []*otlpmetrichttp.Exporter
	names     *namer
	starts    *starts
}

// New checks r and builds its sender with the default limits.
func New(r export.Receiver) (export.Sender, error) {
	return NewWith(r, Options{})
}

// NewWith is New with limits.
func NewWith(r export.Receiver, opts Options) (*Sender, error) {
	if r.Type != "" && r.Type != "otlp" {
		return nil, fmt.Errorf("receiver %q: type %q is not otlp", r.Name, r.Type)
	}
	u, err := url.Parse(r.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("receiver %q: url %q: want http(s)://host[:port]/path (e.g. http://prometheus:9090/api/v1/otlp/v1/metrics)", r.Name, r.URL)
	}
	if u.User != nil {
		return nil, fmt.Errorf("receiver %q: url: must not hold credentials (use headers or bearer_token_file)", r.Name)
	}
	for k, v := range r.Headers {
		if !httpguts.ValidHeaderFieldName(k) || !httpguts.ValidHeaderFieldValue(v) {
			return nil, fmt.Errorf("receiver %q: header %q: not a valid HTTP header", r.Name, k)
		}
		if strings.EqualFold(k, "Authorization") && r.BearerTokenFile != "" {
			return nil, fmt.Errorf("receiver %q: header Authorization and bearer_token_file both set", r.Name)
		}
	}
	if r.Timeout < 0 {
		return nil, fmt.Errorf("receiver %q: timeout %s is negative", r.Name, r.Timeout)
	}
	if r.Timeout == 0 {
		r.Timeout = DefaultTimeout
	}
	if opts.MaxRequestBytes <= 0 {
		opts.MaxRequestBytes = defaultMaxRequestBytes
	}
	if opts.Parallel <= 0 {
		opts.Parallel = defaultParallel
	}
	headers := map[string]string{}
	for k, v := range r.Headers {
		headers[k] = v
	}
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = opts.Parallel
	client := &http.Client{Transport: &transport{base: base}}
	s := &Sender{r: r, opts: opts, exporters: make(chan *otlpmetrichttp.Exporter, opts.Parallel), names: newNamer(), starts: newStarts()}
	// The SDK's exporter sends one request at a time (it holds a lock
	// around each): one exporter per request in flight. Every option is
	// set, so no OTEL_EXPORTER_OTLP_* variable of the collector's
	// environment changes what goes where.
	for range opts.Parallel {
		e, err := otlpmetrichttp.New(context.Background(),
			otlpmetrichttp.WithEndpointURL(r.URL),
			otlpmetrichttp.WithHeaders(headers),
			otlpmetrichttp.WithCompression(otlpmetrichttp.GzipCompression),
			otlpmetrichttp.WithTimeout(r.Timeout),
			otlpmetrichttp.WithMaxRequestSize(opts.MaxRequestBytes),
			// The pusher retries, with backoff, the whole snapshot.
			otlpmetrichttp.WithRetry(otlpmetrichttp.RetryConfig{Enabled: false}),
			otlpmetrichttp.WithHTTPClient(client),
		)
		if err != nil {
			return nil, fmt.Errorf("receiver %q: otlp exporter: %w", r.Name, err)
		}
		s.all = append(s.all, e)
		s.exporters <- e
	}
	return s, nil
}

// Close releases the exporters.
func (s *Sender) Close(ctx context.Context) error {
	var errs []error
	for _, e := range s.all {
		errs = append(errs, e.Shutdown(ctx))
	}
	return errors.Join(errs...)
}

// Send exports snap, one request per node (split further past
// MaxRequestBytes). It returns an error the pusher retries when any node
// failed for a reason that may pass (network, 5xx, 429), else a Permanent
// one when some node was refused (4xx, a partial success): sending it
// again cannot help. Nodes sent before a retry are sent again then, with
// the same samples, which a receiver takes as duplicates.
func (s *Sender) Send(ctx context.Context, snap export.Snapshot) error {
	token, err := s.token()
	if err != nil {
		return err
	}
	rms := convert(snap, s.names, s.starts, buildinfo.Version())
	work := make(chan *metricdata.ResourceMetrics)
	var (
		mu        sync.Mutex
		retryable []error
		permanent []error
		wg        sync.WaitGroup
	)
	for range s.opts.Parallel {
		wg.Go(func() {
			for rm := range work {
				if err := s.export(ctx, rm, token); err != nil {
					mu.Lock()
					if export.IsPermanent(err) {
						permanent = append(permanent, err)
					} else {
						retryable = append(retryable, err)
					}
					mu.Unlock()
				}
			}
		})
	}
	for _, rm := range rms {
		if ctx.Err() != nil {
			break
		}
		work <- rm
	}
	close(work)
	wg.Wait()
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("otlp %s: %w", s.r.Name, ctx.Err())
	case len(retryable) > 0:
		return fmt.Errorf("otlp %s: %d of %d nodes not sent: %w", s.r.Name, len(retryable)+len(permanent), len(rms), firstErrors(retryable))
	case len(permanent) > 0:
		return export.Permanent(fmt.Errorf("otlp %s: %d of %d nodes refused: %w", s.r.Name, len(permanent), len(rms), firstErrors(permanent)))
	}
	return nil
}

// The error of a send names a few nodes, each in a bounded message: a
// receiver's answer can name every sample it refused, and a fleet's worth
// of those would flood the log.
const (
	maxNodeErrors   = 3
	maxNodeErrorLen = 400
)

func firstErrors(errs []error) error {
	if len(errs) <= maxNodeErrors {
		return errors.Join(errs...)
	}
	return fmt.Errorf("%w\n(and %d more nodes)", errors.Join(errs[:maxNodeErrors]...), len(errs)-maxNodeErrors)
}

// short is err's message cut to maxNodeErrorLen, as one line.
func short(err error) string {
	m := strings.Join(strings.Fields(err.Error()), " ")
	if len(m) > maxNodeErrorLen {
		m = strings.ToValidUTF8(m[:maxNodeErrorLen], "") + "…"
	}
	return m
}

// token reads the bearer token file at each send, so a rotated token is
// used from the next send on.
func (s *Sender) token() (string, error) {
	if s.r.BearerTokenFile == "" {
		return "", nil
	}
	b, err := os.ReadFile(s.r.BearerTokenFile)
	if err != nil {
		return "", fmt.Errorf("otlp %s: read bearer_token_file: %w", s.r.Name, err)
	}
	if len(b) > maxTokenBytes {
		return "", fmt.Errorf("otlp %s: bearer_token_file %s: longer than %d bytes", s.r.Name, s.r.BearerTokenFile, maxTokenBytes)
	}
	t := strings.TrimSpace(string(b))
	if t == "" || !httpguts.ValidHeaderFieldValue(t) {
		return "", fmt.Errorf("otlp %s: bearer_token_file %s: empty or not a valid header value", s.r.Name, s.r.BearerTokenFile)
	}
	return t, nil
}

// export sends one node's metrics, in halves when the receiver or the
// size limit refuses them as too large.
func (s *Sender) export(ctx context.Context, rm *metricdata.ResourceMetrics, token string) error {
	e := <-s.exporters
	c := &call{token: token}
	err := e.Export(context.WithValue(ctx, callKey{}, c), rm)
	s.exporters <- e
	if err == nil {
		return nil
	}
	node := nodeOf(rm)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	// Not sent at all: the SDK refused it before the request, for its
	// size (the only check it makes there).
	tooLarge := !c.sent || c.status == http.StatusRequestEntityTooLarge
	if tooLarge {
		a, b, ok := halve(rm)
		if !ok {
			return export.Permanent(fmt.Errorf("node %s: one data point is larger than the limit: %s", node, short(err)))
		}
		ea, eb := s.export(ctx, a, token), s.export(ctx, b, token)
		switch {
		case ea == nil:
			return eb
		case eb == nil || !export.IsPermanent(ea):
			return ea
		}
		return eb
	}
	switch {
	case c.status >= 200 && c.status < 300:
		// A partial success: the receiver kept the rest and said so.
		return export.Permanent(fmt.Errorf("node %s: %s", node, short(err)))
	case c.status >= 400 && c.status < 500 && c.status != http.StatusTooManyRequests:
		return export.Permanent(fmt.Errorf("node %s: HTTP %d: %s", node, c.status, short(err)))
	}
	return fmt.Errorf("node %s: %s", node, short(err))
}

func nodeOf(rm *metricdata.ResourceMetrics) string {
	v, _ := rm.Resource.Set().Value("service.instance.id")
	return v.AsString()
}

// halve splits a node's metrics in two: its metrics, or the one metric's
// data points.
func halve(rm *metricdata.ResourceMetrics) (a, b *metricdata.ResourceMetrics, ok bool) {
	sm := rm.ScopeMetrics[0]
	with := func(ms []metricdata.Metrics) *metricdata.ResourceMetrics {
		return &metricdata.ResourceMetrics{Resource: rm.Resource, ScopeMetrics: []metricdata.ScopeMetrics{{Scope: sm.Scope, Metrics: ms}}}
	}
	if n := len(sm.Metrics); n > 1 {
		return with(sm.Metrics[:n/2]), with(sm.Metrics[n/2:]), true
	}
	if len(sm.Metrics) == 0 {
		return nil, nil, false
	}
	m := sm.Metrics[0]
	ma, mb := m, m
	switch d := m.Data.(type) {
	case metricdata.Sum[float64]:
		if len(d.DataPoints) < 2 {
			return nil, nil, false
		}
		da, db := d, d
		da.DataPoints, db.DataPoints = d.DataPoints[:len(d.DataPoints)/2], d.DataPoints[len(d.DataPoints)/2:]
		ma.Data, mb.Data = da, db
	case metricdata.Gauge[float64]:
		if len(d.DataPoints) < 2 {
			return nil, nil, false
		}
		da, db := d, d
		da.DataPoints, db.DataPoints = d.DataPoints[:len(d.DataPoints)/2], d.DataPoints[len(d.DataPoints)/2:]
		ma.Data, mb.Data = da, db
	default:
		return nil, nil, false
	}
	return with([]metricdata.Metrics{ma}), with([]metricdata.Metrics{mb}), true
}

// call is what the transport learns of one Export's request.
type call struct {
	token  string
	sent   bool
	status int
}

type callKey struct{}

// transport adds the bearer token of the send and records whether the
// request left and what status came back (the SDK's errors do not carry
// it).
type transport struct{ base http.RoundTripper }

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	c, _ := req.Context().Value(callKey{}).(*call)
	if c != nil {
		c.sent = true
		if c.token != "" {
			req = req.Clone(req.Context())
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
	}
	resp, err := t.base.RoundTrip(req)
	if c != nil && resp != nil {
		c.status = resp.StatusCode
	}
	return resp, err
}
