package ingest

import (
	"math"
	"sync"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // the codec this one falls back on
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// The agent's reports decoded without the protobuf runtime's allocations.
//
// The runtime decodes a report into a message of its own, a Sample and a
// metric id string each sample: at 10,000 nodes 15% of the collector's
// allocations, every one of them garbage once the report is converted
// (checkReport), and the allocation rate is what sets how often the GC
// runs and scans every goroutine's stack (BENCHMARKS.md, "Collector
// memory per connected node"). Here a report of the common shape (a
// sequence, times, samples and histograms) is decoded into a message
// kept from report to report (reportScratch), its metric ids the
// stream's own strings. Anything else, and anything this decoder does not
// take exactly as the runtime would (an unknown field, a field of another
// wire type, a Report field twice over, a string that is not UTF-8, a
// malformed varint), goes to the protobuf runtime: what it refuses gets
// the same gRPC status as before, and what it takes reaches checkReport
// as the same message.

// Codec is the gRPC codec of the agents' service: protobuf, with a
// report received by a stream's handler (an inbound) decoded here.
type Codec struct {
	base encoding.CodecV2
	// scratches are the decoders' reports, reused: one is held only
	// while its report is handled.
	scratches *sync.Pool
}

// NewCodec wraps gRPC's protobuf codec.
func NewCodec() Codec {
	c := Codec{base: encoding.GetCodecV2("proto"), scratches: &sync.Pool{}}
	c.scratches.New = func() any { return &reportScratch{pool: c.scratches} }
	return c
}

// ServerCodec is the gRPC server option that installs it.
func ServerCodec() grpc.ServerOption { return grpc.ForceServerCodecV2(NewCodec()) }

func (c Codec) Name() string { return "proto" }

func (c Codec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }

func (c Codec) Unmarshal(data mem.BufferSlice, v any) error {
	in, ok := v.(*inbound)
	if !ok || in.metrics == nil {
		return c.base.Unmarshal(data, v)
	}
	var b []byte
	var pooled *mem.Buffer
	if len(data) == 1 {
		b = data[0].ReadOnlyData()
	} else {
		buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
		pooled, b = &buf, buf.ReadOnlyData()
	}
	sc := c.scratches.Get().(*reportScratch)
	fast := sc.decode(b, in.metrics)
	if pooled != nil {
		(*pooled).Free()
	}
	if fast {
		in.scratch = sc
		in.ConnectRequest.Msg = &sc.oneof
		return nil
	}
	sc.release()
	return c.base.Unmarshal(data, in)
}

// inbound is what a stream's handler receives into: a ConnectRequest
// (so gRPC's own codec decodes into it as well), with the stream's
// metrics, whose id strings the decoder's samples share, and the scratch
// the decoder used, given back once the message is handled (done).
type inbound struct {
	nbsv1.ConnectRequest
	metrics *metricSet
	scratch *reportScratch
}

// done releases what the last message held: the stream keeps no report
// between two.
func (in *inbound) done() {
	in.ConnectRequest.Reset()
	if in.scratch != nil {
		in.scratch.release()
		in.scratch = nil
	}
}

// maxKeptSamples bounds the samples and histograms a scratch keeps room
// for: a full snapshot's fit, the largest allowed report's do not stay.
const maxKeptSamples = 4096

// reportScratch is one decoded report and the room it was decoded into.
type reportScratch struct {
	pool    *sync.Pool // the codec's, which it goes back to
	oneof   nbsv1.ConnectRequest_Report
	report  nbsv1.Report
	samples []nbsv1.Sample
	sptrs   []*nbsv1.Sample
	hists   []nbsv1.Histogram
	hptrs   []*nbsv1.Histogram
	idx     []uint32
	cnt     []uint64
	nb      []int // each histogram's buckets in idx and in cnt
}

func (sc *reportScratch) release() {
	if cap(sc.samples) > maxKeptSamples || cap(sc.hists) > maxKeptSamples || cap(sc.idx) > maxKeptSamples*64 {
		return
	}
	sc.report.Samples, sc.report.Histograms = nil, nil
	sc.pool.Put(sc)
}

// Field numbers of what the decoder takes.
const (
	requestReport = 2

	reportSequence   = 1
	reportTime       = 2
	reportInterval   = 3
	reportSnapshot   = 4
	reportSamples    = 5
	reportHistograms = 6

	sampleMetric  = 1
	sampleValue   = 2
	sampleState   = 3
	sampleNoValue = 4

	histMetric = 1
	histIndex  = 2
	histCount  = 3
	histTotal  = 4
	histSum    = 5
	histStart  = 6
)

// decode decodes b, a ConnectRequest, into sc when it is a Report of the
// shape it knows, and says whether it did.
func (sc *reportScratch) decode(b []byte, metrics *metricSet) bool {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || num != requestReport || typ != protowire.BytesType {
		return false
	}
	body, m := protowire.ConsumeBytes(b[n:])
	if m < 0 || n+m != len(b) { // one Report, nothing after: the runtime merges a second
		return false
	}
	r := &sc.report
	r.Sequence, r.TimeUnixNano, r.IntervalMs, r.Snapshot = 0, 0, 0, false
	sc.samples, sc.hists, sc.idx, sc.cnt, sc.nb = sc.samples[:0], sc.hists[:0], sc.idx[:0], sc.cnt[:0], sc.nb[:0]
	for len(body) > 0 {
		num, typ, n := protowire.ConsumeTag(body)
		if n < 0 {
			return false
		}
		body = body[n:]
		switch {
		case typ == protowire.VarintType && num >= reportSequence && num <= reportSnapshot:
			v, n := protowire.ConsumeVarint(body)
			if n < 0 {
				return false
			}
			body = body[n:]
			switch num {
			case reportSequence:
				r.Sequence = v
			case reportTime:
				r.TimeUnixNano = int64(v)
			case reportInterval:
				r.IntervalMs = uint32(v)
			case reportSnapshot:
				r.Snapshot = protowire.DecodeBool(v)
			}
		case typ == protowire.BytesType && num == reportSamples:
			v, n := protowire.ConsumeBytes(body)
			if n < 0 {
				return false
			}
			body = body[n:]
			sc.samples = append(sc.samples, nbsv1.Sample{})
			if !decodeSample(v, &sc.samples[len(sc.samples)-1], metrics) {
				return false
			}
		case typ == protowire.BytesType && num == reportHistograms:
			v, n := protowire.ConsumeBytes(body)
			if n < 0 {
				return false
			}
			body = body[n:]
			sc.hists = append(sc.hists, nbsv1.Histogram{})
			ni, nc, ok := sc.decodeHistogram(v, &sc.hists[len(sc.hists)-1], metrics)
			if !ok {
				return false
			}
			sc.nb = append(sc.nb, ni, nc)
		default:
			return false
		}
	}
	// Pointers once the arrays stopped growing. A report without samples
	// has none, as the runtime leaves it (nil).
	sc.sptrs, sc.hptrs = sc.sptrs[:0], sc.hptrs[:0]
	for i := range sc.samples {
		sc.sptrs = append(sc.sptrs, &sc.samples[i])
	}
	for i := range sc.hists {
		sc.hptrs = append(sc.hptrs, &sc.hists[i])
	}
	r.Samples, r.Histograms = nil, nil
	if len(sc.sptrs) > 0 {
		r.Samples = sc.sptrs
	}
	if len(sc.hptrs) > 0 {
		r.Histograms = sc.hptrs
	}
	// The buckets: each histogram's are the next ni of idx and nc of cnt
	// (nb), sliced once those stopped growing; none: nil, as the runtime
	// leaves them.
	at, bt := 0, 0
	for i, h := range sc.hptrs {
		ni, nc := sc.nb[2*i], sc.nb[2*i+1]
		h.BucketIndex, h.BucketCount = nil, nil
		if ni > 0 {
			h.BucketIndex = sc.idx[at : at+ni : at+ni]
		}
		if nc > 0 {
			h.BucketCount = sc.cnt[bt : bt+nc : bt+nc]
		}
		at, bt = at+ni, bt+nc
	}
	sc.oneof.Report = r
	return true
}

// metricIDOf is the stream's own string for a metric id, or a new one; not
// UTF-8 (the runtime refuses it): false.
func metricIDOf(b []byte, metrics *metricSet) (string, bool) {
	if sm, ok := metrics.get(string(b)); ok && sm.path != "" {
		return sm.path, true
	}
	if !utf8.Valid(b) {
		return "", false
	}
	return string(b), true
}

func decodeSample(b []byte, s *nbsv1.Sample, metrics *metricSet) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case num == sampleMetric && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			id, ok := metricIDOf(v, metrics)
			if !ok {
				return false
			}
			s.MetricId = id
		case num == sampleValue && typ == protowire.Fixed64Type:
			v, n := protowire.ConsumeFixed64(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			s.Value = math.Float64frombits(v)
		case (num == sampleState || num == sampleNoValue) && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			if num == sampleState {
				s.State = nbsv1.State(int32(v))
			} else {
				s.NoValue = protowire.DecodeBool(v)
			}
		default:
			return false
		}
	}
	return true
}

