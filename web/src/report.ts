// The reports page's logic, kept out of the components so it can be tested:
// period presets → from/to, the page's URL ⇄ the report query, the API links
// (JSON, CSV, a saved definition), formatting, change against the previous
// period, and series with their gaps kept as gaps.
import type { Selector } from './access';
import type { AvailabilityRoot, Num, Objective, Report, ReportPeriodName } from './reporttypes';

export const PERIODS: { value: ReportPeriodName; label: string }[] = [
  { value: '1d', label: 'Last 24 hours' },
  { value: '7d', label: 'Last 7 days' },
  { value: '30d', label: 'Last 30 days' },
  { value: 'this_week', label: 'This week' },
  { value: 'last_week', label: 'Last week' },
  { value: 'this_month', label: 'This month' },
  { value: 'last_month', label: 'Last month' },
  { value: 'custom', label: 'Custom' },
];

const PERIOD_NAMES = new Set<string>(PERIODS.map((p) => p.value));

/**
 * A calendar period in UTC as of now, as the collector reads a saved one
 * (report.Calendar): weeks start on Monday; this week and this month end now,
 * last week and last month are whole.
 */
export function calendarRange(name: ReportPeriodName, now: number): { from: number; to: number } | null {
  const d = new Date(now);
  const today = Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate());
  const monday = today - ((d.getUTCDay() + 6) % 7) * DAY;
  const month = Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1);
  switch (name) {
    case 'this_week':
      return { from: monday, to: now };
    case 'last_week':
      return { from: monday - 7 * DAY, to: monday };
    case 'this_month':
      return { from: month, to: now };
    case 'last_month':
      return { from: Date.UTC(d.getUTCFullYear(), d.getUTCMonth() - 1, 1), to: month };
  }
  return null;
}

const DAY = 86_400_000;
/** The collector's limit on a report's period (the contract's 400 days). */
export const MAX_PERIOD_DAYS = 400;
/** Targets a query may name; the UI refuses more rather than send a URL the collector would. */
export const MAX_TARGETS = 50;

/** What the page asks for: the selector (label → value), the period, targets. */
export interface ReportQuery {
  selector: Selector;
  period: ReportPeriodName;
  /** Custom period bounds as YYYY-MM-DD (UTC days, to inclusive); ignored for presets. */
  from?: string;
  to?: string;
  targets: string[];
}

export type Range = { from: number; to: number } | { error: string };

const DATE = /^(\d{4})-(\d{2})-(\d{2})$/;

function utcDay(s: string | undefined): number | null {
  const m = s ? DATE.exec(s) : null;
  if (!m) return null;
  const t = Date.UTC(Number(m[1]), Number(m[2]) - 1, Number(m[3]));
  const d = new Date(t);
  // 2026-02-31 parses to March: refuse it rather than guess.
  if (d.getUTCFullYear() !== Number(m[1]) || d.getUTCMonth() !== Number(m[2]) - 1 || d.getUTCDate() !== Number(m[3])) return null;
  return t;
}

/**
 * The period as from/to in Unix ms. Presets end now; a custom period runs
 * from the start of its first UTC day to the end of its last, cut at now
 * (the collector refuses a `to` in the future).
 */
export function periodRange(q: Pick<ReportQuery, 'period' | 'from' | 'to'>, now: number): Range {
  switch (q.period) {
    case '1d':
      return { from: now - DAY, to: now };
    case '7d':
      return { from: now - 7 * DAY, to: now };
    case '30d':
      return { from: now - 30 * DAY, to: now };
  }
  const cal = calendarRange(q.period, now);
  if (cal) return cal.from < cal.to ? cal : { error: 'This period has only just started; choose another.' };
  const f = utcDay(q.from);
  const t = utcDay(q.to);
  if (f === null) return { error: 'Give the first day of the period as YYYY-MM-DD.' };
  if (t === null) return { error: 'Give the last day of the period as YYYY-MM-DD.' };
  if (t < f) return { error: 'The last day comes before the first.' };
  if (f >= now) return { error: 'The period starts in the future.' };
  const to = Math.min(t + DAY, now);
  if (to - f > MAX_PERIOD_DAYS * DAY) return { error: `A report covers at most ${MAX_PERIOD_DAYS} days.` };
  return { from: f, to };
}

/** The previous period of the same length, ending where this one starts. */
export function previousRange(r: { from: number; to: number }): { from: number; to: number } {
  return { from: r.from - (r.to - r.from), to: r.from };
}

