// The time range of a view: a relative "last 1h" that follows now, or an
// absolute from–to. Both live in the URL (range=1h, or from=…&to=…).

export const PRESETS = ['15m', '1h', '6h', '24h', '7d', '30d'] as const;
export const DEFAULT_RANGE = '1h';

export type TimeRange = { kind: 'relative'; last: string; ms: number } | { kind: 'absolute'; from: number; to: number };

const UNITS: Record<string, number> = { s: 1000, m: 60000, h: 3600000, d: 86400000, w: 604800000 };

/** Parses 90s, 15m, 6h, 7d, 2w; null when it is not such a duration. */
export function parseDuration(s: string): number | null {
  const m = /^(\d+(?:\.\d+)?)([smhdw])$/.exec(s.trim());
  if (!m) return null;
  const ms = parseFloat(m[1]) * UNITS[m[2]];
  return ms > 0 ? ms : null;
}

/** Parses Unix milliseconds or an ISO/RFC 3339 time. */
export function parseInstant(s: string | null): number | null {
  if (!s) return null;
  if (/^\d{10,}$/.test(s)) return Number(s);
  const t = Date.parse(s);
  return Number.isNaN(t) ? null : t;
}

export function rangeFromParams(p: URLSearchParams): TimeRange {
  const from = parseInstant(p.get('from'));
  const to = parseInstant(p.get('to'));
  if (from !== null && to !== null && from < to) return { kind: 'absolute', from, to };
  const last = p.get('range') ?? DEFAULT_RANGE;
  const ms = parseDuration(last);
  if (ms !== null) return { kind: 'relative', last, ms };
  return { kind: 'relative', last: DEFAULT_RANGE, ms: parseDuration(DEFAULT_RANGE)! };
}

/** The URL parameters for a range: range=… or from=…&to=… (ISO, readable in links). */
export function rangeToParams(r: TimeRange): Record<string, string | null> {
  if (r.kind === 'relative') return { range: r.last === DEFAULT_RANGE ? null : r.last, from: null, to: null };
  return { range: null, from: new Date(r.from).toISOString(), to: new Date(r.to).toISOString() };
}

export function resolveRange(r: TimeRange, now = Date.now()): { from: number; to: number } {
  return r.kind === 'relative' ? { from: now - r.ms, to: now } : { from: r.from, to: r.to };
}

/**
 * A step (Go duration) giving about `points` points over the span, never
 * finer than minStepMs: pass the node's report interval, or a histogram
 * reported every 10 s asked at 5 s comes back as lone points with a gap
 * between each, and no line is drawn.
 */
export function stepFor(spanMs: number, points: number, minStepMs: number): string {
  const raw = Math.max(spanMs / points, minStepMs, 1000);
  const nice = [1, 2, 5, 10, 15, 20, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];
  const s = raw / 1000;
  const pick = nice.find((n) => n >= s) ?? Math.ceil(s / 86400) * 86400;
  return `${pick}s`;
}

export function describeRange(r: TimeRange): string {
  if (r.kind === 'relative') return `last ${r.last}`;
  const f = (t: number) => new Date(t).toLocaleString('en-CA', { hour12: false }).replace(',', '');
  return `${f(r.from)} – ${f(r.to)}`;
}

/** Value for an <input type="datetime-local"> in local time. */
export function toLocalInput(t: number): string {
  const d = new Date(t);
  const pad = (n: number) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

/** A window that ends no later than now (to the second above), and is at least a second long. */
export function clampToNow(w: { from: number; to: number }, now: number): { from: number; to: number } {
  const to = Math.min(w.to, Math.ceil(now / 1000) * 1000);
  return { from: w.from, to: Math.max(to, w.from + 1000) };
}
