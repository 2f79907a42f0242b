package api

import (
	"context"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/nbs-project/nbs/collector/errkind"
)

func TestTimeRange(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ms := func(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }
	cases := []struct {
		name, from, to string
		wantFrom       time.Time
		wantTo         time.Time
		wantErr        string // "" = valid
	}{
		{"defaults: the hour before now", "", "", now.Add(-time.Hour), now, ""},
		{"unix milliseconds", ms(now.Add(-2 * time.Hour)), ms(now.Add(-time.Hour)), now.Add(-2 * time.Hour), now.Add(-time.Hour), ""},
		{"rfc 3339 with zone", "2026-03-01T10:00:00+01:00", "2026-03-01T11:30:00Z", now.Add(-3 * time.Hour), now.Add(-30 * time.Minute), ""},
		{"rfc 3339 nanoseconds", "2026-03-01T11:00:00.5Z", "", now.Add(-time.Hour + 500*time.Millisecond), now, ""},
		{"from only: to is now", ms(now.Add(-10 * time.Minute)), "", now.Add(-10 * time.Minute), now, ""},
		{"to only: from an hour before", "", ms(now.Add(-time.Hour)), now.Add(-2 * time.Hour), now.Add(-time.Hour), ""},
		{"exactly 400 days", ms(now.Add(-400 * 24 * time.Hour)), "", now.Add(-400 * 24 * time.Hour), now, ""},
		{"the epoch", "0", "1000", time.UnixMilli(0), time.UnixMilli(1000), ""},

		{"from after to", ms(now), ms(now.Add(-time.Minute)), time.Time{}, time.Time{}, "must be before to"},
		{"empty range", ms(now), ms(now), time.Time{}, time.Time{}, "must be before to"},
		{"400 days and a millisecond", ms(now.Add(-400*24*time.Hour - time.Millisecond)), "", time.Time{}, time.Time{}, "longer than 400 days"},
		{"garbage", "yesterday", "", time.Time{}, time.Time{}, `from: "yesterday" is neither RFC 3339`},
		{"float notation is not milliseconds", "9e15", "", time.Time{}, time.Time{}, `from: "9e15" is neither`},
		{"negative float notation", "-9e15", "", time.Time{}, time.Time{}, `from: "-9e15" is neither`},
		{"milliseconds past year 9999", "9000000000000000", "", time.Time{}, time.Time{}, "outside 1970-01-01 to 9999-12-31"},
		{"to past year 9999 with from before it", ms(now), "9000000000000000", time.Time{}, time.Time{}, "to: 9000000000000000 Unix milliseconds is outside"},
		{"negative milliseconds", "-9000000000000000", "", time.Time{}, time.Time{}, "outside 1970-01-01 to 9999-12-31"},
		{"before the epoch", "-1", "", time.Time{}, time.Time{}, "outside"},
		{"int64 overflow", "99999999999999999999", "", time.Time{}, time.Time{}, "is neither"},
		{"rfc 3339 year 0", "0000-01-01T00:00:00Z", "", time.Time{}, time.Time{}, "outside 1970-01-01"},
		{"huge", strings.Repeat("9", 100000), "", time.Time{}, time.Time{}, "longer than 64 bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			from, to, err := timeRange(c.from, c.to, time.Hour, now)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || errkind.Of(err) != errkind.Invalid {
					t.Fatalf("timeRange(%.40q, %.40q) = %v, %v, %v; want an Invalid error containing %q", c.from, c.to, from, to, err, c.wantErr)
				}
				if len(err.Error()) > 300 {
					t.Errorf("error message is %d bytes long; a huge parameter must not come back in full", len(err.Error()))
				}
				return
			}
			if err != nil || !from.Equal(c.wantFrom) || !to.Equal(c.wantTo) {
				t.Fatalf("timeRange(%q, %q) = %v, %v, %v; want %v, %v", c.from, c.to, from, to, err, c.wantFrom, c.wantTo)
			}
		})
	}
}

