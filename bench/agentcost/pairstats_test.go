package agentcost

import (
	"math"
	"testing"
)

// TestPairStats checks the summary of the pairs' ratios: the geometric
// mean, its bootstrap interval over ABBA blocks (pairs 2k and 2k+1 drawn
// together), and the spread.
func TestPairStats(t *testing.T) {
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	for _, tc := range []struct {
		name           string
		r              []float64
		geomean        float64
		median, q1, q3 float64
		below          int
		// pinned: every resample is the same, so the interval is the mean.
		pinned bool
	}{
		{name: "no cost", r: []float64{1, 1, 1, 1}, geomean: 1, median: 1, q1: 1, q3: 1, pinned: true},
		// Each ABBA block holds one pair of each order: a drift within a
		// block is in every resample alike.
		{name: "drift within blocks", r: []float64{0.9, 1.1, 0.9, 1.1}, geomean: math.Sqrt(0.99),
			median: 1.0, q1: 0.9, q3: 1.1, below: 2, pinned: true},
		{name: "blocks differ", r: []float64{0.8, 0.8, 1.2, 1.2}, geomean: math.Sqrt(0.96),
			median: 1.0, q1: 0.8, q3: 1.2, below: 2},
		{name: "odd count", r: []float64{0.99, 0.98, 0.97}, geomean: math.Cbrt(0.99 * 0.98 * 0.97),
			median: 0.98, q1: 0.975, q3: 0.985, below: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := pairStats(tc.r)
			if !near(st.geomean, tc.geomean) || !near(st.median, tc.median) || !near(st.q1, tc.q1) || !near(st.q3, tc.q3) || st.below != tc.below {
				t.Errorf("got geomean %v median %v quartiles %v–%v below %d, want %v %v %v–%v %d",
					st.geomean, st.median, st.q1, st.q3, st.below, tc.geomean, tc.median, tc.q1, tc.q3, tc.below)
			}
			if tc.pinned && (!near(st.lo, st.geomean) || !near(st.hi, st.geomean)) {
				t.Errorf("interval %v–%v, want the mean %v", st.lo, st.hi, st.geomean)
			}
			if !tc.pinned && !(st.lo < st.geomean && st.geomean < st.hi) {
				t.Errorf("interval %v–%v does not hold the mean %v strictly", st.lo, st.hi, st.geomean)
			}
			if st.lo < st.min-1e-9 || st.hi > st.max+1e-9 {
				t.Errorf("interval %v–%v beyond the pairs %v–%v", st.lo, st.hi, st.min, st.max)
			}
			if again := pairStats(tc.r); again != st {
				t.Errorf("not deterministic: %+v then %+v", st, again)
			}
		})
	}
}
