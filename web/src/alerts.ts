// Alerts and alert rules as the UI reads and edits them: ordering, links into
// the tree, rule drafts, and the collector's validation messages by field.
import type { Alert, AlertGroup, AlertRule, AlertRuleInput } from './api';
import { formatNumber } from './format';
import { fleetHref, nodeHref, withParams } from './route';
import { normState } from './state';
import { clampToNow } from './timerange';

/** A severity word (critical, warning, page, info…) as a state colour. */
export function severityState(s: string): string {
  return /^crit/i.test(s) || /^page/i.test(s) ? 'crit' : /^warn/i.test(s) ? 'warn' : normState(s);
}

const sevRank = (s: string) => ({ crit: 0, warn: 1 })[severityState(s) as 'crit' | 'warn'] ?? 2;
const stateRank = (s: string) => (s === 'firing' ? 0 : s === 'pending' ? 1 : 2);
const time = (iso: string | null | undefined) => (iso ? Date.parse(iso) || 0 : 0);

/** Whether someone is on it: acknowledged, or silenced for now. */
export function handled(a: Alert, now: number = Date.now()): boolean {
  return !!a.acknowledged_at || (!!a.silenced_until && Date.parse(a.silenced_until) > now);
}

/** Open alerts for on-call: firing before pending, then by severity, then those nobody is on yet, then the newest breach first. */
export function sortOpen(alerts: Alert[], now: number = Date.now()): Alert[] {
  return [...alerts].sort(
    (a, b) =>
      stateRank(a.state) - stateRank(b.state) ||
      sevRank(a.severity) - sevRank(b.severity) ||
      Number(handled(a, now)) - Number(handled(b, now)) ||
      time(b.since) - time(a.since) ||
      b.id - a.id,
  );
}

/** What alerts are grouped by, as Alertmanager groups them: the rule and the group labels. */
export function groupKey(a: Pick<Alert, 'rule' | 'group'>): string {
  const labels = Object.entries(a.group ?? {}).sort(([x], [y]) => (x < y ? -1 : x > y ? 1 : 0));
  return JSON.stringify([a.rule, labels]);
}

/**
 * Open alerts (in order) grouped by groupKey, each group where its first
 * alert is: what the collector answers with groups=true, made from one page
 * for a collector that does not group.
 */
export function groupAlerts(alerts: Alert[]): AlertGroup[] {
  const out = new Map<string, AlertGroup>();
  for (const a of alerts) {
    const k = groupKey(a);
    const g = out.get(k) ?? { rule: a.rule, group: a.group, count: 0, firing: 0, pending: 0, first: a };
    g.count++;
    if (a.state === 'firing') g.firing++;
    if (a.state === 'pending') g.pending++;
    out.set(k, g);
  }
  return [...out.values()];
}

/** The metric the tree opens at: the child that explains the alert, else the metric the rule matched. */
export function alertMetric(a: Alert): string {
  return a.child || a.metric || '';
}

/** The least context shown either side of a breach (as the collector's tree_url). */
export const WINDOW_PAD_MS = 5 * 60_000;

/**
 * The time range an alert's breach is seen over: from the breach's start to
 * its resolve (or now, while open), padded by a quarter of its length and at
 * least five minutes either side, to whole seconds, and never past now: a
 * window that ends ahead would show the tree of a time not yet come. The
 * collector's links in pages (tree_url) use the same window.
 */
export function alertWindow(a: Alert, now: number = Date.now()): { from: number; to: number } | null {
  const start = Date.parse(a.since);
  if (!Number.isFinite(start)) return null;
  const end = Math.max(a.ends_at ? Date.parse(a.ends_at) : now, start);
  const pad = Math.max((end - start) / 4, WINDOW_PAD_MS);
  return clampToNow({ from: Math.floor((start - pad) / 1000) * 1000, to: Math.ceil((end + pad) / 1000) * 1000 }, now);
}

const iso = (ms: number) => new Date(ms).toISOString().replace('.000Z', 'Z');

/** Where the alert is in this UI: the node's tree at that metric over the breach window, or the fleet filtered to a group's labels. */
export function alertTreeHref(a: Alert, now: number = Date.now()): string {
  const metric = alertMetric(a);
  if (a.node) {
    const w = alertWindow(a, now);
    return nodeHref(a.node, withParams(new URLSearchParams(), { metric: metric || null, from: w ? iso(w.from) : null, to: w ? iso(w.to) : null }));
  }
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(a.group ?? {})) p.set(`l.${k}`, v);
  return fleetHref(p);
}