/** "customer=acme,env=prod" → {customer: "acme", env: "prod"}; a malformed pair is an error. */
export function parseSelector(text: string): Selector | { error: string } {
  const sel: Selector = {};
  for (const part of text.split(',')) {
    const p = part.trim();
    if (!p) continue;
    const i = p.indexOf('=');
    if (i <= 0 || i === p.length - 1) return { error: `"${p}" is not label=value.` };
    const k = p.slice(0, i).trim();
    const v = p.slice(i + 1).trim();
    if (!/^[A-Za-z0-9_.\-/]{1,63}$/.test(k)) return { error: `"${k}" is not a label name.` };
    if (k in sel && sel[k] !== v) return { error: `The label ${k} is given twice.` };
    sel[k] = v;
  }
  return sel;
}

/** The selector as the collector's query parameter and the page's URL take it, keys sorted. */
export function selectorString(sel: Selector | null | undefined): string {
  if (!sel) return '';
  return Object.keys(sel)
    .sort()
    .map((k) => `${k}=${sel[k]}`)
    .join(',');
}

/**
 * The selector a customer may ask for: their own scope, with anything they
 * add on other labels (the collector ANDs the two; a customer cannot widen or
 * change its own labels, so the UI does not offer it).
 */
export function scopedSelector(asked: Selector, scope: Selector | null | undefined): Selector {
  if (!scope || Object.keys(scope).length === 0) return asked;
  return { ...asked, ...scope };
}

export function parseTargets(text: string | null | undefined): string[] {
  const seen = new Set<string>();
  for (const t of (text ?? '').split(',')) {
    const s = t.trim();
    if (s) seen.add(s);
  }
  return [...seen];
}

/** The page's URL parameters → the query. */
export function queryFromParams(p: URLSearchParams): ReportQuery {
  const per = p.get('period');
  const period: ReportPeriodName = per && PERIOD_NAMES.has(per) ? (per as ReportPeriodName) : '7d';
  const sel = parseSelector(p.get('selector') ?? '');
  return {
    selector: 'error' in sel ? {} : (sel as Selector),
    period,
    from: period === 'custom' ? (p.get('from') ?? undefined) : undefined,
    to: period === 'custom' ? (p.get('to') ?? undefined) : undefined,
    targets: parseTargets(p.get('targets')),
  };
}

/** The query → the page's URL parameters (what a shared /reports?… link holds). */
export function paramsFromQuery(q: ReportQuery): URLSearchParams {
  const p = new URLSearchParams();
  const s = selectorString(q.selector);
  if (s) p.set('selector', s);
  p.set('period', q.period);
  if (q.period === 'custom') {
    if (q.from) p.set('from', q.from);
    if (q.to) p.set('to', q.to);
  }
  if (q.targets.length) p.set('targets', q.targets.join(','));
  return p;
}

export type ReportFormat = 'json' | 'csv';

/** GET /api/v1/reports for a query over a range, in a format. */
export function reportUrl(q: { selector: Selector; targets: string[] }, r: { from: number; to: number }, format: ReportFormat = 'json'): string {
  const p = new URLSearchParams();
  const s = selectorString(q.selector);
  if (s) p.set('selector', s);
  p.set('from', String(Math.round(r.from)));
  p.set('to', String(Math.round(r.to)));
  if (q.targets.length) p.set('targets', q.targets.join(','));
  p.set('format', format);
  return `/api/v1/reports?${p}`;
}

/** GET /api/v1/reports?definition={id}: a saved report for its period ending now. */
export function definitionReportUrl(id: number, format: ReportFormat = 'json'): string {
  return `/api/v1/reports?${new URLSearchParams({ definition: String(id), format })}`;
}

export const reportsHref = (q?: ReportQuery) => {
  const s = q ? paramsFromQuery(q).toString() : '';
  return s ? `/reports?${s}` : '/reports';
};
export const reportDefinitionHref = (id: number) => `/reports/${encodeURIComponent(String(id))}`;

// ---- numbers ----

const nil = (v: Num | undefined): v is null | undefined => v === null || v === undefined || Number.isNaN(v);

