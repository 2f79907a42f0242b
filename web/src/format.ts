import type { Threshold } from './api';

// Numbers, units and times as operators read them.

const SI = [
  { v: 1e12, s: 'T' },
  { v: 1e9, s: 'G' },
  { v: 1e6, s: 'M' },
  { v: 1e3, s: 'k' },
];
const IEC = [
  { v: 2 ** 40, s: 'Ti' },
  { v: 2 ** 30, s: 'Gi' },
  { v: 2 ** 20, s: 'Mi' },
  { v: 2 ** 10, s: 'Ki' },
];

/** Up to three significant digits, no exponent for ordinary magnitudes. */
export function formatNumber(v: number): string {
  if (!Number.isFinite(v)) return String(v);
  if (v === 0) return '0';
  const a = Math.abs(v);
  if (a >= 100 || Number.isInteger(v)) return (Math.round(v * 10) / 10).toLocaleString('en-US', { maximumFractionDigits: a >= 100 ? 0 : 1 });
  if (a >= 10) return v.toFixed(1).replace(/\.0$/, '');
  if (a >= 0.01) return trimZeros(v.toFixed(a >= 1 ? 2 : 3));
  return v.toPrecision(2);
}

function trimZeros(s: string): string {
  return s.includes('.') ? s.replace(/0+$/, '').replace(/\.$/, '') : s;
}

const isBytes = (unit: string) => /^(bytes?|B)(\/s)?$/.test(unit);

/** Compact: 12.3k, 4.5M; bytes in binary multiples. */
export function formatCompact(v: number, unit = ''): string {
  const a = Math.abs(v);
  const table = isBytes(unit) ? IEC : SI;
  for (const { v: m, s } of table) {
    // 1,234 stays as it is; from 10k on, and for M and beyond, use the suffix.
    if (a >= (m === 1e3 ? 1e4 : m)) return `${formatNumber(v / m)}${s}`;
  }
  return formatNumber(v);
}

/** A yes/no gauge's unit, "1 = synced": the word for 1. */
const FLAG_UNIT = /^1 = (.+)$/;
/** How a flag's word reads in full. */
const FLAG_WORDS: Record<string, string> = { synced: 'synchronised' };

/** Whether a unit is a yes/no flag ("1 = synced"), whose values read as words. */
export const isFlagUnit = (unit: string): boolean => FLAG_UNIT.test(unit);

/** A value with its unit; null (no data) as an em dash. A flag reads "synchronised" / "not synchronised". */
export function formatValue(v: number | null | undefined, unit: string): string {
  if (v === null || v === undefined || Number.isNaN(v)) return '—';
  const flag = FLAG_UNIT.exec(unit);
  if (flag) {
    const word = FLAG_WORDS[flag[1]] ?? flag[1];
    return v >= 0.5 ? word : `not ${word}`;
  }
  const n = formatCompact(v, unit);
  if (!unit) return n;
  if (unit === '%') return `${n}%`;
  if (isBytes(unit)) {
    const rate = unit.endsWith('/s') ? '/s' : '';
    const m = IEC.find((x) => Math.abs(v) >= x.v);
    return m ? `${formatNumber(v / m.v)} ${m.s}B${rate}` : `${formatNumber(v)} B${rate}`;
  }
  return `${n} ${unit}`;
}

/** A time of day, with the date when it is not today. */
export function formatTime(iso: string | number | Date | null | undefined, now = new Date()): string {
  if (iso === null || iso === undefined || iso === '') return '—';
  const d = iso instanceof Date ? iso : new Date(iso);
  if (Number.isNaN(d.getTime())) return '—';
  const time = d.toLocaleTimeString('en-GB', { hour: '2-digit', minute: '2-digit', second: '2-digit' });
  if (d.toDateString() === now.toDateString()) return time;
  return `${d.toLocaleDateString('en-CA')} ${time}`;
}

/** "4s ago", "3 min ago", "2 h ago", "5 d ago". */
export function formatAgo(iso: string | null | undefined, now = Date.now()): string {
  if (!iso) return 'never';
  const t = new Date(iso).getTime();
  if (Number.isNaN(t)) return 'never';
  const s = Math.max(0, Math.round((now - t) / 1000));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} d ago`;
}

/** formatAgo for times that may lie ahead: "in 3 d", "in 5 min", or "2 h ago". */
export function formatRelative(iso: string | null | undefined, now = Date.now()): string {
  if (!iso) return 'never';
  const t = new Date(iso).getTime();
  if (Number.isNaN(t) || t <= now) return formatAgo(iso, now);
  return formatAgo(new Date(now - (t - now)).toISOString(), now).replace(/^(.*) ago$/, 'in $1');
}

/**
 * A window's length for a column header: "45 s", "11 min", "3 h", "2 d",
 * rounded to its largest unit (the exact span is in the title), never the
 * "670s" a Go duration would print.
 */
export function formatWindow(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds) || seconds <= 0) return '—';
  const s = Math.round(seconds);
  if (s < 120) return `${s} s`;
  if (s < 2 * 3600) return `${Math.round(s / 60)} min`;
  if (s < 2 * 86400) return `${Math.round(s / 3600)} h`;
  return `${Math.round(s / 86400)} d`;
}

export function formatDuration(ms: number): string {
  if (ms % 86400000 === 0) return `${ms / 86400000}d`;
  if (ms % 3600000 === 0) return `${ms / 3600000}h`;
  if (ms % 60000 === 0) return `${ms / 60000}m`;
  if (ms % 1000 === 0) return `${ms / 1000}s`;
  return `${ms}ms`;
}

/** Short form for a tree row: "> 1 · > 10" or "×5 · ×10 of baseline". */
export function thresholdShort(t: Threshold | null | undefined): string {
  if (!t) return '';
  const op = t.comparison === 'below' ? '<' : '>';
  if (t.baseline_intervals) return `${op} ×${formatNumber(t.warn)} · ×${formatNumber(t.crit)} base`;
  return `${op} ${formatNumber(t.warn)} · ${op} ${formatNumber(t.crit)}`;
}

/** Full sentence for titles and the metric view. */
export function thresholdLong(t: Threshold | null | undefined, unit: string): string {
  if (!t) return 'No threshold: this metric never changes state by itself.';
  const dir = t.comparison === 'below' ? 'below' : 'above';
  const hold = t.hold_intervals > 1 ? ` for ${t.hold_intervals} consecutive intervals` : '';
  if (t.baseline_intervals) {
    const floor = t.floor ? `, and never below ${formatNumber(t.floor)}` : '';
    return `WARN when ${dir} ${formatNumber(t.warn)}× and CRIT when ${dir} ${formatNumber(t.crit)}× its median over the last ${t.baseline_intervals} intervals${floor}${hold}.`;
  }
  return `WARN when ${dir} ${formatValue(t.warn, unit)}, CRIT when ${dir} ${formatValue(t.crit, unit)}${hold}.`;
}

/** A count for people: "2,999". */
export function formatCount(n: number): string {
  return n.toLocaleString('en-US');
}