/** "lab-b" for a node alert, "customer=acme" for a group's. */
export function alertWhere(a: Alert): string {
  if (a.node) return a.node;
  const g = Object.entries(a.group ?? {}).map(([k, v]) => `${k}=${v}`);
  return g.length ? g.join(', ') : 'all matching nodes';
}

/** The value against the threshold, as the collector described it when the alert fired. */
export function alertValue(a: Alert): { value: string; threshold: string } {
  const ann = a.annotations ?? {};
  if (a.kind === 'group') {
    const n = ann.value;
    const pct = a.value === null || a.value === undefined ? '' : `${formatNumber(a.value)}%`;
    return { value: n ? `${n} node${n === '1' ? '' : 's'}${pct ? ` (${pct})` : ''}` : pct || '—', threshold: '' };
  }
  // A silent node's alert has no metric: its value is how long it has been silent ("3m0s").
  if (!a.child && !a.metric) return { value: ann.value || '—', threshold: '' };
  const unit = alertUnit(a);
  const value = a.value === null || a.value === undefined ? (ann.value ?? '—') : formatNumber(a.value);
  // The collector states thresholds in the unit ("warn 3x median 1.2 ms = 3.6 ms, crit …"); alerts from
  // older collectors carry bare numbers ("warn 1, crit 10"), which take the unit at the end.
  const thr = ann.threshold ?? '';
  const threshold = !thr ? '' : !unit || thr.endsWith(` ${unit}`) || /median/.test(thr) ? thr : `${thr} ${unit}`;
  return { value: unit && value !== '—' ? `${value} ${unit}` : value, threshold };
}

/**
 * The explaining metric's unit. The alert carries it only in its summary
 * ("tcp_reset is CRIT on lab-b: tcp_reset/sent/no_socket at 25 resets/s").
 */
export function alertUnit(a: Alert): string {
  const m = a.child || a.metric;
  const s = a.summary ?? '';
  if (!m) return '';
  const i = s.lastIndexOf(`${m} at `);
  if (i < 0) return '';
  const rest = s.slice(i + m.length + 4).trim();
  const sp = rest.indexOf(' ');
  return sp < 0 ? '' : rest.slice(sp + 1).trim();
}

/** A duration for people: "45 s", "3 min 20 s", "2 h 5 min", "3 d 4 h". */
export function formatSpan(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return '—';
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return s % 60 ? `${m} min ${s % 60} s` : `${m} min`;
  const h = Math.floor(m / 60);
  if (h < 24) return m % 60 ? `${h} h ${m % 60} min` : `${h} h`;
  const d = Math.floor(h / 24);
  return h % 24 ? `${d} d ${h % 24} h` : `${d} d`;
}

// ---- rules ----

/** How long a rule's condition must hold. */
export function holdText(r: Pick<AlertRule, 'for_intervals' | 'for_seconds'>): string {
  if (r.for_seconds) return formatSpan(r.for_seconds * 1000);
  const n = r.for_intervals ?? 0;
  return `${n} interval${n === 1 ? '' : 's'}`;
}

export function labelsText(m: Record<string, string> | null | undefined): string {
  return Object.entries(m ?? {})
    .map(([k, v]) => `${k}=${v}`)
    .join(', ');
}

/** A group rule's quorum: "≥ 3 nodes" or "≥ 20%". */
export function quorumText(r: Pick<AlertRule, 'kind' | 'min_nodes' | 'min_percent'>): string {
  if (r.kind !== 'group') return '';
  if (r.min_percent) return `≥ ${formatNumber(r.min_percent)}%`;
  return `≥ ${r.min_nodes ?? 0} node${r.min_nodes === 1 ? '' : 's'}`;
}

export type RuleField = 'name' | 'kind' | 'metric' | 'state' | 'hold' | 'severity' | 'selector' | 'min' | 'group_by' | 'labels' | 'runbook' | 'form';
export type RuleErrors = Partial<Record<RuleField, string>>;

/** The form as typed: text for every field, so half-typed values survive. */
export interface RuleDraft {
  name: string;
  /** silent: a node that sent no report for the hold (no metric, no state). */
  kind: 'node' | 'group' | 'silent';
  metric: string;
  state: string;
  hold: string;
  holdUnit: 'intervals' | 'seconds';
  severity: string;
  selector: string;
  min: string;
  minUnit: 'nodes' | 'percent';
  groupBy: string;
  labels: string;
  runbook: string;
  enabled: boolean;
}