/** Milliseconds with sensible precision; null (no data) as an em dash. */
export function fmtMs(v: Num | undefined): string {
  if (nil(v)) return '—';
  if (v === 0) return '0 ms';
  const a = Math.abs(v);
  if (a >= 1000) return `${(v / 1000).toFixed(a >= 10_000 ? 1 : 2)} s`;
  if (a >= 100) return `${Math.round(v)} ms`;
  if (a >= 10) return `${v.toFixed(1)} ms`;
  if (a >= 1) return `${v.toFixed(2)} ms`;
  if (a >= 0.001) return `${Math.round(v * 1000)} µs`;
  return `${(v * 1e6).toFixed(0)} ns`;
}

/** A value in a kernel latency unit (us, ns, ms). */
export function fmtLatency(v: Num | undefined, unit: string): string {
  if (nil(v)) return '—';
  const ms = unit === 'us' || unit === 'µs' ? v / 1000 : unit === 'ns' ? v / 1e6 : unit === 's' ? v * 1000 : unit === 'ms' ? v : null;
  return ms === null ? `${fmtNum(v)} ${unit}` : fmtMs(ms);
}

/**
 * A metric's value in its unit, as the tree shows it: latencies scaled like
 * fmtLatency, shares and rates with their unit after the number.
 */
export function fmtValue(v: Num | undefined, unit: string | null | undefined): string {
  if (nil(v)) return '—';
  const u = (unit ?? '').trim();
  if (u === 'ms' || u === 'us' || u === 'µs' || u === 'ns' || u === 's') return fmtLatency(v, u);
  if (u === '%') return `${fmtNum(v)}%`;
  return u ? `${fmtNum(v)} ${u}` : fmtNum(v);
}

/** A share (0…1) as a percentage with the digits that matter for small losses. */
export function fmtShare(v: Num | undefined): string {
  if (nil(v)) return '—';
  if (v === 0) return '0%';
  const p = v * 100;
  const a = Math.abs(p);
  if (a >= 10) return `${p.toFixed(1)}%`;
  if (a >= 0.1) return `${p.toFixed(2)}%`;
  if (a >= 0.001) return `${p.toFixed(3)}%`;
  return `${p.toPrecision(2)}%`;
}

/** Counts and rates: thousands separated, up to three significant digits below 100. */
export function fmtNum(v: Num | undefined): string {
  if (nil(v)) return '—';
  if (v === 0) return '0';
  const a = Math.abs(v);
  if (a >= 100 || Number.isInteger(v)) return Math.round(v).toLocaleString('en-US');
  if (a >= 1) return String(Number(v.toFixed(2)));
  return String(Number(v.toPrecision(2)));
}

