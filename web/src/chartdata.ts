// Turns a series response into aligned columns for the chart.
import type { Series } from './api';

export interface Line {
  key: string;
  label: string;
  values: (number | null)[];
  secondary: boolean; // drawn thinner and dashed (max, percentiles other than the main one)
}

export interface ChartData {
  xs: number[]; // seconds (uPlot's time unit)
  lines: Line[];
  states: string[];
  stepS: number;
}

const num = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : null);

/** A point's percentile q (p50, p90, …, max): from its percentiles object, else a field of the point. */
function pct(p: Series['points'][number], q: string): number | null {
  // Indexed by name: a quantile the document does not list yet still draws.
  return num((p.percentiles as Record<string, unknown> | undefined)?.[q]) ?? num((p as Record<string, unknown>)[q]);
}

export function chartData(s: Series): ChartData {
  const stepS = Math.max(1, (s.step_ms || 1000) / 1000);
  const pts = [...(s.points ?? [])].sort((a, b) => Date.parse(a.t) - Date.parse(b.t));
  // Histograms: percentile lines (p50, p90, p99, …) and the max of the merged distribution.
  const qs = new Set<string>();
  for (const p of pts) {
    for (const k of Object.keys(p.percentiles ?? {})) if (/^p\d+(\.\d+)?$/.test(k)) qs.add(k);
    for (const k of Object.keys(p)) if (/^p\d+(\.\d+)?$/.test(k)) qs.add(k);
  }
  const pcts = [...qs].sort((a, b) => parseFloat(a.slice(1)) - parseFloat(b.slice(1)));
  const hasPctMax = pts.some((p) => num(p.percentiles?.max) !== null);
  const withPct = pcts.length > 0;

  const xs: number[] = [];
  const states: string[] = [];
  const cols: Record<string, (number | null)[]> = { value: [], max: [] };
  pcts.forEach((k) => (cols[k] = []));
  const pushGap = (t: number) => {
    xs.push(t);
    states.push('');
    Object.values(cols).forEach((c) => c.push(null));
  };
  for (const p of pts) {
    const t = Date.parse(p.t) / 1000;
    const prev = xs[xs.length - 1];
    if (xs.length && t - prev > stepS * 1.5) pushGap(prev + stepS); // missing reports: break the line
    xs.push(t);
    states.push(p.state ?? '');
    cols.value.push(num(p.value));
    cols.max.push(withPct && hasPctMax ? num(p.percentiles?.max) : num(p.max));
    pcts.forEach((k) => cols[k].push(pct(p, k)));
  }

  const lines: Line[] = [];
  if (withPct) {
    // The percentiles say more than the average of the headline value; keep it only
    // where no percentile was stored.
    pcts.forEach((k) => lines.push({ key: k, label: k, values: cols[k], secondary: false }));
    if (cols.max.some((v) => v !== null)) lines.push({ key: 'max', label: 'max', values: cols.max, secondary: true });
    if (pcts.every((k) => cols[k].every((v) => v === null))) lines.unshift({ key: 'value', label: 'headline', values: cols.value, secondary: false });
    return { xs, lines, states, stepS };
  }
  const main = s.kind === 'rate' ? 'per second' : s.kind === 'histogram' ? 'headline' : 'average';
  lines.push({ key: 'value', label: main, values: cols.value, secondary: false });
  if (s.kind !== 'rate' && cols.max.some((v) => v !== null)) lines.push({ key: 'max', label: 'max', values: cols.max, secondary: true });
  return { xs, lines, states, stepS };
}

export function summarize(d: ChartData): { min: number | null; max: number | null; last: number | null; raised: number } {
  const vals = d.lines[0]?.values.filter((v): v is number => v !== null) ?? [];
  return {
    min: vals.length ? Math.min(...vals) : null,
    max: vals.length ? Math.max(...vals) : null,
    last: vals.length ? vals[vals.length - 1] : null,
    raised: d.states.filter((s) => s === 'warn' || s === 'crit').length,
  };
}

/** The main value on a fixed grid over [from, to): one slot per step, null where nothing was stored. */
export function gridValues(s: Series, from: number, to: number): (number | null)[] {
  const step = s.step_ms || 1000;
  const n = Math.max(1, Math.min(5000, Math.ceil((to - from) / step)));
  const out: (number | null)[] = new Array(n).fill(null);
  for (const p of s.points ?? []) {
    const i = Math.floor((Date.parse(p.t) - from) / step);
    if (i >= 0 && i < n) out[i] = num(p.value);
  }
  return out;
}