func TestParseStep(t *testing.T) {
	from := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name, step string
		interval   time.Duration
		rangeLen   time.Duration
		want       time.Duration
		wantErr    string
	}{
		{"default: the node's interval", "", 10 * time.Second, time.Hour, 10 * time.Second, ""},
		{"a node without interval", "", 0, time.Hour, 3 * time.Second, ""}, // 1ms, made coarser: 1.8s rounded, and a second
		{"given", "5m", 10 * time.Second, time.Hour, 5 * time.Minute, ""},
		{"coarser than asked when there would be too many points", "1s", 10 * time.Second, 400 * 24 * time.Hour, 5 * time.Hour, ""}, // 4h48m, a second, whole hours
		{"coarser, under a minute", "", 10 * time.Second, 24 * time.Hour, 44 * time.Second, ""},                                     // 43.2s rounded, a second
		{"coarser, in whole minutes past one", "", 10 * time.Second, 7 * 24 * time.Hour, 6 * time.Minute, ""},                       // 302.4s, a second
		{"coarser, a day in whole hours", "", 10 * time.Second, 400 * 24 * time.Hour, 5 * time.Hour, ""},
		{"as long as the largest range", "9600h", 0, time.Hour, 9600 * time.Hour, ""},
		{"zero", "0s", 0, time.Hour, 0, "must be a duration from 1ms"},
		{"negative", "-5m", 0, time.Hour, 0, "must be a duration"},
		{"not a duration", "often", 0, time.Hour, 0, `step "often"`},
		{"overflowing", "9e15h", 0, time.Hour, 0, "must be a duration"},
		{"longer than the largest range", "9601h", 0, time.Hour, 0, "must be a duration"},
		{"huge", strings.Repeat("1", 100000) + "s", 0, time.Hour, 0, "…"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseStep(c.step, c.interval, from, from.Add(c.rangeLen))
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || errkind.Of(err) != errkind.Invalid || len(err.Error()) > 300 {
					t.Fatalf("parseStep(%.40q) = %v, %v; want a short Invalid error containing %q", c.step, got, err, c.wantErr)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("parseStep(%q) = %v, %v; want %v", c.step, got, err, c.want)
			}
			if points := c.rangeLen / got; points > maxPoints {
				t.Errorf("%d points, more than %d", points, maxPoints)
			}
		})
	}
}

func TestParseWindowAndLimit(t *testing.T) {
	windows := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{"", 5 * time.Minute, false}, {"1s", time.Second, false}, {"24h", 24 * time.Hour, false}, {"90m", 90 * time.Minute, false},
		{"999ms", 0, true}, {"24h1s", 0, true}, {"-5m", 0, true}, {"5", 0, true}, {"9e15h", 0, true}, {strings.Repeat("9", 5000), 0, true},
	}
	for _, c := range windows {
		got, err := parseWindow(c.in)
		if (err != nil) != c.wantErr || got != c.want || (err != nil && (errkind.Of(err) != errkind.Invalid || len(err.Error()) > 200)) {
			t.Errorf("parseWindow(%.20q) = %v, %v; want %v, error %v", c.in, got, err, c.want, c.wantErr)
		}
	}
	limits := []struct {
		in      string
		want    int
		wantErr bool
	}{
		{"", 100, false}, {"1", 1, false}, {"1000", 1000, false},
		{"0", 0, true}, {"1001", 0, true}, {"-1", 0, true}, {"1e3", 0, true}, {"99999999999999999999", 0, true}, {"ten", 0, true},
	}
	for _, c := range limits {
		got, err := parseLimit(c.in)
		if (err != nil) != c.wantErr || got != c.want || (err != nil && errkind.Of(err) != errkind.Invalid) {
			t.Errorf("parseLimit(%q) = %v, %v; want %v, error %v", c.in, got, err, c.want, c.wantErr)
		}
	}
}

