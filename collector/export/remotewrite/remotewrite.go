// Package remotewrite sends export snapshots to a Prometheus remote write
// receiver (Prometheus with --web.enable-remote-write-receiver, Mimir,
// Thanos receive, VictoriaMetrics): remote write 1.0 (a snappy
// prometheus.WriteRequest) or 2.0 (io.prometheus.write.v2.Request with its
// symbols table, the types of prometheus/client_golang/exp).
//
// Every sample of a snapshot carries the snapshot's Now, so sending a
// snapshot again is sending identical samples: a receiver takes an
// identical sample at a series' newest timestamp as a duplicate, not an
// error, which is what makes a retry after a lost answer safe.
//
// The requests are made here rather than by client_golang/exp's API.Write:
// that client retries on its own and reports a refusal only as text, and
// the pusher's on-disk queue needs each answer's status (retry, or drop
// what a retry cannot cure) and must own the retries to keep the order.
package remotewrite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/klauspost/compress/snappy"
	writev2 "github.com/prometheus/client_golang/exp/api/remote/genproto/v2"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/nbs-project/nbs/collector/export"
)

// Limits of one receiver's requests.
const (
	// DefaultTimeout bounds one request when the receiver sets none.
	DefaultTimeout = 30 * time.Second
	// MaxTimeout is the longest a receiver may set.
	MaxTimeout = 5 * time.Minute
	// SeriesPerRequest splits a snapshot: a receiver's request size limit
	// (Mimir's default is 100 MiB, Prometheus reads any) is far above it,
	// and a refused request costs only its own series.
	SeriesPerRequest = 2000
	// bodyShown is how much of a refusal's body an error quotes.
	bodyShown = 256
)

const (
	contentTypeV1 = "application/x-protobuf"
	contentTypeV2 = "application/x-protobuf;proto=io.prometheus.write.v2.Request"
)

// Sender is one remote write receiver.
type Sender struct {
	url       string
	v2        bool
	headers   http.Header
	tokenFile string
	timeout   time.Duration
	client    *http.Client
	// perRequest is how many series one request holds.
	perRequest int
}

// New checks r and makes its Sender. client nil: a client of its own.
func New(r export.Receiver, client *http.Client) (*Sender, error) {
	u, err := url.Parse(r.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("receiver %s: url %q: must be an http or https URL", r.Name, r.URL)
	}
	s := &Sender{url: r.URL, headers: http.Header{}, tokenFile: r.BearerTokenFile, timeout: r.Timeout, client: client, perRequest: SeriesPerRequest}
	switch r.Version {
	case "", "1.0":
	case "2.0":
		s.v2 = true
	default:
		return nil, fmt.Errorf("receiver %s: version %q: must be 1.0 or 2.0", r.Name, r.Version)
	}
	if s.timeout == 0 {
		s.timeout = DefaultTimeout
	}
	if s.client == nil {
		s.client = &http.Client{}
	}
	for k, v := range r.Headers {
		s.headers.Set(k, v)
	}
	return s, nil
}

// RejectedError says the receiver refused some of a snapshot's samples for
// good (their requests were answered 4xx, not 429): the rest was sent.
type RejectedError struct {
	Samples int
	Err     error
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("%d samples refused: %v", e.Samples, e.Err)
}
func (e *RejectedError) Unwrap() error { return e.Err }

// RejectedSamples is how many samples were refused (the pusher counts them
// as dropped).
func (e *RejectedError) RejectedSamples() int { return e.Samples }

// StatusError is a receiver's answer other than 2xx.
type StatusError struct {
	Code int
	// Body is the start of the answer's body.
	Body string
	// Written is what a 2.0 receiver says it stored of the request
	// anyway (Prometheus 3 stores the rest of a request with some samples
	// out of order); -1 when it does not say.
	Written int
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("HTTP %d %s: %q", e.Code, http.StatusText(e.Code), e.Body)
}

// OutOfOrder says the receiver refused samples older than, or differing at
// the time of, what it holds for their series: Prometheus answers 400
// "out of order sample", "out of bounds", "duplicate sample for timestamp"
// or "too old sample" — after a failover (a deposed leader's queue holding
// snapshots older than its successor's), or after an outage longer than
// the receiver's head keeps open. Remote write 1.0 in Prometheus 2.x and
// 3.x refuses the whole request then; 2.0 in 3.x stores the rest.
func (e *StatusError) OutOfOrder() bool {
	b := strings.ToLower(e.Body)
	return e.Code == http.StatusBadRequest && (strings.Contains(b, "out of order") || strings.Contains(b, "out of bounds") ||
		strings.Contains(b, "duplicate sample") || strings.Contains(b, "too old"))
}

