// The collector's JSON API (/api/v1) as the UI uses it. The types come from
// the collector's OpenAPI document (collector/api/openapi.json) through
// api.gen.ts, which `make generate` writes; change the document, not them.
// Every error becomes an ApiError carrying the collector's own message,
// which the UI shows.
import type { AuditList, AuditQuery, CreateTokenRequest, CreatedToken, Token, TokenList, WhoAmI } from './access';
import type { components, operations } from './api.gen';
import type { Report, ReportDefinition, ReportDefinitionInput } from './reporttypes';

type Schemas = components['schemas'];

export type State = Schemas['State'];
export type Threshold = Schemas['Threshold'];
export type TreeNode = Schemas['TreeNode'];
export type Capability = Schemas['Capability'];
export type NodeSummary = Schemas['NodeSummary'];
export type Fleet = Schemas['Fleet'];
export type FleetNode = Schemas['FleetNode'];
export type FleetRoot = Schemas['FleetRoot'];
export type FleetFilter = NonNullable<operations['listFleet']['parameters']['query']>;
export type Tree = Schemas['Tree'];
export type Alert = Schemas['Alert'];
/** Who evaluates alerts, as recorded by that collector itself (holder is empty before any has). */
export type AlertEvaluator = Schemas['Leader'];
export type Delivery = Schemas['Delivery'];
export type AlertDetail = Schemas['AlertDetail'];
export type AlertFilter = NonNullable<operations['listAlerts']['parameters']['query']>;
/** The fields of a rule; the UI always sends every one (the collector rejects any other). */
export type AlertRuleInput = Required<Schemas['RuleInput']>;
export type AlertRule = Schemas['Rule'];
export type Point = Schemas['Point'];
export type Series = Schemas['Series'];
export type SeriesBatch = Schemas['SeriesBatch'];
/** GET /nodes/{node}/series/batch takes at most this many metrics (collector/api maxBatchMetrics). */
export const SERIES_BATCH_MAX = 64;
/** A past time a tree is asked for: an instant, and/or a window (Unix ms). */
export interface TreeTime {
  at?: number;
  from?: number;
  to?: number;
}
export type Evidence = Schemas['Evidence'];
export type Scope = Schemas['Scope'];
export type Override = Schemas['Override'];
export type Effective = Schemas['Effective'];
export type OverrideInput = Schemas['OverrideInput'];
export type NodeIdentity = Schemas['NodeIdentity'];
export type NodeLabels = Schemas['NodeLabels'];
export type BootstrapToken = Schemas['BootstrapToken'];
export type NewBootstrapToken = Schemas['NewBootstrapToken'];
/** GET /export/status: the Prometheus export's settings, its newest exports on this collector, the push receivers. */
export type ExportStatus = Schemas['ExportStatus'];
export type ExportKindStatus = Schemas['ExportKindStatus'];
export type ExportReceiverStatus = Schemas['ExportReceiverStatus'];
export type CreateBootstrapTokenRequest = operations['createBootstrapToken']['requestBody']['content']['application/json'];
/** The flow map (GET /flows, GET /flows/edge). */
export type FlowGraph = Schemas['FlowMap'];
export type FlowEdge = Schemas['FlowEdge'];
export type FlowEnd = Schemas['FlowEnd'];
export type FlowOwner = Schemas['FlowOwner'];
export type FlowOther = Schemas['FlowOther'];
export type FlowPoint = Schemas['FlowPoint'];
export type FlowTreeLink = Schemas['FlowTreeLink'];
export type FlowEvidenceLink = Schemas['FlowEvidenceLink'];
export type FlowEdgeDetail = Schemas['FlowEdgeDetail'];
type ErrorBody = Schemas['ErrorBody'];

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

/** Dispatched on window when the collector answers 401: nobody is signed in (any more). */
export const UNAUTHORIZED_EVENT = 'nbs:unauthorized';
const LOGIN_PATH = '/api/v1/login';

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
    // A wrong token at the login page is that page's business; anywhere else
    // a 401 means the session is gone, and the app sends the user to sign in.
    if (resp.status === 401 && path !== LOGIN_PATH) window.dispatchEvent(new Event(UNAUTHORIZED_EVENT));
    const e = (data as Partial<ErrorBody> | undefined)?.error;
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

