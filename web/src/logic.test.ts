import { describe, expect, it } from 'vitest';
import type { Series } from './api';
import { chartData, gridValues } from './chartdata';
import { yMax } from './components/Chart';
import { resetTree } from './fixtures';
import { formatAgo, formatValue, thresholdLong, thresholdShort } from './format';
import { parseRoute, withParams } from './route';
import { parseDuration, rangeFromParams, rangeToParams, stepFor } from './timerange';
import { ancestors, defaultOpen, explaining, findNode, visibleRows } from './tree';

describe('format', () => {
  it('formats values with units', () => {
    expect(formatValue(null, 'resets/s')).toBe('—');
    expect(formatValue(0, 'resets/s')).toBe('0 resets/s');
    expect(formatValue(7.5, 'resets/s')).toBe('7.5 resets/s');
    expect(formatValue(0.0123, 'ms')).toBe('0.012 ms');
    expect(formatValue(12345, 'pkts/s')).toBe('12.3k pkts/s');
    expect(formatValue(2048, 'bytes')).toBe('2 KiB');
    expect(formatValue(12.5, '%')).toBe('12.5%');
    expect(formatValue(3, '')).toBe('3');
    expect(formatValue(1234, 'pkts/s')).toBe('1,234 pkts/s');
    expect(formatValue(1_318_000, 'packets')).toBe('1.32M packets');
    expect(formatValue(2.5e9, '')).toBe('2.5G');
  });
  it('describes thresholds', () => {
    const t = { warn: 1, crit: 10, comparison: 'above' as const, hold_intervals: 3 };
    expect(thresholdShort(t)).toBe('> 1 · > 10');
    expect(thresholdLong(t, 'resets/s')).toBe('WARN when above 1 resets/s, CRIT when above 10 resets/s for 3 consecutive intervals.');
    expect(thresholdShort({ ...t, comparison: 'below', baseline_intervals: 30 })).toBe('< ×1 · ×10 base');
    expect(thresholdLong(null, '')).toMatch(/No threshold/);
  });
  it('says how long ago', () => {
    const now = Date.parse('2026-01-01T00:10:00Z');
    expect(formatAgo('2026-01-01T00:09:55Z', now)).toBe('5s ago');
    expect(formatAgo('2026-01-01T00:00:00Z', now)).toBe('10 min ago');
    expect(formatAgo(null, now)).toBe('never');
  });
});

describe('time range', () => {
  it('parses durations and URL parameters', () => {
    expect(parseDuration('15m')).toBe(900000);
    expect(parseDuration('7d')).toBe(7 * 86400000);
    expect(parseDuration('x')).toBeNull();
    expect(rangeFromParams(new URLSearchParams(''))).toMatchObject({ kind: 'relative', last: '1h' });
    expect(rangeFromParams(new URLSearchParams('range=6h'))).toMatchObject({ kind: 'relative', ms: 6 * 3600000 });
    expect(rangeFromParams(new URLSearchParams('range=bogus'))).toMatchObject({ last: '1h' });
    const abs = rangeFromParams(new URLSearchParams('from=2026-01-01T00:00:00Z&to=1767229200000'));
    expect(abs).toEqual({ kind: 'absolute', from: Date.parse('2026-01-01T00:00:00Z'), to: 1767229200000 });
    expect(rangeToParams(abs)).toEqual({ range: null, from: '2026-01-01T00:00:00.000Z', to: '2026-01-01T01:00:00.000Z' });
    expect(rangeToParams({ kind: 'relative', last: '1h', ms: 3600000 }).range).toBeNull();
  });
  it('picks a step that is never finer than the interval', () => {
    expect(stepFor(3600000, 300, 10000)).toBe('15s');
    expect(stepFor(3600000, 300, 60000)).toBe('60s');
    expect(stepFor(30 * 86400000, 300, 10000)).toBe('10800s');
  });
});

describe('routes', () => {
  it('parses paths', () => {
    expect(parseRoute('/', '').page).toBe('fleet');
    const r = parseRoute('/nodes/web%2D1', '?metric=tcp_reset%2Fsent');
    expect(r).toMatchObject({ page: 'node', node: 'web-1' });
    expect(r.params.get('metric')).toBe('tcp_reset/sent');
    expect(parseRoute('/nope/x', '').page).toBe('notfound');
  });
  it('changes parameters', () => {
    const p = withParams(new URLSearchParams('a=1&open=x'), { a: null, open: ['y', 'z'], b: '2' });
    expect(p.toString()).toBe('open=y&open=z&b=2');
  });
});

