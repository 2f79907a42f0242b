import { describe, expect, it } from 'vitest';
import {
  alignSeries,
  availabilityBar,
  calendarRange,
  change,
  chartStart,
  dataStart,
  rootHeadline,
  fmtValue,
  loneIndexes,
  timelineShare,
  definitionReportUrl,
  fmtDuration,
  fmtErrorBound,
  fmtLatency,
  fmtMs,
  fmtNum,
  fmtShare,
  fmtUtc,
  gapShare,
  paramsFromQuery,
  parseSelector,
  parseTargets,
  periodRange,
  pingObjective,
  previousRange,
  queryFromParams,
  reportDefinitionHref,
  reportUrl,
  reportsHref,
  scopedSelector,
  selectorString,
} from './report';
import { acmeReport } from './reportfixture';
import { parseRoute } from './route';

const NOW = Date.parse('2026-11-25T06:00:00Z');
const DAY = 86_400_000;

describe('period presets', () => {
  it.each([
    ['1d', 1],
    ['7d', 7],
    ['30d', 30],
  ] as const)('%s ends now and spans %i days', (period, days) => {
    expect(periodRange({ period }, NOW)).toEqual({ from: NOW - days * DAY, to: NOW });
  });
  it('runs a custom period over whole UTC days, the last one inclusive', () => {
    expect(periodRange({ period: 'custom', from: '2026-11-01', to: '2026-11-02' }, NOW)).toEqual({
      from: Date.parse('2026-11-01T00:00:00Z'),
      to: Date.parse('2026-11-03T00:00:00Z'),
    });
  });
  it('cuts a custom period at now', () => {
    expect(periodRange({ period: 'custom', from: '2026-11-24', to: '2026-11-30' }, NOW)).toEqual({ from: Date.parse('2026-11-24T00:00:00Z'), to: NOW });
  });
  it.each([
    [{ from: '', to: '2026-11-02' }, /first day/],
    [{ from: '2026-11-01', to: 'yesterday' }, /last day/],
    [{ from: '2026-02-31', to: '2026-03-02' }, /first day/],
    [{ from: '2026-11-05', to: '2026-11-02' }, /before the first/],
    [{ from: '2026-12-01', to: '2026-12-02' }, /future/],
    [{ from: '2025-01-01', to: '2026-11-01' }, /at most 400 days/],
  ])('refuses %j', (b, msg) => {
    const r = periodRange({ period: 'custom', ...b }, NOW);
    expect('error' in r && r.error).toMatch(msg);
  });
  // NOW is a Wednesday.
  it.each([
    ['this_week', '2026-11-23T00:00:00Z', '2026-11-25T06:00:00Z'],
    ['last_week', '2026-11-16T00:00:00Z', '2026-11-23T00:00:00Z'],
    ['this_month', '2026-11-01T00:00:00Z', '2026-11-25T06:00:00Z'],
    ['last_month', '2026-10-01T00:00:00Z', '2026-11-01T00:00:00Z'],
  ] as const)('%s runs from %s to %s (UTC, weeks from Monday)', (period, from, to) => {
    expect(periodRange({ period }, NOW)).toEqual({ from: Date.parse(from), to: Date.parse(to) });
  });
  it('finds calendar periods across a year and on a Sunday', () => {
    expect(calendarRange('last_month', Date.parse('2027-01-01T06:00:00Z'))).toEqual({ from: Date.parse('2026-12-01T00:00:00Z'), to: Date.parse('2027-01-01T00:00:00Z') });
    expect(calendarRange('this_week', Date.parse('2026-11-29T23:00:00Z'))?.from).toBe(Date.parse('2026-11-23T00:00:00Z'));
    expect(calendarRange('7d', NOW)).toBeNull();
  });
  it('refuses a calendar period that has not begun yet', () => {
    expect(periodRange({ period: 'this_week' }, Date.parse('2026-11-23T00:00:00Z'))).toHaveProperty('error');
  });
  it('reads calendar periods from the page URL', () => {
    expect(queryFromParams(new URLSearchParams('period=last_month')).period).toBe('last_month');
    expect(queryFromParams(new URLSearchParams('period=fortnight')).period).toBe('7d');
  });
  it('has a previous period of the same length ending where this one starts', () => {
    expect(previousRange({ from: 100, to: 250 })).toEqual({ from: -50, to: 100 });
  });
});