/** A span's length: 45 s, 12 min, 3 h 20 min, 2 d 4 h. */
export function fmtDuration(seconds: Num | undefined): string {
  if (nil(seconds)) return '—';
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min${s % 60 ? ` ${s % 60} s` : ''}`;
  if (s < 86400) {
    const m = Math.floor((s % 3600) / 60);
    return `${Math.floor(s / 3600)} h${m ? ` ${m} min` : ''}`;
  }
  const h = Math.floor((s % 86400) / 3600);
  return `${Math.floor(s / 86400)} d${h ? ` ${h} h` : ''}`;
}

/** A time as UTC, to the minute: 2026-11-20 13:05 UTC. */
export function fmtUtc(t: string | number | null | undefined): string {
  if (t === null || t === undefined || t === '') return '—';
  const ms = typeof t === 'number' ? t : Date.parse(t);
  if (!Number.isFinite(ms)) return String(t);
  return `${new Date(ms).toISOString().slice(0, 16).replace('T', ' ')} UTC`;
}

/** The percentile error bound as the page states it: "±3.0%". */
export function fmtErrorBound(v: Num | undefined): string {
  if (nil(v)) return 'unknown';
  return `±${(v * 100).toFixed(1)}%`;
}

// ---- change against the previous period ----

export type Direction = 'up' | 'down' | 'same' | 'none';

export interface Change {
  /** up/down/same; none when either side has no data. */
  direction: Direction;
  /** Whether the change is for the worse (for these metrics: higher is worse). */
  worse: boolean;
  /** What the page shows: "+12%", "−0.3 pp", "new", "no data before". */
  text: string;
  /** Relative change (cur/prev − 1), null when it has no meaning. */
  ratio: number | null;
}

/**
 * The change of a headline number against the previous period. Shares
 * (losses) change in percentage points; everything else relatively. A value
 * with no data on either side is no change at all, not a 100% one.
 */
export function change(cur: Num | undefined, prev: Num | undefined, kind: 'relative' | 'share' = 'relative', higherIsWorse = true): Change {
  if (nil(cur)) return { direction: 'none', worse: false, text: 'no data', ratio: null };
  if (nil(prev)) return { direction: 'none', worse: false, text: 'no data before', ratio: null };
  const minus = '−';
  if (kind === 'share') {
    const pp = (cur - prev) * 100;
    const dir: Direction = Math.abs(pp) < 0.0005 ? 'same' : pp > 0 ? 'up' : 'down';
    const mag = Math.abs(pp);
    const num = mag >= 1 ? mag.toFixed(1) : mag >= 0.01 ? mag.toFixed(2) : mag.toPrecision(1);
    const text = dir === 'same' ? 'no change' : `${dir === 'up' ? '+' : minus}${num} pp`;
    return { direction: dir, worse: dir === (higherIsWorse ? 'up' : 'down'), text, ratio: prev === 0 ? null : cur / prev - 1 };
  }
  if (prev === 0) {
    if (cur === 0) return { direction: 'same', worse: false, text: 'no change', ratio: 0 };
    return { direction: cur > 0 ? 'up' : 'down', worse: (cur > 0) === higherIsWorse, text: 'new', ratio: null };
  }
  const ratio = cur / prev - 1;
  const pct = Math.abs(ratio * 100);
  const dir: Direction = pct < 0.5 ? 'same' : ratio > 0 ? 'up' : 'down';
  const text = dir === 'same' ? 'no change' : `${dir === 'up' ? '+' : minus}${pct >= 10 ? Math.round(pct) : pct.toFixed(1)}%`;
  return { direction: dir, worse: dir === (higherIsWorse ? 'up' : 'down'), text, ratio };
}

// ---- series with gaps ----

export interface Aligned {
  /** Unix seconds. */
  xs: number[];
  /** One array per key, null where there is no data. */
  ys: (number | null)[][];
}

/**
 * Points → uPlot's aligned data, keeping gaps: a null value stays null, and
 * where two points are further apart than 1.5× the usual step (a stretch with
 * no points at all) a null is inserted so the line breaks instead of joining
 * across the missing time. Points out of order are sorted; bad times dropped.
 */
export function alignSeries<P extends { t: string }>(points: readonly P[], keys: readonly (keyof P)[]): Aligned {
  const rows = points
    .map((p) => ({ x: Date.parse(p.t) / 1000, p }))
    .filter((r) => Number.isFinite(r.x))
    .sort((a, b) => a.x - b.x);
  const steps: number[] = [];
  for (let i = 1; i < rows.length; i++) steps.push(rows[i].x - rows[i - 1].x);
  const sorted = [...steps].sort((a, b) => a - b);
  const step = sorted.length ? sorted[Math.floor(sorted.length / 2)] : 0;
  const xs: number[] = [];
  const ys: (number | null)[][] = keys.map(() => []);
  rows.forEach((r, i) => {
    if (i > 0 && step > 0 && r.x - rows[i - 1].x > step * 1.5) {
      xs.push(rows[i - 1].x + step);
      ys.forEach((y) => y.push(null));
    }
    xs.push(r.x);
    keys.forEach((k, j) => {
      const v = r.p[k] as unknown;
      ys[j].push(typeof v === 'number' && Number.isFinite(v) ? v : null);
    });
  });
  return { xs, ys };
}

/** How much of a series has no data: the share of null values over all its keys. */
export function gapShare(a: Aligned): number {
  let n = 0;
  let gaps = 0;
  for (const y of a.ys)
    for (const v of y) {
      n++;
      if (v === null) gaps++;
    }
  return n ? gaps / n : 1;
}

/** Availability shares as widths that add up to 100; missing shares count as no data. */
export function availabilityBar(a: { ok: Num; warn: Num; crit: Num; no_data: Num }): { ok: number; warn: number; crit: number; no_data: number } {
  const v = (x: Num) => (nil(x) || x < 0 ? 0 : x);
  const ok = v(a.ok);
  const warn = v(a.warn);
  const crit = v(a.crit);
  const known = ok + warn + crit;
  // Whatever the states do not cover is time without data, never OK.
  const no_data = Math.max(v(a.no_data), 1 - known, 0);
  const sum = known + no_data || 1;
  const pct = (x: number) => Math.round((x / sum) * 1000) / 10;
  return { ok: pct(ok), warn: pct(warn), crit: pct(crit), no_data: pct(no_data) };
}

/**
 * The objective the save form offers: "ping p99 < N ms per hour". Empty text
 * is no objective; anything but a positive number up to a minute is an error.
 */
export function pingObjective(text: string, quantile = 0.99): Objective | null | { error: string } {
  const t = text.trim();
  if (!t) return null;
  const ms = Number(t);
  if (!Number.isFinite(ms) || ms <= 0 || ms > 60_000) return { error: 'The objective is a delay in ms, above 0 and at most 60000.' };
  const q = `p${Math.round(quantile * 100)}`;
  return { name: `ping ${q} < ${ms} ms per hour`, metric: 'ping', quantile, below_ms: ms, per: 'hour' };
}

/**
 * The indexes of points with a value and none on either side: a line
 * cannot draw them, so the chart marks them as dots (a minute with 809
 * observations and nothing around it is data, not a blank).
 */
export function loneIndexes(ys: readonly (number | null)[]): number[] {
  const out: number[] = [];
  for (let i = 0; i < ys.length; i++) {
    if (ys[i] === null) continue;
    if ((i === 0 || ys[i - 1] === null) && (i === ys.length - 1 || ys[i + 1] === null)) out.push(i);
  }
  return out;
}

/** Whether an aligned series has any value at all. */
export const hasData = (a: Aligned) => a.ys.some((y) => y.some((v) => v !== null));

/**
 * When the data of a report starts: the first point with a value in any
 * chart or availability step, or null when there is none. A young fleet's
 * week is mostly before it, and its charts start there instead of drawing
 * days of nothing.
 */
export function dataStart(r: Pick<Report, 'ping' | 'kernel_latency' | 'availability_timeline' | 'data_from'>): number | null {
  // The collector's own answer is to the minute; the points below only to
  // their step (an hour for the availability timeline).
  if (r.data_from !== undefined) {
    const t = r.data_from === null ? NaN : Date.parse(r.data_from);
    return Number.isFinite(t) ? t : null;
  }
  return pointsStart(r);
}

/** The first point with a value in any chart or availability step: where the charts' first bucket starts. */
export function pointsStart(r: Pick<Report, 'ping' | 'kernel_latency' | 'availability_timeline'>): number | null {
  let first = Infinity;
  const see = (t: string, v: boolean) => {
    const ms = Date.parse(t);
    if (v && Number.isFinite(ms) && ms < first) first = ms;
  };
  for (const s of r.ping?.series ?? []) for (const p of s.points) see(p.t, p.p50_ms !== null || p.loss !== null);
  for (const k of r.kernel_latency ?? []) for (const p of k.series ?? []) see(p.t, p.p50 !== null);
  for (const a of r.availability_timeline ?? []) for (const p of a.points) see(p.t, p.no_data < 1);
  return Number.isFinite(first) ? first : null;
}

/**
 * Where a report's charts start: the period's start, or the data's when it
 * covers less than half of the period (the rest is said in words).
 */
export function chartStart(from: number, to: number, start: number | null): number {
  if (start === null || start <= from) return from;
  return start - from > (to - from) / 2 ? start : from;
}

/** A share over a timeline: node-time OK etc. over all its steps, weighted by step length within the period. */
export function timelineShare(a: AvailabilityRoot, from: number, to: number): { ok: number; warn: number; crit: number; no_data: number } {
  const tot = { ok: 0, warn: 0, crit: 0, no_data: 0 };
  let w = 0;
  for (const p of a.points) {
    const t0 = Date.parse(p.t);
    const len = Math.max(0, Math.min(t0 + a.step_seconds * 1000, to) - Math.max(t0, from));
    w += len;
    tot.ok += p.ok * len;
    tot.warn += p.warn * len;
    tot.crit += p.crit * len;
    tot.no_data += p.no_data * len;
  }
  if (!w) return { ok: 0, warn: 0, crit: 0, no_data: 1 };
  return { ok: tot.ok / w, warn: tot.warn / w, crit: tot.crit / w, no_data: tot.no_data / w };
}

/**
 * A root's headline over the period: how much of the time it reported it
 * was OK, and how much of the period had no data. A root that reported
 * nothing has no OK share at all (null, shown as —), never 0% or the
 * period's share; one with no gap has no no-data figure (null).
 */
export function rootHeadline(s: { ok: number; no_data: number }): { ok: Num; noData: Num } {
  const reported = 1 - s.no_data;
  return {
    ok: reported > 1e-9 ? Math.min(1, s.ok / reported) : null,
    noData: s.no_data > 1e-9 ? s.no_data : null,
  };
}