export function emptyDraft(): RuleDraft {
  return {
    name: '',
    kind: 'node',
    metric: '*',
    state: 'crit',
    hold: '2',
    holdUnit: 'intervals',
    severity: 'critical',
    selector: '',
    min: '3',
    minUnit: 'nodes',
    groupBy: '',
    labels: '',
    runbook: '',
    enabled: true,
  };
}

export function draftFromRule(r: AlertRule): RuleDraft {
  const seconds = !!r.for_seconds;
  const percent = !!r.min_percent;
  return {
    name: r.name,
    kind: r.kind === 'group' || r.kind === 'silent' ? r.kind : 'node',
    metric: r.metric,
    state: r.state,
    hold: String(seconds ? r.for_seconds : (r.for_intervals ?? '')),
    holdUnit: seconds ? 'seconds' : 'intervals',
    severity: r.severity,
    selector: labelsText(r.selector),
    min: r.kind === 'group' ? String(percent ? r.min_percent : (r.min_nodes ?? '')) : '3',
    minUnit: percent ? 'percent' : 'nodes',
    groupBy: (r.group_by ?? []).join(', '),
    labels: labelsText(r.labels),
    runbook: r.runbook_url ?? '',
    enabled: r.enabled,
  };
}

/** "k=v, k2=v2" (commas or new lines) into a map, or what is wrong with it. */
export function parseLabelList(s: string, what: string): Record<string, string> | string {
  const out: Record<string, string> = {};
  for (const raw of s.split(/[,\n]/)) {
    const p = raw.trim();
    if (!p) continue;
    const eq = p.indexOf('=');
    if (eq <= 0) return `${what}: “${p}” is not label=value, e.g. customer=acme.`;
    const k = p.slice(0, eq).trim();
    if (k in out) return `${what}: ${k} is given twice.`;
    out[k] = p.slice(eq + 1).trim();
  }
  return out;
}

/**
 * Builds the request from a draft. Only what cannot be sent as typed is checked
 * here (numbers, label lists); everything else is the collector's to judge, so
 * the rules live in one place and its messages are shown by field.
 */
export function ruleInput(d: RuleDraft): { input?: AlertRuleInput; errors: RuleErrors } {
  const errors: RuleErrors = {};
  const hold = Number(d.hold.trim());
  if (d.hold.trim() === '' || !Number.isInteger(hold) || hold < 1) errors.hold = `Hold must be a whole number of ${d.holdUnit}, at least 1.`;
  const selector = parseLabelList(d.selector, 'Selector');
  if (typeof selector === 'string') errors.selector = selector;
  const labels = parseLabelList(d.labels, 'Labels');
  if (typeof labels === 'string') errors.labels = labels;
  let minNodes = 0;
  let minPercent = 0;
  let groupBy: string[] = [];
  if (d.kind === 'group') {
    const v = Number(d.min.trim());
    if (d.min.trim() === '' || !Number.isFinite(v)) errors.min = d.minUnit === 'nodes' ? 'Enter how many nodes, e.g. 3.' : 'Enter a percentage of the selected nodes, e.g. 20.';
    else if (d.minUnit === 'nodes' && (!Number.isInteger(v) || v < 1)) errors.min = 'The number of nodes must be a whole number, at least 1.';
    else if (d.minUnit === 'percent') minPercent = v;
    else minNodes = v;
    groupBy = d.groupBy
      .split(/[,\s]+/)
      .map((x) => x.trim())
      .filter(Boolean);
  }
  if (Object.keys(errors).length) return { errors };
  return {
    errors,
    input: {
      name: d.name.trim(),
      kind: d.kind,
      // A silent rule watches whole nodes: the collector wants "*" and no state of its own.
      metric: d.kind === 'silent' ? '*' : d.metric.trim(),
      state: (d.kind === 'silent' ? 'unknown' : d.state) as AlertRuleInput['state'], // as typed: the collector judges it
      for_intervals: d.holdUnit === 'intervals' ? hold : 0,
      for_seconds: d.holdUnit === 'seconds' ? hold : 0,
      severity: d.severity.trim(),
      selector: selector as Record<string, string>,
      min_nodes: minNodes,
      min_percent: minPercent,
      group_by: groupBy,
      labels: labels as Record<string, string>,
      runbook_url: d.runbook.trim(),
      enabled: d.enabled,
    },
  };
}