describe('selectors and targets', () => {
  it('parses label=value pairs', () => {
    expect(parseSelector(' customer=acme , env=prod ')).toEqual({ customer: 'acme', env: 'prod' });
    expect(parseSelector('')).toEqual({});
  });
  it.each(['customer', '=acme', 'customer=', 'a b=c', 'x=1,x=2'])('refuses %s', (s) => {
    expect(parseSelector(s)).toHaveProperty('error');
  });
  it('writes selectors with sorted keys', () => {
    expect(selectorString({ env: 'prod', customer: 'acme' })).toBe('customer=acme,env=prod');
    expect(selectorString(undefined)).toBe('');
  });
  it("keeps a customer inside its scope: its own labels win, others narrow it", () => {
    expect(scopedSelector({ customer: 'globex', env: 'prod' }, { customer: 'acme' })).toEqual({ customer: 'acme', env: 'prod' });
    expect(scopedSelector({}, { customer: 'acme' })).toEqual({ customer: 'acme' });
    expect(scopedSelector({ env: 'prod' }, undefined)).toEqual({ env: 'prod' });
  });
  it('dedupes targets', () => {
    expect(parseTargets(' a, b,,a ')).toEqual(['a', 'b']);
    expect(parseTargets(null)).toEqual([]);
  });
});

describe('links', () => {
  const q = { selector: { customer: 'acme' }, period: '7d' as const, targets: ['peer:acme-2', '10.0.0.1'] };
  const r = { from: NOW - 7 * DAY, to: NOW };
  it('builds the JSON and CSV report URLs', () => {
    const json = new URL(reportUrl(q, r), 'http://x');
    expect(json.pathname).toBe('/api/v1/reports');
    expect(Object.fromEntries(json.searchParams)).toEqual({
      selector: 'customer=acme',
      from: String(NOW - 7 * DAY),
      to: String(NOW),
      targets: 'peer:acme-2,10.0.0.1',
      format: 'json',
    });
    expect(reportUrl(q, r, 'csv')).toContain('selector=customer%3Dacme');
    expect(new URL(reportUrl(q, r, 'csv'), 'http://x').searchParams.get('format')).toBe('csv');
    expect(reportUrl({ selector: {}, targets: [] }, r)).toBe(`/api/v1/reports?from=${NOW - 7 * DAY}&to=${NOW}&format=json`);
  });
  it('runs a saved definition by id', () => {
    expect(definitionReportUrl(3)).toBe('/api/v1/reports?definition=3&format=json');
    expect(definitionReportUrl(3, 'csv')).toBe('/api/v1/reports?definition=3&format=csv');
    expect(reportDefinitionHref(3)).toBe('/reports/3');
  });
  it('round-trips the query through the page URL', () => {
    const custom = { selector: { customer: 'acme' }, period: 'custom' as const, from: '2026-11-01', to: '2026-11-07', targets: ['a'] };
    expect(queryFromParams(paramsFromQuery(custom))).toEqual(custom);
    expect(queryFromParams(paramsFromQuery(q))).toEqual({ ...q, from: undefined, to: undefined });
    expect(reportsHref(q)).toBe('/reports?selector=customer%3Dacme&period=7d&targets=peer%3Aacme-2%2C10.0.0.1');
  });
  it('defaults to a week and drops a malformed selector', () => {
    expect(queryFromParams(new URLSearchParams('period=bogus&selector=nonsense'))).toEqual({ selector: {}, period: '7d', from: undefined, to: undefined, targets: [] });
  });
  it('routes /reports and /reports/{id}', () => {
    expect(parseRoute('/reports', '?period=1d').page).toBe('reports');
    expect(parseRoute('/reports/12', '')).toMatchObject({ page: 'report', id: 12 });
    expect(parseRoute('/reports/0', '').page).toBe('notfound');
    expect(parseRoute('/reports/x', '').page).toBe('notfound');
  });
});