func TestMetricAndNodeParams(t *testing.T) {
	metrics := []struct {
		query, want, wantErr string
	}{
		{"metric=tcp_reset", "tcp_reset", ""},
		{"metric=tcp_reset/sent/no_socket", "tcp_reset/sent/no_socket", ""},
		{"", "", "metric is required"},
		{"metric=", "", "metric is required"},
		{"metric=TCP%20Reset", "", "is not a metric id"},
		{"metric=tcp_reset/*", "", "is not a metric id"},
		{"metric=" + strings.Repeat("a", 256), "", "is not a metric id"},
		{"metric=" + strings.Repeat("a/", 100000), "", "is not a metric id"},
	}
	for _, c := range metrics {
		r := httptest.NewRequest("GET", "/x?"+c.query, nil)
		got, err := metricParam(r)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) || errkind.Of(err) != errkind.Invalid || len(err.Error()) > 200 {
				t.Errorf("metricParam(%.40q) = %q, %v; want a short Invalid error containing %q", c.query, got, err, c.wantErr)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("metricParam(%q) = %q, %v; want %q", c.query, got, err, c.want)
		}
	}
	nodes := []struct {
		name string
		ok   bool
	}{
		{"web-1", true}, {"db.example.com", true}, {"a", true}, {strings.Repeat("n", 253), true},
		{"", false}, {"-web", false}, {"web 1", false}, {"web/1", false}, {strings.Repeat("n", 254), false}, {strings.Repeat("n", 100000), false},
	}
	for _, c := range nodes {
		rctx := chi.NewRouteContext()
		rctx.URLParams.Add("node", c.name)
		r := httptest.NewRequest("GET", "/x", nil)
		r = r.WithContext(context.WithValue(r.Context(), chi.RouteCtxKey, rctx))
		got, err := NodeParam(r)
		if c.ok != (err == nil) || (c.ok && got != c.name) || (err != nil && (errkind.Of(err) != errkind.Invalid || len(err.Error()) > 200)) {
			t.Errorf("NodeParam(%.40q) = %.40q, %v; valid %v", c.name, got, err, c.ok)
		}
	}
}

// TestQueryParams: what no route could use is refused before any handler
// runs, with a short 400 naming the parameter; anything else passes to the
// handlers' own parsing.
func TestQueryParams(t *testing.T) {
	long := strings.Repeat("a", MaxParamBytes)
	many := strings.Repeat("metric=a&", MaxParamValues)
	cases := []struct {
		raw, wantErr string
	}{
		{"", ""},
		{"q=web&label=customer%3Dacme&label=rack%3Dr1", ""},
		{"q=caf%C3%A9", ""}, // UTF-8 is fine
		{"q=" + long, ""},
		{many[:len(many)-1], ""},
		{"q=a%00b", `query parameter q "a\x00b" holds a control character (byte 0x00 at 1)`},
		{"q=%FF%FE", `query parameter q "\xff\xfe" is not valid UTF-8`},
		{"object_kind=threshold%0A", "query parameter object_kind"},
		{"q=a%7Fb", "control character (byte 0x7f"},
		{"q=" + long + "a", "query parameter q is 16385 bytes; at most 16384"},
		{"label=a&label=" + long + "a", "query parameter label is 16385 bytes"},
		{"a%00=1", `a query parameter's name "a\x00"`},
		{"%FF=1", "a query parameter's name"},
		{"q=%zz", "the query string is not URL encoding"},
		{"q=a;b", "the query string is not URL encoding"},
		{many + "metric=b", "the query has 257 values; at most 256"},
	}
	for _, c := range cases {
		err := QueryParams(c.raw)
		if c.wantErr == "" {
			if err != nil {
				t.Errorf("QueryParams(%.60q) = %v, want nil", c.raw, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.wantErr) || errkind.Of(err) != errkind.Invalid || len(err.Error()) > 300 {
			t.Errorf("QueryParams(%.60q) = %v; want a short Invalid error containing %q", c.raw, err, c.wantErr)
		}
	}
}
