// The audit log page's logic: filters in the URL, and what changed between an
// entry's old and new value, as a few readable lines instead of two JSON
// documents.
import { type AuditQuery, MAX_AUDIT_LIMIT } from './access';

export const AUDIT_PAGE = 100;

/** The object kinds the collector records (others that appear are listed too). */
export const AUDIT_KINDS = ['threshold', 'alert_rule', 'token', 'node'];

/** The "since" choices; any other relative span (90m, 3d) in the URL works as well. */
export const SINCE_CHOICES: [string, string][] = [
  ['', 'any time'],
  ['1h', 'last hour'],
  ['24h', 'last 24 hours'],
  ['7d', 'last 7 days'],
  ['30d', 'last 30 days'],
];

export interface AuditFilters {
  kind: string;
  id: string;
  since: string;
  limit: number;
}

export function auditFiltersFrom(p: URLSearchParams): AuditFilters {
  const limit = Number(p.get('limit'));
  return {
    kind: (p.get('kind') ?? '').slice(0, 256),
    id: (p.get('id') ?? '').slice(0, 256),
    since: sinceMs(p.get('since') ?? '', 0) === undefined ? '' : (p.get('since') ?? ''),
    limit: Number.isInteger(limit) && limit >= 1 ? Math.min(limit, MAX_AUDIT_LIMIT) : AUDIT_PAGE,
  };
}

const UNIT_MS: Record<string, number> = { m: 60_000, h: 3_600_000, d: 86_400_000 };

/**
 * The start of a "since" filter in Unix milliseconds: a span back from now
 * (15m, 24h, 7d) or an absolute time (2026-01-02T15:04:05Z); undefined for
 * none or for something unreadable.
 */
export function sinceMs(s: string, now: number): number | undefined {
  const rel = /^([1-9][0-9]{0,5})([mhd])$/.exec(s);
  if (rel) return now - Number(rel[1]) * UNIT_MS[rel[2]];
  if (/^\d{4}-\d{2}-\d{2}/.test(s)) {
    const t = Date.parse(s);
    return Number.isNaN(t) ? undefined : t;
  }
  return undefined;
}

export function auditQuery(f: AuditFilters, now: number): AuditQuery {
  return { object_kind: f.kind || undefined, object_id: f.id || undefined, since: f.since ? sinceMs(f.since, now) : undefined, limit: f.limit };
}

/** One line of a change: a value at a path that appeared, went, or changed. */
export interface Change {
  path: string;
  kind: 'added' | 'removed' | 'changed';
  old?: string;
  new?: string;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const isScalar = (v: unknown) => v === null || typeof v !== 'object';

/**
 * The leaves of a JSON value by path (scope.node, threshold.warn,
 * labels[0].name), each as compact JSON. An array of scalars stays one leaf
 * (["rack","zone"]), as do empty objects and arrays.
 */
export function flatten(v: unknown, path = '', out = new Map<string, string>()): Map<string, string> {
  if (isObject(v) && Object.keys(v).length > 0) {
    for (const [k, x] of Object.entries(v)) flatten(x, path ? `${path}.${k}` : k, out);
  } else if (Array.isArray(v) && v.length > 0 && !v.every(isScalar)) {
    v.forEach((x, i) => flatten(x, `${path}[${i}]`, out));
  } else {
    out.set(path, v === undefined ? 'null' : JSON.stringify(v));
  }
  return out;
}

/**
 * What changed from old to new: every leaf of new for a creation (old is
 * null), every leaf of old for a deletion, otherwise the leaves that differ,
 * in new's order followed by the ones that went. unchanged counts the rest.
 */
export function diffValues(oldV: unknown, newV: unknown): { changes: Change[]; unchanged: number } {
  const none = (v: unknown) => v === null || v === undefined;
  if (none(oldV) && none(newV)) return { changes: [], unchanged: 0 };
  const before = none(oldV) ? new Map<string, string>() : flatten(oldV);
  const after = none(newV) ? new Map<string, string>() : flatten(newV);
  const changes: Change[] = [];
  let unchanged = 0;
  for (const [path, v] of after) {
    const was = before.get(path);
    if (was === undefined) changes.push({ path, kind: 'added', new: v });
    else if (was !== v) changes.push({ path, kind: 'changed', old: was, new: v });
    else unchanged++;
  }
  for (const [path, v] of before) if (!after.has(path)) changes.push({ path, kind: 'removed', old: v });
  return { changes, unchanged };
}