describe('formatting', () => {
  it.each([
    [null, '—'],
    [0, '0 ms'],
    [0.41, '410 µs'],
    [1.2, '1.20 ms'],
    [12.34, '12.3 ms'],
    [250.4, '250 ms'],
    [1500, '1.50 s'],
    [0.0005, '500 ns'],
  ])('ms %s → %s', (v, want) => expect(fmtMs(v)).toBe(want));
  it('formats kernel latency units', () => {
    expect(fmtLatency(12, 'us')).toBe('12 µs');
    expect(fmtLatency(4500, 'us')).toBe('4.50 ms');
    expect(fmtLatency(800, 'ns')).toBe('800 ns');
    expect(fmtLatency(1500, 'ns')).toBe('2 µs');
    expect(fmtLatency(3, 'widgets')).toBe('3 widgets');
    expect(fmtLatency(null, 'us')).toBe('—');
  });
  it.each([
    [null, '—'],
    [0, '0%'],
    [0.000139, '0.014%'],
    [0.005, '0.50%'],
    [0.99, '99.0%'],
    [1e-7, '0.000010%'],
  ])('share %s → %s', (v, want) => expect(fmtShare(v)).toBe(want));
  it('formats counts, durations, times and the error bound', () => {
    expect(fmtNum(86400)).toBe('86,400');
    expect(fmtNum(1.7)).toBe('1.7');
    expect(fmtNum(0.00003)).toBe('0.00003');
    expect(fmtNum(null)).toBe('—');
    expect(fmtDuration(45)).toBe('45 s');
    expect(fmtDuration(120)).toBe('2 min');
    expect(fmtDuration(12000)).toBe('3 h 20 min');
    expect(fmtDuration(187200)).toBe('2 d 4 h');
    expect(fmtDuration(null)).toBe('—');
    expect(fmtUtc('2026-11-20T13:05:00Z')).toBe('2026-11-20 13:05 UTC');
    expect(fmtUtc(null)).toBe('—');
    expect(fmtErrorBound(0.0303)).toBe('±3.0%');
    expect(fmtErrorBound(null)).toBe('unknown');
  });
});

describe('change against the previous period', () => {
  it('is relative for values', () => {
    expect(change(1.2, 1.5)).toEqual({ direction: 'down', worse: false, text: '−20%', ratio: expect.closeTo(-0.2, 9) });
    expect(change(45, 40)).toMatchObject({ direction: 'up', worse: true, text: '+13%' });
    expect(change(1.08, 1)).toMatchObject({ text: '+8.0%' });
    expect(change(0.41, 0.4)).toMatchObject({ direction: 'up', text: '+2.5%' });
    expect(change(100, 100.1)).toMatchObject({ direction: 'same', text: 'no change', worse: false });
  });
  it('is in percentage points for shares', () => {
    expect(change(0.000139, 0.0001, 'share')).toMatchObject({ direction: 'up', worse: true, text: '+0.004 pp' });
    expect(change(0.02, 0.05, 'share')).toMatchObject({ direction: 'down', worse: false, text: '−3.0 pp' });
  });
  it('treats missing data as no data, never as a change from or to zero', () => {
    expect(change(null, 3)).toMatchObject({ direction: 'none', text: 'no data' });
    expect(change(3, null)).toMatchObject({ direction: 'none', text: 'no data before' });
    expect(change(3, undefined)).toMatchObject({ direction: 'none' });
    expect(change(5, 0)).toMatchObject({ direction: 'up', text: 'new', worse: true });
    expect(change(0, 0)).toMatchObject({ direction: 'same', text: 'no change' });
  });
  it('can treat higher as better', () => {
    expect(change(0.99, 0.95, 'share', false)).toMatchObject({ direction: 'up', worse: false });
  });
});

describe('gaps', () => {
  it('keeps null points and breaks the line where points are missing', () => {
    const s = acmeReport().ping.series[0];
    const a = alignSeries(s.points, ['p50_ms', 'p99_ms']);
    const h = (iso: string) => Date.parse(iso) / 1000;
    expect(a.xs).toEqual([h('2026-11-18T00:00:00Z'), h('2026-11-18T01:00:00Z'), h('2026-11-18T02:00:00Z'), h('2026-11-18T03:00:00Z'), h('2026-11-18T04:00:00Z'), h('2026-11-18T07:00:00Z')]);
    expect(a.ys[0]).toEqual([0.4, 0.42, null, 0.41, null, 0.39]);
    expect(a.ys[1]).toEqual([1.1, 1.3, null, 1.2, null, 1.0]);
    expect(gapShare(a)).toBeCloseTo(4 / 12);
  });
  it('sorts points, drops bad times and treats non-numbers as gaps', () => {
    const a = alignSeries(
      [
        { t: '2026-11-18T00:01:00Z', v: 2 as number | null },
        { t: 'garbage', v: 9 },
        { t: '2026-11-18T00:00:00Z', v: Number.NaN },
      ],
      ['v'],
    );
    expect(a.xs).toEqual([Date.parse('2026-11-18T00:00:00Z') / 1000, Date.parse('2026-11-18T00:01:00Z') / 1000]);
    expect(a.ys[0]).toEqual([null, 2]);
    expect(alignSeries([], ['v' as never])).toEqual({ xs: [], ys: [[]] });
    expect(gapShare({ xs: [], ys: [] })).toBe(1);
  });
  it('draws what the states do not cover as no data, never OK', () => {
    const [a1, a2] = acmeReport().availability;
    expect(availabilityBar(a1)).toEqual({ ok: 98, warn: 1, crit: 0.5, no_data: 0.5 });
    expect(availabilityBar(a2)).toEqual({ ok: 0, warn: 0, crit: 0, no_data: 100 });
    expect(availabilityBar({ ok: 0.5, warn: null, crit: null, no_data: null })).toEqual({ ok: 50, warn: 0, crit: 0, no_data: 50 });
  });
});