// Send writes the snapshot in requests of at most SeriesPerRequest series,
// in order. A request that fails in a way a retry may cure ends the send
// with that error, so the pusher retries the whole snapshot: the requests
// already taken are identical samples again, duplicates to the receiver.
// Requests refused for good are skipped and reported together as a
// permanent RejectedError once the rest is sent.
func (s *Sender) Send(ctx context.Context, snap export.Snapshot) error {
	series := Flatten(snap)
	var rejected int
	var errs []error
	for start := 0; start < len(series); start += s.perRequest {
		batch := series[start:min(start+s.perRequest, len(series))]
		body, err := s.encode(batch)
		if err != nil {
			return export.Permanent(fmt.Errorf("encode remote write request: %w", err))
		}
		err = s.post(ctx, body, len(batch))
		if err == nil {
			continue
		}
		if !export.IsPermanent(err) {
			return err
		}
		refused := len(batch)
		if serr, ok := errors.AsType[*StatusError](err); ok && serr.Written > 0 {
			refused = max(len(batch)-serr.Written, 0)
		}
		rejected += refused
		errs = append(errs, err)
	}
	if rejected > 0 {
		return export.Permanent(&RejectedError{Samples: rejected, Err: errors.Join(errs...)})
	}
	return nil
}

// Series is one sample to send: its labels (__name__ first, the rest by
// name) and value at the snapshot's time in milliseconds.
type Series struct {
	Labels []Label
	Value  float64
	TimeMS int64
	// Counter is a counter's sample, else a gauge's (for 2.0's metadata).
	Counter bool
	Help    string
}

// Label is one name and value.
type Label struct{ Name, Value string }

// Flatten lists a snapshot's samples: a counter's value is its dto
// Counter's, a gauge's its Gauge's; families of other types are not made
// by the exporter and are left out.
func Flatten(snap export.Snapshot) []Series {
	ts := snap.Now.UnixMilli()
	n := 0
	for _, mf := range snap.Families {
		n += len(mf.Metric)
	}
	out := make([]Series, 0, n)
	for _, mf := range snap.Families {
		counter := mf.GetType() == dto.MetricType_COUNTER
		if !counter && mf.GetType() != dto.MetricType_GAUGE {
			continue
		}
		for _, m := range mf.Metric {
			ls := make([]Label, 0, len(m.Label)+1)
			ls = append(ls, Label{"__name__", mf.GetName()})
			for _, lp := range m.Label {
				ls = append(ls, Label{lp.GetName(), lp.GetValue()})
			}
			slices.SortFunc(ls[1:], func(a, b Label) int { return strings.Compare(a.Name, b.Name) })
			v := m.GetGauge().GetValue()
			if counter {
				v = m.GetCounter().GetValue()
			}
			out = append(out, Series{Labels: ls, Value: v, TimeMS: ts, Counter: counter, Help: mf.GetHelp()})
		}
	}
	return out
}

// encode is the compressed body of one request.
func (s *Sender) encode(batch []Series) ([]byte, error) {
	var raw []byte
	if s.v2 {
		var err error
		if raw, err = EncodeV2(batch); err != nil {
			return nil, err
		}
	} else {
		raw = EncodeV1(batch)
	}
	return snappy.Encode(nil, raw), nil
}

// EncodeV1 is the prometheus.WriteRequest of batch, uncompressed. Written
// with protowire: the message is four fields deep, and its only Go types
// (prometheus/prometheus/prompb) would bring the whole server in.
//
//	WriteRequest { repeated TimeSeries timeseries = 1; }
//	TimeSeries   { repeated Label labels = 1; repeated Sample samples = 2; }
//	Label        { string name = 1; string value = 2; }
//	Sample       { double value = 1; int64 timestamp = 2; }
func EncodeV1(batch []Series) []byte {
	var out, ts, lb, sm []byte
	for _, s := range batch {
		ts = ts[:0]
		for _, l := range s.Labels {
			lb = lb[:0]
			lb = protowire.AppendTag(lb, 1, protowire.BytesType)
			lb = protowire.AppendString(lb, l.Name)
			lb = protowire.AppendTag(lb, 2, protowire.BytesType)
			lb = protowire.AppendString(lb, l.Value)
			ts = protowire.AppendTag(ts, 1, protowire.BytesType)
			ts = protowire.AppendBytes(ts, lb)
		}
		sm = sm[:0]
		sm = protowire.AppendTag(sm, 1, protowire.Fixed64Type)
		sm = protowire.AppendFixed64(sm, math.Float64bits(s.Value))
		sm = protowire.AppendTag(sm, 2, protowire.VarintType)
		sm = protowire.AppendVarint(sm, uint64(s.TimeMS))
		ts = protowire.AppendTag(ts, 2, protowire.BytesType)
		ts = protowire.AppendBytes(ts, sm)
		out = protowire.AppendTag(out, 1, protowire.BytesType)
		out = protowire.AppendBytes(out, ts)
	}
	return out
}