/** GET /report-definitions pages: the largest page the collector gives, and a bound on how many are followed. */
const DEFINITIONS_PAGE = 1000;
const MAX_DEFINITION_PAGES = 1000;

type NodeList = Schemas['NodeList'];
type EventList = Schemas['EventList'];
type OverrideList = Schemas['OverrideList'];
type NodeThresholds = Schemas['NodeThresholds'];
type ExpandAccepted = Schemas['ExpandAccepted'];
type AlertList = Schemas['AlertList'];
export type AlertTotals = Schemas['AlertTotals'];
export type AlertGroup = Schemas['AlertGroup'];

/** A page of alerts as GET /alerts answers it; an older collector answers no totals, which the page's length stands in for. */
export interface AlertPage {
  evaluator: AlertEvaluator | null;
  alerts: Alert[];
  total: number;
  totals: AlertTotals;
  nextCursor: string | null;
  groups: AlertGroup[] | null;
  groupsTotal: number;
}

function alertPage(r: Partial<AlertList>): AlertPage {
  const alerts = r.alerts ?? [];
  const count = (st: string) => alerts.filter((a) => a.state === st).length;
  const totals = r.totals ?? { firing: count('firing'), pending: count('pending'), resolved: count('resolved'), acknowledged: 0, silenced: 0 };
  return {
    evaluator: r.evaluator ?? null,
    alerts,
    total: r.total ?? alerts.length,
    totals,
    nextCursor: r.next_cursor || null,
    groups: r.groups ?? null,
    groupsTotal: r.groups_total ?? r.groups?.length ?? 0,
  };
}
type RuleList = Schemas['RuleList'];
type NodeIdentities = Schemas['NodeIdentities'];
type BootstrapTokens = Schemas['BootstrapTokens'];

