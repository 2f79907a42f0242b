// The pages' figures (issue 27): a series step no finer than the node's
// interval, tick labels each their own, lone points marked, windows that
// end no later than now, a window's length read as people write it, and
// empty shown as — everywhere.
import { describe, expect, it, vi } from 'vitest';

vi.mock('uplot', () => ({ default: class {} }));
import type { Series } from './api';
import { chartData } from './chartdata';
import { lonePoints, timeTicks } from './components/Chart';
import { formatValue, formatWindow } from './format';
import { fmtLatency, fmtMs, fmtNum, fmtShare, fmtValue } from './report';
import { clampToNow, parseDuration, stepFor } from './timerange';

const at = (iso: string) => Date.parse(iso);

describe('the series step', () => {
  it.each([
    // [span, node interval, points] → step: never finer than the interval
    ['an alert window of 11 min, a node every 10 s (was 5s: no line)', 11 * 60_000, 10_000, 240, '10s'],
    ['the same window, a node every second', 11 * 60_000, 1000, 240, '5s'],
    ['an hour, a node every 10 s', 3600_000, 10_000, 300, '15s'],
    ['a day, a node every 10 s', 86400_000, 10_000, 300, '300s'],
    ['a node every 15 s', 10 * 60_000, 15_000, 240, '15s'],
    ['a node every 7 s: the next nice step above it', 10 * 60_000, 7000, 240, '10s'],
  ])('%s', (_name, span, interval, points, want) => {
    const step = stepFor(span, points, interval);
    expect(step).toBe(want);
    expect(parseDuration(step)!).toBeGreaterThanOrEqual(interval);
  });

  it('joins a histogram reported every 10 s into a line at that step, not lone points', () => {
    const t0 = at('2026-11-28T06:00:00Z');
    const points = Array.from({ length: 12 }, (_, i) => ({ t: new Date(t0 + i * 10_000).toISOString(), value: 1, percentiles: { p50: 1 + i, p99: 2 + i }, state: 'ok' }));
    const series = (stepMs: number) => ({ node: 'n', metric: 'm', unit: 'ms', kind: 'histogram', from: new Date(t0).toISOString(), to: new Date(t0 + 120_000).toISOString(), step_ms: stepMs, points }) as unknown as Series;
    // At a 5 s step every report is followed by a missing one: each point stands alone.
    const fine = chartData(series(5000));
    expect(lonePoints(fine.lines[0].values)).toHaveLength(12);
    // At the node's 10 s: one line, no lone point.
    const right = chartData(series(10_000));
    expect(right.lines[0].values.every((v) => v !== null)).toBe(true);
    expect(lonePoints(right.lines[0].values)).toEqual([]);
  });
});

describe('lone points', () => {
  it('marks a value with no neighbour, and only those', () => {
    expect(lonePoints([null, 3, null, 4, 5, null, 6])).toEqual([1, 6]);
    expect(lonePoints([2])).toEqual([0]);
    expect(lonePoints([1, 2, 3])).toEqual([]);
    expect(lonePoints([null, undefined, null])).toEqual([]);
  });
});

describe('time ticks', () => {
  const unique = (xs: string[]) => new Set(xs).size === xs.length;
  const splits = (from: string, everyS: number, n: number) => Array.from({ length: n }, (_, i) => at(from) / 1000 + i * everyS);

  it('gives a 670 s alert window ticked every 30 s seconds, so no label repeats (was 06:10, 06:10, 06:11…)', () => {
    const s = splits('2026-11-28T06:10:00Z', 30, 22);
    const got = timeTicks(s, 670, 30);
    expect(unique(got)).toBe(true);
    expect(got[0]).toMatch(/^\d\d:\d\d:\d\d$/);
  });
  it('keeps minutes when the ticks are a minute or more apart', () => {
    const got = timeTicks(splits('2026-11-28T06:00:00Z', 300, 12), 3600, 300);
    expect(unique(got)).toBe(true);
    expect(got.every((l) => /^\d\d:\d\d$/.test(l))).toBe(true);
  });
  it('dates over days, and never two ticks of one day with one label', () => {
    const days = timeTicks(splits('2026-11-20T00:00:00Z', 86400, 7), 7 * 86400, 86400);
    expect(unique(days)).toBe(true);
    expect(days.every((l) => /^\d\d-\d\d$/.test(l))).toBe(true);
    // Twelve-hour ticks over a week: dates alone would repeat.
    const halves = timeTicks(splits('2026-11-20T00:00:00Z', 43200, 14), 7 * 86400, 43200);
    expect(unique(halves)).toBe(true);
  });
  it.each([
    ['15 min at 1 min', 60, 15, 900],
    ['5 min at 10 s', 10, 30, 300],
    ['2 h at 15 min', 900, 8, 7200],
    ['6 h at 1 h', 3600, 6, 6 * 3600],
    ['2 d at 6 h', 21600, 8, 2 * 86400],
  ])('%s: every label its own', (_name, every, n, span) => {
    expect(unique(timeTicks(splits('2026-11-28T05:00:00Z', every, n), span, every))).toBe(true);
  });
});

describe('windows end no later than now', () => {
  const now = at('2026-11-28T06:20:00.300Z');
  it('cuts a window that ends ahead at now (to the second above)', () => {
    expect(clampToNow({ from: at('2026-11-28T06:09:00Z'), to: at('2026-11-28T06:25:00Z') }, now)).toEqual({ from: at('2026-11-28T06:09:00Z'), to: at('2026-11-28T06:20:01Z') });
  });
  it('leaves a past window alone', () => {
    const w = { from: at('2026-11-28T05:00:00Z'), to: at('2026-11-28T06:00:00Z') };
    expect(clampToNow(w, now)).toEqual(w);
  });
  it('keeps a window at least a second long', () => {
    const w = clampToNow({ from: at('2026-11-28T06:30:00Z'), to: at('2026-11-28T06:40:00Z') }, now);
    expect(w.to - w.from).toBe(1000);
  });
});

describe('a window read as people write it', () => {
  it.each([
    [670, '11 min'],
    [300, '5 min'],
    [45, '45 s'],
    [90, '90 s'],
    [3600, '60 min'],
    [3 * 3600, '3 h'],
    [3 * 86400, '3 d'],
    [0, '—'],
    [null, '—'],
  ])('%s s → %s', (s, want) => expect(formatWindow(s)).toBe(want));
});

describe('empty is —, never 0 or a stray figure', () => {
  it.each([
    ['a value', () => formatValue(null, 'ms')],
    ['a value of NaN', () => formatValue(NaN, 'ms')],
    ['milliseconds', () => fmtMs(null)],
    ['a kernel latency', () => fmtLatency(undefined, 'us')],
    ['a share', () => fmtShare(null)],
    ['a count', () => fmtNum(null)],
    ['a report value', () => fmtValue(null, 'resets/s')],
  ])('%s', (_name, f) => expect(f()).toBe('—'));
  it('keeps a measured zero a zero', () => {
    expect(formatValue(0, 'resets/s')).toBe('0 resets/s');
    expect(fmtShare(0)).toBe('0%');
  });
});