describe('objectives', () => {
  it('builds the ping objective the save form offers', () => {
    expect(pingObjective('')).toBeNull();
    expect(pingObjective(' 5 ')).toEqual({ name: 'ping p99 < 5 ms per hour', metric: 'ping', quantile: 0.99, below_ms: 5, per: 'hour' });
    expect(pingObjective('0.5', 0.9)).toMatchObject({ name: 'ping p90 < 0.5 ms per hour', quantile: 0.9, below_ms: 0.5 });
  });
  it.each(['0', '-1', 'abc', '1e9'])('refuses %s', (t) => {
    expect(pingObjective(t)).toHaveProperty('error');
  });
});

describe('charts of sparse data', () => {
  it('finds the points a line cannot draw', () => {
    expect(loneIndexes([null, 5, null, 1, 2, null, 3])).toEqual([1, 6]);
    expect(loneIndexes([7])).toEqual([0]);
    expect(loneIndexes([1, 2])).toEqual([]);
    expect(loneIndexes([null, null])).toEqual([]);
  });
  it("starts a young fleet's charts at its first data", () => {
    const r = acmeReport();
    expect(dataStart(r)).toBe(Date.parse('2026-11-18T00:00:00Z'));
    r.ping.series = [];
    r.kernel_latency = [];
    r.availability_timeline = [];
    expect(dataStart(r)).toBeNull();
    const from = Date.parse('2026-11-18T00:00:00Z');
    const to = from + 7 * DAY;
    expect(chartStart(from, to, null)).toBe(from);
    expect(chartStart(from, to, from + DAY)).toBe(from); // most of the period has data
    expect(chartStart(from, to, from + 6 * DAY)).toBe(from + 6 * DAY);
  });
  it("says when the data starts to the minute the collector gives, not the hour its first bucket starts", () => {
    const r = acmeReport();
    // The availability timeline's hour starts at 00:00; the first report came at 00:27.
    expect(dataStart({ ...r, data_from: '2026-11-18T00:27:00Z' })).toBe(Date.parse('2026-11-18T00:27:00Z'));
    expect(dataStart({ ...r, data_from: null })).toBeNull();
    // An older collector without the field: the first point, as before.
    expect(dataStart({ ...r, data_from: undefined })).toBe(Date.parse('2026-11-18T00:00:00Z'));
  });
  it("gives a root's OK share of the time it reported, and — when it reported nothing", () => {
    // 0.36% OK of a period 99.6% without data: OK all the time it reported.
    expect(rootHeadline({ ok: 0.0036, no_data: 0.9964 })).toEqual({ ok: expect.closeTo(1, 9), noData: 0.9964 });
    expect(rootHeadline({ ok: 0.99, no_data: 0 })).toEqual({ ok: 0.99, noData: null });
    // Nothing reported: no OK share at all, not 0%.
    const none = rootHeadline({ ok: 0, no_data: 1 });
    expect(none).toEqual({ ok: null, noData: 1 });
    expect(fmtShare(none.ok)).toBe('—');
  });
  it('weights the timeline by the part of each step in the period', () => {
    const from = Date.parse('2026-11-18T12:00:00Z');
    const to = Date.parse('2026-11-20T00:00:00Z');
    const s = timelineShare(
      {
        root: 'ping',
        step_seconds: 86400,
        points: [
          { t: '2026-11-18T00:00:00Z', ok: 1, warn: 0, crit: 0, no_data: 0 },
          { t: '2026-11-19T00:00:00Z', ok: 0.5, warn: 0, crit: 0, no_data: 0.5 },
        ],
      },
      from,
      to,
    );
    expect(s.ok).toBeCloseTo((0.5 * 1 + 1 * 0.5) / 1.5);
    expect(s.no_data).toBeCloseTo(0.5 / 1.5);
  });
  it('formats values in their unit', () => {
    expect(fmtValue(40.5, 'resets/s')).toBe('40.5 resets/s');
    expect(fmtValue(2.5, '%')).toBe('2.5%');
    expect(fmtValue(1.5, 'ms')).toBe('1.50 ms');
    expect(fmtValue(1500, 'us')).toBe('1.50 ms');
    expect(fmtValue(3, '')).toBe('3');
    expect(fmtValue(null, 'ms')).toBe('—');
  });
});