export const api = {
  nodes: (signal?: AbortSignal) => request<NodeList>('GET', '/api/v1/nodes', undefined, signal).then((r) => r.nodes ?? []),
  /** One page of the fleet: repeated parameters (label, state) are sent once per value. */
  fleet: (f: FleetFilter, signal?: AbortSignal) => {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(f)) {
      for (const x of Array.isArray(v) ? v : [v]) if (x !== undefined && x !== '') q.append(k, String(x));
    }
    const s = q.toString();
    return request<Fleet>('GET', `/api/v1/fleet${s ? `?${s}` : ''}`, undefined, signal);
  },
  node: (node: string, signal?: AbortSignal) => request<NodeSummary>('GET', nodePath(node), undefined, signal),
  /** The tree, live or (with at, or from and to, Unix ms) as of a past time. */
  tree: (node: string, signal?: AbortSignal, past?: TreeTime | null) =>
    request<Tree>('GET', `${nodePath(node)}/tree${query({ at: past?.at, from: past?.from, to: past?.to })}`, undefined, signal),
  /** Up to SERIES_BATCH_MAX metrics over one window (the tree's trend lines). */
  seriesBatch: (node: string, metrics: string[], from: number, to: number, step?: string, signal?: AbortSignal) => {
    const q = new URLSearchParams();
    metrics.forEach((m) => q.append('metric', m));
    q.set('from', String(from));
    q.set('to', String(to));
    if (step) q.set('step', step);
    return request<SeriesBatch>('GET', `${nodePath(node)}/series/batch?${q}`, undefined, signal).then((r) => r.series ?? []);
  },
  series: (node: string, metric: string, from: number, to: number, step?: string, signal?: AbortSignal) =>
    request<Series>('GET', `${nodePath(node)}/series${query({ metric, from, to, step })}`, undefined, signal),
  events: (node: string, metric: string, from: number, to: number, limit: number, signal?: AbortSignal) =>
    request<EventList>('GET', `${nodePath(node)}/events${query({ metric, from, to, limit })}`, undefined, signal).then(
      (r) => r.events ?? [],
    ),
  overrides: (signal?: AbortSignal) => request<OverrideList>('GET', '/api/v1/thresholds', undefined, signal).then((r) => r.overrides ?? []),
  effective: (node: string, signal?: AbortSignal) =>
    request<NodeThresholds>('GET', `${nodePath(node)}/thresholds`, undefined, signal).then((r) => r.thresholds ?? []),
  putOverride: (o: OverrideInput) => request<Override>('PUT', '/api/v1/thresholds', o),
  deleteOverride: (id: number | string) => request<void>('DELETE', `/api/v1/thresholds/${enc(String(id))}`),
  deleteNode: (node: string) => request<void>('DELETE', nodePath(node)),
  expand: (node: string, seconds: number) => request<ExpandAccepted>('POST', `${nodePath(node)}/expand`, { seconds }),
  /** The first open alerts (worst first) and the true totals, for the header. */
  alerts: (limit: number, signal?: AbortSignal) =>
    request<Partial<AlertList>>('GET', `/api/v1/alerts${query({ state: 'open', limit })}`, undefined, signal).then(alertPage),
  alertList: (f: AlertFilter, signal?: AbortSignal) =>
    request<Partial<AlertList>>(
      'GET',
      `/api/v1/alerts${query({ state: f.state, node: f.node, rule: f.rule, limit: f.limit, cursor: f.cursor, groups: f.groups ? 'true' : undefined })}`,
      undefined,
      signal,
    ).then(alertPage),
  alert: (id: number | string, signal?: AbortSignal) =>
    request<AlertDetail>('GET', `/api/v1/alerts/${enc(String(id))}`, undefined, signal).then((a) => ({ ...a, deliveries: a.deliveries ?? [] })),
  acknowledgeAlert: (id: number, comment: string) => request<AlertDetail>('POST', `/api/v1/alerts/${enc(String(id))}/acknowledge`, { comment }),
  unacknowledgeAlert: (id: number) => request<AlertDetail>('DELETE', `/api/v1/alerts/${enc(String(id))}/acknowledge`),
  silenceAlert: (id: number, durationSeconds: number, comment: string) =>
    request<AlertDetail>('POST', `/api/v1/alerts/${enc(String(id))}/silence`, { duration_seconds: durationSeconds, comment }),
  unsilenceAlert: (id: number) => request<AlertDetail>('DELETE', `/api/v1/alerts/${enc(String(id))}/silence`),
  alertRules: (signal?: AbortSignal) => request<Partial<RuleList>>('GET', '/api/v1/alert-rules', undefined, signal).then((r) => r.rules ?? []),
  createAlertRule: (r: AlertRuleInput) => request<AlertRule>('POST', '/api/v1/alert-rules', r),
  updateAlertRule: (id: number, r: AlertRuleInput) => request<AlertRule>('PUT', `/api/v1/alert-rules/${enc(String(id))}`, r),
  deleteAlertRule: (id: number) => request<void>('DELETE', `/api/v1/alert-rules/${enc(String(id))}`),

  // Access (collector/access). Logout sends no body, so no Content-Type: the
  // collector's guard accepts that for a request that carries nothing.
  login: (token: string) => request<WhoAmI>('POST', LOGIN_PATH, { token }),
  logout: () => request<void>('POST', '/api/v1/logout'),
  whoami: (signal?: AbortSignal) => request<WhoAmI>('GET', '/api/v1/whoami', undefined, signal),
  tokens: (signal?: AbortSignal) => request<Partial<TokenList>>('GET', '/api/v1/tokens', undefined, signal).then((r) => r.tokens ?? []),
  createToken: (t: CreateTokenRequest) => request<CreatedToken>('POST', '/api/v1/tokens', t),
  revokeToken: (id: number) => request<Token>('DELETE', `/api/v1/tokens/${enc(String(id))}`),
  audit: (q: AuditQuery, signal?: AbortSignal) =>
    request<Partial<AuditList>>(
      'GET',
      `/api/v1/audit${query({ object_kind: q.object_kind, object_id: q.object_id, since: q.since, until: q.until, before: q.before, limit: q.limit })}`,
      undefined,
      signal,
    ).then((r) => r.entries ?? []),

  // Tenancy (collector/nodeauth), for admins: who each node name is and
  // whose (its bound labels, its tenant among them), and the tenants'
  // bootstrap tokens. Binding labels that name another tenant splits the
  // node's history; the collector audits every change.
  nodeIdentities: (signal?: AbortSignal) =>
    request<Partial<NodeIdentities>>('GET', '/api/v1/node-identities', undefined, signal).then((r) => ({ mode: r.mode ?? 'none', tenant_label: r.tenant_label ?? '', nodes: r.nodes ?? [] })),
  labelNode: (node: string, labels: Record<string, string>) => request<NodeLabels>('PUT', `${nodePath(node)}/labels`, { labels }),
  bootstrapTokens: (signal?: AbortSignal) =>
    request<Partial<BootstrapTokens>>('GET', '/api/v1/node-bootstrap-tokens', undefined, signal).then((r) => r.bootstrap_tokens ?? []),
  createBootstrapToken: (t: CreateBootstrapTokenRequest) => request<NewBootstrapToken>('POST', '/api/v1/node-bootstrap-tokens', t),
  revokeBootstrapToken: (name: string) => request<void>('DELETE', `/api/v1/node-bootstrap-tokens/${enc(name)}`),

  // The Prometheus export (staff): a customer gets 404, as for every staff route.
  exportStatus: (signal?: AbortSignal) =>
    request<Partial<ExportStatus>>('GET', '/api/v1/export/status', undefined, signal).then((r) => ({
      window_seconds: r.window_seconds ?? 0,
      counter_hold_seconds: r.counter_hold_seconds ?? 0,
      max_series_per_node: r.max_series_per_node ?? 0,
      max_series_per_family: r.max_series_per_family ?? 0,
      exports: r.exports ?? [],
      receivers: r.receivers ?? [],
    })),

  // The flow map (issue 29): the query is built by flows.ts, tenant-scoped by the collector.
  flows: (q: URLSearchParams, signal?: AbortSignal) => request<FlowGraph>('GET', `/api/v1/flows?${q}`, undefined, signal),
  flowEdge: (q: URLSearchParams, signal?: AbortSignal) => request<FlowEdgeDetail>('GET', `/api/v1/flows/edge?${q}`, undefined, signal),

  // Reports (issue 10). The URL carries the query (report.ts builds it), so
  // the same link serves the page, the JSON and the CSV downloads.
  report: (url: string, signal?: AbortSignal) => request<Report>('GET', url, undefined, signal),
  // Every definition the caller sees: the list comes a page at a time (the
  // server's limit), so follow next_cursor to the end rather than show a part.
  reportDefinitions: async (signal?: AbortSignal) => {
    const out: ReportDefinition[] = [];
    let cursor: string | undefined;
    for (let pages = 0; pages < MAX_DEFINITION_PAGES; pages++) {
      const r = await request<{ definitions?: ReportDefinition[]; next_cursor?: string } | ReportDefinition[]>(
        'GET',
        `/api/v1/report-definitions${query({ limit: DEFINITIONS_PAGE, cursor })}`,
        undefined,
        signal,
      );
      if (Array.isArray(r)) return r;
      out.push(...(r?.definitions ?? []));
      if (!r?.next_cursor || r.next_cursor === cursor) break;
      cursor = r.next_cursor;
    }
    return out;
  },
  reportDefinition: (id: number, signal?: AbortSignal) => request<ReportDefinition>('GET', `/api/v1/report-definitions/${enc(String(id))}`, undefined, signal),
  createReportDefinition: (d: ReportDefinitionInput) => request<ReportDefinition>('POST', '/api/v1/report-definitions', d),
  updateReportDefinition: (id: number, d: ReportDefinitionInput) => request<ReportDefinition>('PUT', `/api/v1/report-definitions/${enc(String(id))}`, d),
  deleteReportDefinition: (id: number) => request<void>('DELETE', `/api/v1/report-definitions/${enc(String(id))}`),
};
