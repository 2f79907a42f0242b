// Package wire holds what a collector takes from an agent unless its
// operator says otherwise: the size of one message and the entries one
// report may carry. The collector's flags default to these, and the agent
// cuts its reports to fit them: a Config does not tell an agent its
// collector's limits, so it assumes the defaults. A message over them ends
// the stream or is rejected, and resending it would hold back every report
// behind it. The package imports only the wire's messages, so agent and
// collector may both use it.
package wire

import nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"

const (
	// MaxMessageBytes is the largest message an agent may send
	// (nbs-collector --grpc.max-message-bytes).
	MaxMessageBytes = 4 << 20
	// MaxSamples is the most samples one report may carry
	// (--ingest.max-samples).
	MaxSamples = 20000
	// MaxHistograms is the most histograms one report may carry
	// (--ingest.max-histograms).
	MaxHistograms = 2000
	// MaxEvents is the most events one report may carry
	// (--ingest.max-events).
	MaxEvents = 1000
	// MaxFlowEdges is the most flow edges one report may carry, "other"
	// edges included (--ingest.max-flow-edges).
	MaxFlowEdges = 2000
	// MaxAddressHolders is the most address holders one report may carry
	// (--ingest.max-address-holders).
	MaxAddressHolders = 4000
)

// MetricIDs lists the metric of every sample, histogram and event of a
// report, in that order and with repeats: what a stream must have defined
// for the collector to take it.
func MetricIDs(r *nbsv1.Report) []string {
	out := make([]string, 0, len(r.GetSamples())+len(r.GetHistograms())+len(r.GetEvents()))
	for _, x := range r.GetSamples() {
		out = append(out, x.GetMetricId())
	}
	for _, x := range r.GetHistograms() {
		out = append(out, x.GetMetricId())
	}
	for _, x := range r.GetEvents() {
		out = append(out, x.GetMetricId())
	}
	return out
}