// decodeHistogram decodes b into h but for its buckets, which it appends
// to sc.idx and sc.cnt, and says how many (decode slices them once the
// arrays stopped growing).
func (sc *reportScratch) decodeHistogram(b []byte, h *nbsv1.Histogram, metrics *metricSet) (ni, nc int, ok bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, 0, false
		}
		b = b[n:]
		switch {
		case num == histMetric && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return 0, 0, false
			}
			b = b[n:]
			id, ok := metricIDOf(v, metrics)
			if !ok {
				return 0, 0, false
			}
			h.MetricId = id
		case (num == histIndex || num == histCount) && typ == protowire.BytesType: // packed
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return 0, 0, false
			}
			b = b[n:]
			for len(v) > 0 {
				x, n := protowire.ConsumeVarint(v)
				if n < 0 {
					return 0, 0, false
				}
				v = v[n:]
				if num == histIndex {
					sc.idx, ni = append(sc.idx, uint32(x)), ni+1
				} else {
					sc.cnt, nc = append(sc.cnt, x), nc+1
				}
			}
		case num >= histIndex && num <= histStart && num != histSum && typ == protowire.VarintType:
			x, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return 0, 0, false
			}
			b = b[n:]
			switch num {
			case histIndex: // one element, unpacked
				sc.idx, ni = append(sc.idx, uint32(x)), ni+1
			case histCount:
				sc.cnt, nc = append(sc.cnt, x), nc+1
			case histTotal:
				h.Count = x
			case histStart:
				h.StartUnixNano = int64(x)
			}
		case num == histSum && typ == protowire.Fixed64Type:
			v, n := protowire.ConsumeFixed64(b)
			if n < 0 {
				return 0, 0, false
			}
			b = b[n:]
			h.Sum = math.Float64frombits(v)
		default:
			return 0, 0, false
		}
	}
	return ni, nc, true
}
