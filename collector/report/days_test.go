package report

import (
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/store"
)

// TestDaysEndBeforeToday: a period rounded up to its next hour ends at
// midnight after 23:00, yet the day that holds now is not whole: it is read
// from hour rollups, not asked of day rollups or the pre-aggregate (which
// refused it, and sent the whole report to per-node reads for the last hour
// of every UTC day).
func TestDaysEndBeforeToday(t *testing.T) {
	day := func(d int) time.Time { return time.Date(2026, 11, d, 0, 0, 0, 0, time.UTC) }
	tests := []struct {
		name     string
		now      time.Time
		from, to time.Time
		d0, d1   time.Time
	}{
		{"23:30, the period rounded up to midnight", day(29).Add(23*time.Hour + 30*time.Minute), day(1).Add(-30 * time.Minute), day(30), day(1), day(29)},
		{"20:00", day(29).Add(20 * time.Hour), day(1).Add(-4 * time.Hour), day(29).Add(20 * time.Hour), day(1), day(29)},
		{"a period that ended days ago", day(29).Add(23 * time.Hour), day(1), day(20), day(1), day(20)},
		{"no now: the period's own days", time.Time{}, day(1), day(30), day(1), day(30)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := span{res: store.RollupHour}
			if !tt.now.IsZero() {
				s.today = tt.now.Truncate(24 * time.Hour)
			}
			d0, d1 := s.days(tt.from, tt.to)
			if !d0.Equal(tt.d0) || !d1.Equal(tt.d1) {
				t.Errorf("days = [%v, %v), want [%v, %v)", d0, d1, tt.d0, tt.d1)
			}
		})
	}
}
