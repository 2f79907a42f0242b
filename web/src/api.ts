// The collector's JSON API (/api/v1) as the UI uses it. Every error becomes
// an ApiError carrying the collector's own message, which the UI shows.

export type State = 'ok' | 'warn' | 'crit' | 'unknown';

export interface Threshold {
  warn: number;
  crit: number;
  comparison: 'above' | 'below' | string;
  hold_intervals: number;
  baseline_intervals?: number;
  floor?: number;
}

export interface TreeNode {
  id: string;
  title: string;
  unit: string;
  kind: string; // rate | gauge | histogram (others render as gauges)
  description: string;
  value: number | null;
  count?: number | null;
  state: string;
  own_state: string;
  updated_at?: string | null;
  threshold: Threshold | null;
  // Over the tree's recent window (window_s): a rate's total increase and the
  // worst state any report carried, so a burst that ended stays visible.
  recent_count?: number | null;
  recent_state?: string;
  children: TreeNode[] | null;
}

export interface Capability {
  name: string;
  available: boolean;
  reason?: string;
}

export interface NodeSummary {
  name: string;
  labels: Record<string, string>;
  state: string;
  connected: boolean;
  stale: boolean;
  last_report: string | null;
  interval_ms: number;
  agent_version: string;
  kernel_release: string;
  capabilities: Capability[];
  roots: TreeNode[];
}

export interface Tree {
  node: string;
  time: string | null;
  interval_ms: number;
  window_s?: number;
  roots: TreeNode[];
}

export interface Alert {
  id: number;
  fingerprint?: string;
  rule_id?: number;
  rule: string;
  kind: string; // node | group
  severity: string;
  state: string; // pending | firing | resolved
  node?: string;
  root?: string;
  metric?: string; // the metric the rule matched
  child?: string; // the descendant that explains it
  group?: Record<string, string>;
  since?: string; // the breach began
  starts_at?: string | null; // it fired
  ends_at?: string | null; // it resolved
  value?: number | null; // the explaining child's value (per second for rates); a group's percentage
  summary?: string;
  description?: string;
  tree_url?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

/** Who evaluates alerts, as recorded by that collector itself (holder is empty before any has). */
export interface AlertEvaluator {
  holder: string;
  epoch: number;
  since: string;
  heartbeat: string;
}

/** One notification of the delivery log: queued with the transition, retried until delivered or failed. */
export interface Delivery {
  id: number;
  target: string; // alertmanager | webhook
  url: string;
  event: string; // firing | resolved
  status: string; // pending | delivered | failed
  attempts: number;
  last_error?: string;
  created_at: string;
  delivered_at: string | null;
}

export interface AlertDetail extends Alert {
  deliveries: Delivery[];
}

export interface AlertFilter {
  state?: string; // firing | pending | resolved | open | all
  node?: string;
  rule?: string;
  limit?: number;
}

/** The fields a client sends to create or replace a rule (the collector rejects any other). */
export interface AlertRuleInput {
  name: string;
  kind: string; // node | group
  metric: string;
  state: string; // warn | crit | unknown
  for_intervals: number;
  for_seconds: number;
  severity: string;
  selector: Record<string, string>;
  min_nodes: number;
  min_percent: number;
  group_by: string[];
  labels: Record<string, string>;
  runbook_url: string;
  enabled: boolean;
}

export interface AlertRule extends Omit<AlertRuleInput, 'for_intervals' | 'for_seconds' | 'min_nodes' | 'min_percent' | 'group_by' | 'runbook_url'> {
  id: number;
  for_intervals?: number;
  for_seconds?: number;
  min_nodes?: number;
  min_percent?: number;
  group_by?: string[] | null;
  runbook_url?: string;
  builtin: boolean;
  created_at: string;
  updated_at: string;
}

export interface Point {
  t: string;
  value: number | null;
  max?: number | null;
  count?: number | null;
  state: string;
  // Histograms: percentiles of the step's merged distribution, in unit.
  percentiles?: { p50?: number; p90?: number; p99?: number; max?: number; samples?: number; [q: string]: number | undefined } | null;
  [field: string]: unknown;
}

export interface Series {
  node: string;
  metric: string;
  unit: string;
  kind: string;
  from: string;
  to: string;
  step_ms: number;
  points: Point[];
}

export interface Evidence {
  t: string;
  metric: string;
  fields: Record<string, string>;
}

export interface Scope {
  kind: 'global' | 'selector' | 'node';
  selector?: Record<string, string>;
  node?: string;
}

export interface Override {
  id: number | string;
  scope: Scope;
  metric: string;
  threshold: Threshold | null;
  disabled?: boolean;
  updated_at?: string;
}

export interface Effective {
  metric: string;
  threshold: Threshold | null;
  source: string;
  override_id?: number | string;
}

export interface OverrideInput {
  scope: Scope;
  metric: string;
  threshold?: Threshold;
  disabled?: boolean;
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = 'ApiError';
  }
  get notFound(): boolean {
    return this.status === 404;
  }
}