// EncodeV2 is the io.prometheus.write.v2.Request of batch, uncompressed,
// with each series' type and help as 2.0 carries them.
func EncodeV2(batch []Series) ([]byte, error) {
	st := writev2.NewSymbolTable()
	req := &writev2.Request{Timeseries: make([]*writev2.TimeSeries, 0, len(batch))}
	var flat []string
	for _, s := range batch {
		flat = flat[:0]
		for _, l := range s.Labels {
			flat = append(flat, l.Name, l.Value)
		}
		typ := writev2.Metadata_METRIC_TYPE_GAUGE
		if s.Counter {
			typ = writev2.Metadata_METRIC_TYPE_COUNTER
		}
		req.Timeseries = append(req.Timeseries, &writev2.TimeSeries{
			LabelsRefs: st.SymbolizeLabels(flat, nil),
			Samples:    []*writev2.Sample{{Value: s.Value, Timestamp: s.TimeMS}},
			Metadata:   &writev2.Metadata{Type: typ, HelpRef: st.Symbolize(s.Help)},
		})
	}
	req.Symbols = st.Symbols()
	return req.MarshalVT()
}

// post sends one request of n samples and reads the answer.
func (s *Sender) post(ctx context.Context, body []byte, n int) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return export.Permanent(fmt.Errorf("remote write request: %w", err))
	}
	for k, v := range s.headers {
		req.Header[k] = v
	}
	req.Header.Set("Content-Encoding", "snappy")
	req.Header.Set("User-Agent", "nbs-collector")
	if s.v2 {
		req.Header.Set("Content-Type", contentTypeV2)
		req.Header.Set("X-Prometheus-Remote-Write-Version", "2.0.0")
	} else {
		req.Header.Set("Content-Type", contentTypeV1)
		req.Header.Set("X-Prometheus-Remote-Write-Version", "0.1.0")
	}
	if s.tokenFile != "" {
		// Read at every request, so a rotated token is used without a restart.
		tok, err := os.ReadFile(s.tokenFile)
		if err != nil {
			return fmt.Errorf("read bearer token file: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("remote write: %w", err)
	}
	defer resp.Body.Close()
	head, _ := io.ReadAll(io.LimitReader(resp.Body, bodyShown))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // lets the connection be reused
	if resp.StatusCode/100 == 2 {
		// A 1.0-only receiver that ignores Content-Type answers a 2.0
		// request 2xx having stored nothing; 2.0 receivers say what they
		// wrote (the spec's X-Prometheus-Remote-Write-Samples-Written).
		if s.v2 {
			if w := resp.Header.Get("X-Prometheus-Remote-Write-Samples-Written"); w == "" {
				return export.Permanent(fmt.Errorf("remote write 2.0: the receiver answered %d without X-Prometheus-Remote-Write-Samples-Written: it does not speak 2.0 (set version 1.0)", resp.StatusCode))
			} else if got, err := strconv.Atoi(w); err == nil && got == 0 && n > 0 {
				return export.Permanent(fmt.Errorf("remote write 2.0: the receiver wrote 0 of %d samples", n))
			}
		}
		return nil
	}
	serr := &StatusError{Code: resp.StatusCode, Body: strings.ToValidUTF8(string(head), "?"), Written: -1}
	if w, err := strconv.Atoi(resp.Header.Get("X-Prometheus-Remote-Write-Samples-Written")); err == nil && s.v2 {
		serr.Written = w
	}
	if resp.StatusCode/100 == 4 && resp.StatusCode != http.StatusTooManyRequests {
		return export.Permanent(serr)
	}
	return serr
}
