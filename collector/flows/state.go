// Package flows turns the flow edges nodes reported (collector/store,
// migration 029) into the flow map: peers resolved to the owners that held
// their addresses at the edge's time, within the edge's tenant; the client
// and server ends of the same connections joined into one edge; each edge's
// state and the figure that explains it; sorted, filtered and paged, and
// served as GET /api/v1/flows and /flows/edge (docs/flow-map.md).
package flows

import (
	"fmt"
	"sort"
	"time"

	"github.com/nbs-project/nbs/agent/catalog"
)

// State rules (docs/flow-map.md, "States"): what an operator should look
// at first is an edge whose connections are being refused or torn down.
const (
	// CritResetsPer5m is how many resets, at one end, per 5 minutes of the
	// window make an edge crit.
	CritResetsPer5m = 10
	// CritFailedShare and CritFailedMin: failed connects of at least this
	// share of attempts, and at least this many, make it crit.
	CritFailedShare = 0.10
	CritFailedMin   = 5
	// WarnRetransShare and WarnRetransMin: retransmits of at least this
	// share of the segments the edge carried (bytes ÷ SegmentBytes), and at
	// least this many, make it warn; so does any reset, drop or failure.
	WarnRetransShare = 0.01
	WarnRetransMin   = 5
	// SegmentBytes estimates segments from bytes: the MSS of a 1500-byte
	// MTU. Agents count bytes, not segments.
	SegmentBytes = 1448
)

// Figures are what State judges: an edge's totals over a window.
type Figures struct {
	Opened, Failed, Retransmits uint64
	Bytes                       uint64
	// Resets by end and direction, by reason.
	ClientSent, ClientReceived, ServerSent, ServerReceived map[string]uint64
	ClientDrops, ServerDrops                               map[string]uint64
}

// State is an edge's state, ok, warn or crit, and one sentence with the
// figure that made it warn or crit ("" when ok), over a window of length
// window.
func State(f Figures, window time.Duration) (string, string) {
	// Most edges are ok: per is written only for an explanation.
	var per string
	if f.Failed > 0 || f.Retransmits > 0 || len(f.ClientSent)+len(f.ClientReceived)+len(f.ServerSent)+len(f.ServerReceived)+len(f.ClientDrops)+len(f.ServerDrops) > 0 {
		per = fmtWindow(window)
	}
	// A reset is counted at both ends when both report (the server sent
	// what the client received): an end's own total is the count.
	clientResets := sum(f.ClientSent) + sum(f.ClientReceived)
	serverResets := sum(f.ServerSent) + sum(f.ServerReceived)
	resets := max(clientResets, serverResets)
	// Windows shorter than 5 minutes are held to the 5-minute count.
	limit := float64(CritResetsPer5m) * max(window.Minutes(), 5) / 5
	attempts := f.Opened + f.Failed
	clientDrops, serverDrops := wireDrops(f.ClientDrops), wireDrops(f.ServerDrops)
	drops := sum(clientDrops) + sum(serverDrops)
	segments := f.Bytes / SegmentBytes
	switch {
	case resets > 0 && float64(resets) >= limit:
		return "crit", fmt.Sprintf("%d resets in %s (crit from %s): %s", resets, per, fmtCount(limit), worstReset(f))
	case f.Failed >= CritFailedMin && float64(f.Failed) >= CritFailedShare*float64(attempts):
		return "crit", fmt.Sprintf("%d of %d connects failed in %s (%.0f%%; crit from %.0f%% and %d)", f.Failed, attempts, per,
			100*float64(f.Failed)/float64(attempts), 100*CritFailedShare, CritFailedMin)
	case resets > 0:
		return "warn", fmt.Sprintf("%d resets in %s: %s", resets, per, worstReset(f))
	case f.Failed > 0:
		return "warn", fmt.Sprintf("%d of %d connects failed in %s", f.Failed, attempts, per)
	case drops > 0:
		end, reason, n := worst(map[string]map[string]uint64{"the client": clientDrops, "the server": serverDrops})
		return "warn", fmt.Sprintf("%d packets dropped in %s, most by %s (%s: %d)", drops, per, end, reason, n)
	case f.Retransmits >= WarnRetransMin && float64(f.Retransmits) >= WarnRetransShare*float64(segments):
		share := "of no data segments"
		if segments > 0 {
			share = fmt.Sprintf("%.1f%% of about %d segments", 100*float64(f.Retransmits)/float64(segments), segments)
		}
		return "warn", fmt.Sprintf("%d retransmits in %s (%s; warn from %.0f%%)", f.Retransmits, per, share, 100*WarnRetransShare)
	}
	return "ok", ""
}

// wireDrops is by without the reasons common in healthy traffic
// (catalog.HealthyTrafficDrop: a socket's queues freed as it closes, a
// duplicate segment discarded): counted on the edge, they do not raise it.
func wireDrops(by map[string]uint64) map[string]uint64 {
	if len(by) == 0 {
		return nil
	}
	out := make(map[string]uint64, len(by))
	for r, n := range by {
		if !catalog.HealthyTrafficDrop(r) {
			out[r] = n
		}
	}
	return out
}

func worstReset(f Figures) string {
	end, reason, n := worst(map[string]map[string]uint64{"sent by the client": f.ClientSent, "received by the client": f.ClientReceived,
		"sent by the server": f.ServerSent, "received by the server": f.ServerReceived})
	return fmt.Sprintf("most %s (%s: %d)", end, reason, n)
}

// worst is the largest count of any map, with its name and reason; ties
// go to the first name and reason in order, so the sentence is stable.
func worst(by map[string]map[string]uint64) (string, string, uint64) {
	names := make([]string, 0, len(by))
	for k := range by {
		names = append(names, k)
	}
	sort.Strings(names)
	var bn, br string
	var bv uint64
	for _, name := range names {
		reasons := make([]string, 0, len(by[name]))
		for r := range by[name] {
			reasons = append(reasons, r)
		}
		sort.Strings(reasons)
		for _, r := range reasons {
			if v := by[name][r]; v > bv {
				bn, br, bv = name, r, v
			}
		}
	}
	return bn, br, bv
}

func sum(m map[string]uint64) uint64 {
	var n uint64
	for _, v := range m {
		n += v
	}
	return n
}

func fmtCount(v float64) string {
	if v == float64(uint64(v)) {
		return fmt.Sprintf("%d", uint64(v))
	}
	return fmt.Sprintf("%.1f", v)
}

// fmtWindow writes a window as an operator reads it: 5m, 1h, 2h30m, 3d.
func fmtWindow(d time.Duration) string {
	switch {
	case d >= 24*time.Hour && d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	case d >= time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d >= time.Minute && d%time.Minute == 0:
		h, m := d/time.Hour, (d%time.Hour)/time.Minute
		if h > 0 {
			return fmt.Sprintf("%dh%dm", h, m)
		}
		return fmt.Sprintf("%dm", m)
	}
	return d.Round(time.Second).String()
}