/** A stored rule as a request (for a quick enable/disable): only the fields the collector accepts. */
export function inputFromRule(r: AlertRule): AlertRuleInput {
  return {
    name: r.name,
    kind: r.kind,
    metric: r.metric,
    state: r.state,
    for_intervals: r.for_intervals ?? 0,
    for_seconds: r.for_seconds ?? 0,
    severity: r.severity,
    selector: r.selector ?? {},
    min_nodes: r.min_nodes ?? 0,
    min_percent: r.min_percent ?? 0,
    group_by: r.group_by ?? [],
    labels: r.labels ?? {},
    runbook_url: r.runbook_url ?? '',
    enabled: r.enabled,
  };
}

/**
 * Splits "a; b; c" where the parts may quote user input (Go's %q) that itself
 * holds "; ", which must not split.
 */
export function splitProblems(s: string): string[] {
  const out: string[] = [];
  let cur = '';
  let quoted = false;
  for (let i = 0; i < s.length; i++) {
    const c = s[i];
    if (quoted && c === '\\' && i + 1 < s.length) {
      cur += c + s[++i];
      continue;
    }
    if (c === '"') quoted = !quoted;
    if (!quoted && c === ';' && s[i + 1] === ' ') {
      if (cur.trim()) out.push(cur.trim());
      cur = '';
      i++;
      continue;
    }
    cur += c;
  }
  if (cur.trim()) out.push(cur.trim());
  return out;
}

/** Which form field a part of a collector message is about (see collector/alert/rule.go Validate). */
export function ruleFieldOf(part: string): RuleField {
  const p = part.toLowerCase();
  if (/^name\b/.test(p)) return 'name';
  if (/^metric\b/.test(p)) return 'metric';
  if (/^state\b/.test(p)) return 'state';
  if (/\bfor_(intervals|seconds)\b/.test(p)) return 'hold';
  if (/^severity\b/.test(p)) return 'severity';
  if (/^selector\b/.test(p)) return 'selector';
  if (/^labels?\b/.test(p)) return 'labels';
  if (/^runbook_url\b/.test(p)) return 'runbook';
  if (/belong to group rules/.test(p) || /^kind\b/.test(p)) return 'kind';
  if (/^group_by\b/.test(p)) return 'group_by';
  if (/\bmin_(nodes|percent)\b/.test(p)) return 'min';
  return 'form';
}

/** Puts each problem of a collector 400 next to the field it is about; the rest goes to the top of the form. */
export function mapRuleErrors(message: string): RuleErrors {
  const out: RuleErrors = {};
  const body = message.replace(/^((bad request|invalid alert rule):\s*)+/i, '');
  // Some problems have a "; " of their own ("…set by the alert itself; choose another name"): glue those back.
  const parts: string[] = [];
  for (const part of splitProblems(body)) {
    if (parts.length && /^choose another\b/i.test(part)) parts[parts.length - 1] += `; ${part}`;
    else parts.push(part);
  }
  for (const part of parts) {
    const f = ruleFieldOf(part);
    out[f] = out[f] ? `${out[f]}; ${part}` : part;
  }
  return out;
}

export const RULE_FIELD_ORDER: RuleField[] = ['form', 'name', 'kind', 'metric', 'state', 'hold', 'severity', 'selector', 'min', 'group_by', 'labels', 'runbook'];

/** How many node names the alerts page's Node filter suggests at once. */
export const NODE_SUGGESTIONS = 12;

/**
 * The node names the Node filter suggests for what is typed: those starting with it first, then those
 * containing it, case-insensitively, at most limit (nothing typed: the first names). A fleet of 3,000
 * drawn as choices held the page's main thread on every load; a few suggestions cost nothing.
 */
export function matchNodes(names: readonly string[], typed: string, limit: number = NODE_SUGGESTIONS): string[] {
  const q = typed.trim().toLowerCase();
  if (!q) return names.slice(0, limit);
  const starts: string[] = [];
  const contains: string[] = [];
  for (const n of names) {
    const l = n.toLowerCase();
    if (l.startsWith(q)) {
      starts.push(n);
      if (starts.length >= limit) break;
    } else if (contains.length < limit && l.includes(q)) {
      contains.push(n);
    }
  }
  return [...starts, ...contains].slice(0, limit);
}