export function isAbort(err: unknown): boolean {
  return err instanceof DOMException && err.name === 'AbortError';
}

async function request<T>(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
  let resp: Response;
  try {
    resp = await fetch(path, {
      method,
      signal,
      headers: body === undefined ? { Accept: 'application/json' } : { Accept: 'application/json', 'Content-Type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (err) {
    if (isAbort(err)) throw err;
    throw new ApiError(0, 'network', `Cannot reach the collector (${(err as Error).message || 'network error'}).`);
  }
  if (resp.status === 204) return undefined as T;
  const text = await resp.text();
  let data: unknown = undefined;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      if (resp.ok) throw new ApiError(resp.status, 'bad_response', `The collector sent something that is not JSON for ${path}.`);
    }
  }
  if (!resp.ok) {
    const e = (data as { error?: { code?: string; message?: string } } | undefined)?.error;
    throw new ApiError(resp.status, e?.code ?? `http_${resp.status}`, e?.message ?? `${method} ${path}: HTTP ${resp.status} ${resp.statusText}`.trim());
  }
  return data as T;
}

const enc = encodeURIComponent;
const nodePath = (node: string) => `/api/v1/nodes/${enc(node)}`;

function query(params: Record<string, string | number | undefined>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== '') q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : '';
}

export const api = {
  nodes: (signal?: AbortSignal) => request<{ nodes: NodeSummary[] }>('GET', '/api/v1/nodes', undefined, signal).then((r) => r.nodes ?? []),
  node: (node: string, signal?: AbortSignal) => request<NodeSummary>('GET', nodePath(node), undefined, signal),
  tree: (node: string, signal?: AbortSignal) => request<Tree>('GET', `${nodePath(node)}/tree`, undefined, signal),
  series: (node: string, metric: string, from: number, to: number, step?: string, signal?: AbortSignal) =>
    request<Series>('GET', `${nodePath(node)}/series${query({ metric, from, to, step })}`, undefined, signal),
  events: (node: string, metric: string, from: number, to: number, limit: number, signal?: AbortSignal) =>
    request<{ events: Evidence[] }>('GET', `${nodePath(node)}/events${query({ metric, from, to, limit })}`, undefined, signal).then(
      (r) => r.events ?? [],
    ),
  overrides: (signal?: AbortSignal) => request<{ overrides: Override[] }>('GET', '/api/v1/thresholds', undefined, signal).then((r) => r.overrides ?? []),
  effective: (node: string, signal?: AbortSignal) =>
    request<{ thresholds: Effective[] }>('GET', `${nodePath(node)}/thresholds`, undefined, signal).then((r) => r.thresholds ?? []),
  putOverride: (o: OverrideInput) => request<Override>('PUT', '/api/v1/thresholds', o),
  deleteOverride: (id: number | string) => request<void>('DELETE', `/api/v1/thresholds/${enc(String(id))}`),
  expand: (node: string, seconds: number) => request<{ until?: string }>('POST', `${nodePath(node)}/expand`, { seconds }),
  alerts: (signal?: AbortSignal) => request<{ alerts?: Alert[] }>('GET', '/api/v1/alerts?state=open', undefined, signal).then((r) => r.alerts ?? []),
  alertList: (f: AlertFilter, signal?: AbortSignal) =>
    request<{ evaluator?: AlertEvaluator; alerts?: Alert[] }>('GET', `/api/v1/alerts${query({ state: f.state, node: f.node, rule: f.rule, limit: f.limit })}`, undefined, signal).then((r) => ({
      evaluator: r.evaluator ?? null,
      alerts: r.alerts ?? [],
    })),
  alert: (id: number | string, signal?: AbortSignal) =>
    request<AlertDetail>('GET', `/api/v1/alerts/${enc(String(id))}`, undefined, signal).then((a) => ({ ...a, deliveries: a.deliveries ?? [] })),
  alertRules: (signal?: AbortSignal) => request<{ rules?: AlertRule[] }>('GET', '/api/v1/alert-rules', undefined, signal).then((r) => r.rules ?? []),
  createAlertRule: (r: AlertRuleInput) => request<AlertRule>('POST', '/api/v1/alert-rules', r),
  updateAlertRule: (id: number, r: AlertRuleInput) => request<AlertRule>('PUT', `/api/v1/alert-rules/${enc(String(id))}`, r),
  deleteAlertRule: (id: number) => request<void>('DELETE', `/api/v1/alert-rules/${enc(String(id))}`),
};