describe('tree', () => {
  const roots = resetTree();
  it('opens raised branches down to the deepest raised child', () => {
    expect([...defaultOpen(roots)].sort()).toEqual(['tcp_reset', 'tcp_reset/received', 'tcp_reset/sent']);
  });
  it('finds the metric that explains the worst root', () => {
    expect(explaining(roots)?.id).toBe('tcp_reset/sent/no_socket');
    expect(explaining([roots[1]])).toBeNull();
  });
  it('lists the visible rows', () => {
    const open = defaultOpen(roots);
    const rows = visibleRows(roots, (id) => open.has(id));
    expect(rows.map((r) => `${r.level}:${r.node.id}`)).toEqual([
      '1:tcp_reset',
      '2:tcp_reset/received',
      '3:tcp_reset/received/established',
      '3:tcp_reset/received/syn_sent',
      '2:tcp_reset/sent',
      '3:tcp_reset/sent/no_socket',
      '3:tcp_reset/sent/tcp_state',
      '1:latency',
    ]);
    expect(rows[7]).toMatchObject({ open: false, hasChildren: true, posinset: 2, setsize: 2 });
    expect(findNode(roots, 'latency/rto')?.title).toBe('rto');
    expect(ancestors('a/b/c')).toEqual(['a', 'a/b']);
  });
});

describe('recent window', () => {
  it('guides to a burst that ended within the window', () => {
    const roots = resetTree();
    // Now everything is OK again, but tcp_state was CRIT within the window.
    const calm = JSON.parse(JSON.stringify(roots).replace(/"(state|own_state)":"(warn|crit)"/g, '"$1":"ok"')) as typeof roots;
    const sent = findNode(calm, 'tcp_reset/sent')!;
    sent.recent_state = 'crit';
    calm[0].recent_state = 'crit';
    const child = findNode(calm, 'tcp_reset/sent/tcp_state')!;
    child.recent_state = 'crit';
    child.recent_count = 40;
    expect([...defaultOpen(calm)].sort()).toEqual(['tcp_reset', 'tcp_reset/sent']);
    expect(explaining(calm)?.id).toBe('tcp_reset/sent/tcp_state');
    // A current CRIT beats a recent one.
    expect(explaining(roots)?.id).toBe('tcp_reset/sent/no_socket');
  });
});

describe('chart scale', () => {
  const t = { warn: 1, crit: 10, comparison: 'above' as const, hold_intervals: 1 };
  it('shows threshold levels within reach of the data', () => {
    expect(yMax(25, t)).toBeCloseTo(27);
    expect(yMax(5, t)).toBeCloseTo(10.8);
    expect(yMax(0, t)).toBeCloseTo(1.08);
    expect(yMax(0, { ...t, warn: 1000, crit: 5000 })).toBeCloseTo(1080);
    expect(yMax(25, { ...t, warn: 1000, crit: 5000 })).toBeCloseTo(27);
    expect(yMax(3, null)).toBeCloseTo(3.24);
  });
});

describe('chart data', () => {
  const s: Series = {
    node: 'n',
    metric: 'm',
    unit: 'ms',
    kind: 'histogram',
    from: '2026-01-01T00:00:00Z',
    to: '2026-01-01T00:01:00Z',
    step_ms: 10000,
    points: [
      { t: '2026-01-01T00:00:00Z', value: 1, max: 4, state: 'ok', percentiles: { p50: 0.5, p90: 1, p99: 3, max: 6, samples: 10 } },
      { t: '2026-01-01T00:00:10Z', value: 2, max: 5, state: 'warn', percentiles: { p50: 0.6, p90: 2, p99: 4, max: 7, samples: 12 } },
      { t: '2026-01-01T00:00:40Z', value: null, state: 'ok' },
    ],
  };
  it('shows histogram percentiles over time, breaking lines at missing reports', () => {
    const d = chartData(s);
    expect(d.xs).toEqual([1767225600, 1767225610, 1767225620, 1767225640]);
    expect(d.lines.map((l) => l.key)).toEqual(['p50', 'p90', 'p99', 'max']);
    expect(d.lines[2].values).toEqual([3, 4, null, null]);
    expect(d.lines[3].values).toEqual([6, 7, null, null]);
    expect(d.states).toEqual(['ok', 'warn', '', 'ok']);
  });
  it('shows a gauge as its average and max, a rate as per second', () => {
    const g = chartData({ ...s, kind: 'gauge', points: s.points.map(({ percentiles: _p, ...p }) => p) });
    expect(g.lines.map((l) => `${l.key}:${l.label}`)).toEqual(['value:average', 'max:max']);
    const r = chartData({ ...s, kind: 'rate', points: s.points.map(({ percentiles: _p, max: _m, ...p }) => p) });
    expect(r.lines.map((l) => l.label)).toEqual(['per second']);
  });
  it('lays values on the range grid', () => {
    expect(gridValues(s, Date.parse(s.from), Date.parse(s.to))).toEqual([1, 2, null, null, null, null]);
  });
});
