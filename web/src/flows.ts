// The flow map (issue 29): who talks to whom, from GET /api/v1/flows.
//
// What the page keeps in its URL (/flows?…), what it asks the collector,
// how an edge reads (its state by text and shape, not colour alone), and
// the graph's layout: a small layered layout of its own, deterministic
// (the same answer draws the same picture) and bounded (it lays out at most
// GRAPH_MAX_EDGES edges, whatever the answer holds; the rest are in the
// table).
import type { FlowEdge, FlowEnd, FlowOwner, FlowTreeLink } from './api';
import { normState, sev } from './state';
import { type TimeRange, parseInstant, rangeFromParams, rangeToParams } from './timerange';
import { formatCompact } from './format';
import { nodeHref, withParams } from './route';

export type { FlowEdge, FlowEdgeDetail, FlowEnd, FlowGraph, FlowOwner, FlowPoint, FlowTreeLink } from './api';
export type FlowState = 'ok' | 'warn' | 'crit';
export type Reasons = Record<string, number>;

// ---- The page's state, all of it in the URL ----

export type FlowSort = 'worst' | 'traffic';
export type FlowView = 'graph' | 'table';
export const FLOW_SORTS: FlowSort[] = ['worst', 'traffic'];
/** The collector's default page and its largest (GET /flows limit). */
export const FLOW_PAGE = 500;
export const FLOW_MAX_PAGE = 5000;
/** The graph draws at most this many edges (the first of the page, in its order); the table lists every one. */
export const GRAPH_MAX_EDGES = 1000;

export type TableCol = 'state' | 'client' | 'server' | 'opened' | 'failed' | 'resets' | 'drops' | 'retransmits' | 'rtt' | 'bytes';
export const TABLE_COLS: TableCol[] = ['state', 'client', 'server', 'opened', 'failed', 'resets', 'drops', 'retransmits', 'rtt', 'bytes'];

export interface FlowFilters {
  tenant: string;
  labels: string[];
  namespace: string;
  owner: string;
  /** One vertex of the map, exactly (an owner's key, or an address no owner explains): only its edges. */
  vertex: string;
  sort: FlowSort;
  limit: number;
  cursor: string;
  /** A past instant: the window ends then. */
  at: number | null;
  range: TimeRange;
  view: FlowView;
  /** The edge whose detail is open. */
  edge: string;
  /** The table's own order (of the page it shows). */
  tsort: TableCol | null;
  tdesc: boolean;
}

export function flowFiltersFrom(p: URLSearchParams): FlowFilters {
  const sort = p.get('sort');
  const limit = Number.parseInt(p.get('limit') ?? '', 10);
  const tsort = p.get('tsort') as TableCol | null;
  return {
    tenant: p.get('tenant')?.trim() ?? '',
    labels: p.getAll('label').map((l) => l.trim()).filter((l) => /^[^=]+=/.test(l)),
    namespace: p.get('namespace')?.trim() ?? '',
    owner: p.get('owner') ?? '',
    vertex: p.get('vertex') ?? '',
    sort: sort === 'traffic' ? 'traffic' : 'worst',
    limit: Number.isFinite(limit) && limit > 0 ? Math.min(limit, FLOW_MAX_PAGE) : FLOW_PAGE,
    cursor: p.get('cursor') ?? '',
    at: parseInstant(p.get('at')),
    range: rangeFromParams(p),
    view: p.get('view') === 'table' ? 'table' : 'graph',
    edge: p.get('edge') ?? '',
    tsort: tsort && (TABLE_COLS as string[]).includes(tsort) ? tsort : null,
    tdesc: p.get('tdir') !== 'asc',
  };
}

/** The URL parameters of a state (the inverse of flowFiltersFrom; defaults are left out). */
export function flowParams(f: FlowFilters): URLSearchParams {
  return withParams(new URLSearchParams(), {
    tenant: f.tenant || null,
    label: f.labels,
    namespace: f.namespace || null,
    owner: f.owner || null,
    vertex: f.vertex || null,
    sort: f.sort === 'worst' ? null : f.sort,
    limit: f.limit === FLOW_PAGE ? null : String(f.limit),
    cursor: f.cursor || null,
    at: f.at === null ? null : new Date(f.at).toISOString(),
    ...rangeToParams(f.range),
    view: f.view === 'graph' ? null : f.view,
    edge: f.edge || null,
    tsort: f.tsort,
    tdir: f.tsort && !f.tdesc ? 'asc' : null,
  });
}

export const flowsHref = (params?: URLSearchParams) => {
  const s = params?.toString() ?? '';
  return s ? `/flows?${s}` : '/flows';
};

/** Go duration text for a window in ms (the API's window=): 90m, 6h, 7d read as minutes/hours. */
function windowText(ms: number): string {
  if (ms % 3600000 === 0) return `${ms / 3600000}h`;
  if (ms % 60000 === 0) return `${ms / 60000}m`;
  return `${Math.max(1, Math.round(ms / 1000))}s`;
}

/** The time part of a query: from & to, or window (& at). A customer's tenant is never sent: the collector scopes it. */
export function flowTimeQuery(f: Pick<FlowFilters, 'range' | 'at'>): Record<string, string> {
  if (f.range.kind === 'absolute') return { from: new Date(f.range.from).toISOString(), to: new Date(f.range.to).toISOString() };
  const q: Record<string, string> = { window: windowText(f.range.ms) };
  if (f.at !== null) q.at = new Date(f.at).toISOString();
  return q;
}

/** GET /api/v1/flows?… for a state; staff says whether a tenant may be asked for. */
export function flowsQuery(f: FlowFilters, staff: boolean): URLSearchParams {
  const q = new URLSearchParams(flowTimeQuery(f));
  if (staff && f.tenant) q.set('tenant', f.tenant);
  f.labels.forEach((l) => q.append('label', l));
  if (f.namespace) q.set('namespace', f.namespace);
  if (f.owner.trim()) q.set('owner', f.owner.trim());
  if (f.vertex) q.set('vertex', f.vertex);
  q.set('sort', f.sort);
  q.set('limit', String(f.limit));
  if (f.cursor) q.set('cursor', f.cursor);
  return q;
}

export function flowEdgeQuery(f: FlowFilters, key: string): URLSearchParams {
  const q = new URLSearchParams(flowTimeQuery(f));
  q.set('key', key);
  return q;
}

// ---- How an edge reads ----

export function edgeState(e: Pick<FlowEdge, 'state'>): FlowState {
  const s = normState(e.state);
  return s === 'crit' || s === 'warn' ? s : 'ok';
}

/** The shape that tells a state without its colour (the legend says the same). */
export const STATE_SHAPE: Record<FlowState, string> = { ok: '—', warn: '╌', crit: '◆' };
export const STATE_TEXT: Record<FlowState, string> = { ok: 'OK', warn: 'WARN', crit: 'CRIT' };

export const sumReasons = (r: Reasons | null | undefined) => Object.values(r ?? {}).reduce((a, b) => a + (Number.isFinite(b) ? b : 0), 0);

export function edgeResets(e: FlowEdge): number {
  const r = e.resets ?? {};
  return sumReasons(r.client_sent) + sumReasons(r.client_received) + sumReasons(r.server_sent) + sumReasons(r.server_received);
}

export const edgeDrops = (e: FlowEdge) => sumReasons(e.drops?.client) + sumReasons(e.drops?.server);
/** 1,000 B, 4.88 KiB. */
export function formatBytes(v: number): string {
  const c = formatCompact(v, 'B');
  return /[KMGT]i$/.test(c) ? `${c.slice(0, -2)} ${c.slice(-2)}B` : `${c} B`;
}

export const edgeBytes = (e: FlowEdge) => (e.bytes_client_to_server ?? 0) + (e.bytes_server_to_client ?? 0);

const baseName = (end: FlowEnd, owners: Map<string, FlowOwner>) => {
  const o = end.owner ? owners.get(end.owner) : undefined;
  return o ? o.name : end.label || end.address || 'outside';
};

/** " (outside)" for an address no owner of the caller's tenant held in the window. */
const outsideMark = (end: FlowEnd, owners: Map<string, FlowOwner>, name: string) =>
  end.outside && !(end.owner && owners.has(end.owner)) && !name.startsWith('outside') ? ' (outside)' : '';

/**
 * An end as the page names it: the owner's name when the answer holds the
 * owner, else the label the collector gave (an address, or "outside").
 * Never anything else: a peer outside the caller's tenant has no name here.
 */
export function endName(end: FlowEnd, owners: Map<string, FlowOwner>): string {
  const n = baseName(end, owners);
  return n + outsideMark(end, owners, n);
}

/** The server end with its port: "shop/db-0:5432". */
export function serverName(end: FlowEnd, owners: Map<string, FlowOwner>): string {
  let n = baseName(end, owners);
  if (end.port && !n.endsWith(`:${end.port}`)) n = `${n}:${end.port}`;
  return n + outsideMark(end, owners, n);
}

/** A sentence for an edge: who, how it is, why. */
export function edgeSummary(e: FlowEdge, owners: Map<string, FlowOwner>): string {
  const s = edgeState(e);
  const why = e.explain ? `: ${e.explain}` : '';
  return `${endName(e.client, owners)} → ${serverName(e.server, owners)}, ${STATE_TEXT[s]}${why}`;
}

/**
 * The vertex= of an end (GET /flows): its owner's key, else its address.
 * '' for an end with neither, which no filter can name.
 */
export const vertexOf = (end: FlowEnd): string => end.owner ?? end.address ?? '';

/** A vertex= as the page names it: its owner's name when the answer holds it, else the address. */
export const vertexName = (vertex: string, owners: Map<string, FlowOwner>): string => owners.get(vertex)?.name ?? vertex;

export function ownerIndex(owners: FlowOwner[]): Map<string, FlowOwner> {
  return new Map(owners.map((o) => [o.key, o]));
}

/** The table's value of a column, for sorting. */
export function colValue(e: FlowEdge, c: TableCol, owners: Map<string, FlowOwner>): number | string {
  switch (c) {
    case 'state':
      return sev(edgeState(e));
    case 'client':
      return endName(e.client, owners);
    case 'server':
      return serverName(e.server, owners);
    case 'opened':
      return e.opened;
    case 'failed':
      return e.failed;
    case 'resets':
      return edgeResets(e);
    case 'drops':
      return edgeDrops(e);
    case 'retransmits':
      return e.retransmits;
    case 'rtt':
      return e.rtt_p99_ms ?? -1;
    case 'bytes':
      return edgeBytes(e);
  }
}

/** The page's edges in the table's order; without a column, the collector's (worst or traffic first). */
export function sortEdges(edges: FlowEdge[], owners: Map<string, FlowOwner>, col: TableCol | null, desc: boolean): FlowEdge[] {
  if (!col) return edges;
  const dir = desc ? -1 : 1;
  return edges
    .map((e, i) => ({ e, i, v: colValue(e, col, owners) }))
    .sort((a, b) => {
      const c = typeof a.v === 'string' ? a.v.localeCompare(b.v as string) : a.v - (b.v as number);
      return c !== 0 ? c * dir : a.i - b.i;
    })
    .map((x) => x.e);
}

// ---- Links into the trees ----

/**
 * The node page of an end, with a metric open: the collector's path for
 * the end (the node's page at the window's end) when it is one of this UI's
 * node pages, else the node's page at the map's time.
 */
export function endTreeHref(link: Pick<FlowTreeLink, 'node' | 'path'>, metric: string | undefined, f: Pick<FlowFilters, 'range' | 'at'>): string {
  let p: URLSearchParams;
  let path: string;
  const given = link.path && link.path.startsWith('/nodes/') && !link.path.startsWith('//') ? new URL(link.path, 'http://nbs.invalid') : null;
  if (given && given.origin === 'http://nbs.invalid') {
    path = given.pathname;
    p = new URLSearchParams(given.search);
  } else {
    path = nodeHref(link.node);
    p = new URLSearchParams();
    if (f.range.kind === 'absolute') {
      p.set('from', new Date(f.range.from).toISOString());
      p.set('to', new Date(f.range.to).toISOString());
    } else {
      if (f.range.last !== '1h') p.set('range', f.range.last);
      if (f.at !== null) p.set('at', new Date(f.at).toISOString());
    }
  }
  if (metric) p.set('metric', metric);
  const q = p.toString();
  return q ? `${path}?${q}` : path;
}

/** The metric an evidence query (/api/v1/nodes/n1/events?metric=…) is about. */
export function evidenceMetric(path: string): string | null {
  try {
    return new URL(path, 'http://nbs.invalid').searchParams.get('metric');
  } catch {
    return null;
  }
}

// ---- Layout ----

export interface LaidNode {
  id: string;
  label: string;
  /** What a pointer's hover says of it: the owner's kind, workload and node, or that it is only an address. */
  title: string;
  /** An owner of the tenant, or only an address (or "outside"). */
  outside: boolean;
  namespace: string;
  /** Its vertex= (vertexOf), '' when it has none: clicking it shows only its edges. */
  vertex: string;
  x: number;
  y: number;
  state: FlowState;
}

export interface LaidEdge {
  key: string;
  from: string;
  to: string;
  d: string;
  /** The middle of the curve, where a CRIT edge carries its mark. */
  mx: number;
  my: number;
  state: FlowState;
}

export interface Layout {
  nodes: LaidNode[];
  edges: LaidEdge[];
  width: number;
  height: number;
  /** How many edges of the input the layout left out (past maxEdges). */
  omitted: number;
}

export interface LayoutOptions {
  maxEdges?: number;
  /** Rows in a column before the column wraps into another. */
  maxRows?: number;
  /** Layers (columns of callers → callees) at most: longer chains and cycles fold into the last. */
  maxLayers?: number;
  colWidth?: number;
  rowHeight?: number;
  margin?: number;
}

const endId = (end: FlowEnd) => (end.owner ? `o:${end.owner}` : `p:${end.label || end.address || 'outside'}`);

/**
 * Lays out the first maxEdges edges: owners and peers in layers from callers
 * (left) to callees (right), each layer's rows ordered by namespace, then by
 * the mean row of their neighbours (two sweeps, to untangle), then by name.
 * Everything is a pure function of the edges' order and content: no
 * randomness, no iteration to convergence — at most maxLayers passes over the
 * edges plus sorts, so it costs O(maxLayers·E + V log V) for E ≤ maxEdges.
 */
export function layoutGraph(edges: FlowEdge[], owners: Map<string, FlowOwner>, opts: LayoutOptions = {}): Layout {
  const maxEdges = opts.maxEdges ?? GRAPH_MAX_EDGES;
  const maxRows = Math.max(1, opts.maxRows ?? 40);
  const maxLayers = Math.max(1, opts.maxLayers ?? 5);
  const colW = opts.colWidth ?? 220;
  const rowH = opts.rowHeight ?? 26;
  const margin = opts.margin ?? 16;
  const drawn = edges.slice(0, Math.max(0, maxEdges));

  // The vertices, in order of first appearance.
  const verts = new Map<string, { id: string; label: string; outside: boolean; namespace: string; vertex: string; state: FlowState; first: number }>();
  const vertex = (end: FlowEnd, st: FlowState) => {
    const id = endId(end);
    let v = verts.get(id);
    if (!v) {
      const o = end.owner ? owners.get(end.owner) : undefined;
      v = { id, label: endName(end, owners), outside: !o, namespace: o?.namespace ?? '', vertex: vertexOf(end), state: 'ok', first: verts.size };
      verts.set(id, v);
    }
    if (sev(st) > sev(v.state)) v.state = st;
    return id;
  };
  const links = drawn.map((e) => {
    const st = edgeState(e);
    return { e, from: vertex(e.client, st), to: vertex(e.server, st), st };
  });

  // Layers: a callee sits one right of its furthest caller, capped.
  const layer = new Map<string, number>();
  verts.forEach((_, id) => layer.set(id, 0));
  for (let pass = 0; pass < maxLayers; pass++) {
    let changed = false;
    for (const l of links) {
      if (l.from === l.to) continue;
      const want = Math.min(maxLayers - 1, layer.get(l.from)! + 1);
      if (layer.get(l.to)! < want) {
        layer.set(l.to, want);
        changed = true;
      }
    }
    if (!changed) break;
  }

  // Rows: by namespace (outside peers last), name, first appearance; then barycentres.
  const layers: string[][] = Array.from({ length: maxLayers }, () => []);
  verts.forEach((_, id) => layers[layer.get(id)!].push(id));
  const base = (a: string, b: string) => {
    const va = verts.get(a)!;
    const vb = verts.get(b)!;
    if (va.outside !== vb.outside) return va.outside ? 1 : -1;
    return va.namespace.localeCompare(vb.namespace) || va.label.localeCompare(vb.label) || va.first - vb.first;
  };
  layers.forEach((l) => l.sort(base));
  const row = new Map<string, number>();
  const setRows = () => layers.forEach((l) => l.forEach((id, i) => row.set(id, i)));
  setRows();
  const nbrs = new Map<string, string[]>();
  for (const l of links) {
    if (l.from === l.to) continue;
    (nbrs.get(l.from) ?? nbrs.set(l.from, []).get(l.from)!).push(l.to);
    (nbrs.get(l.to) ?? nbrs.set(l.to, []).get(l.to)!).push(l.from);
  }
  for (let sweep = 0; sweep < 2; sweep++) {
    const order = sweep === 0 ? layers : [...layers].reverse();
    for (const l of order) {
      const bary = new Map<string, number>();
      for (const id of l) {
        const ns = nbrs.get(id);
        bary.set(id, ns && ns.length ? ns.reduce((a, n) => a + row.get(n)!, 0) / ns.length : row.get(id)!);
      }
      l.sort((a, b) => bary.get(a)! - bary.get(b)! || base(a, b));
      l.forEach((id, i) => row.set(id, i));
    }
  }

  // Positions: a layer taller than maxRows wraps into more columns.
  const pos = new Map<string, { x: number; y: number }>();
  let col = 0;
  let rows = 0;
  for (const l of layers) {
    if (l.length === 0) continue;
    const cols = Math.ceil(l.length / maxRows);
    const per = Math.ceil(l.length / cols);
    l.forEach((id, i) => {
      pos.set(id, { x: margin + (col + Math.floor(i / per)) * colW, y: margin + (i % per) * rowH + rowH / 2 });
    });
    rows = Math.max(rows, per);
    col += cols;
  }
  const width = margin * 2 + Math.max(1, col) * colW;
  const height = margin * 2 + Math.max(1, rows) * rowH;

  const r = 6;
  // Edges between the same two vertices (one owner's ports, or both
  // directions) fan out, each a few pixels more than the one before; a pair
  // counts its edges in the answer's order, so the worst is the first.
  const pairs = new Map<string, number>();
  const laidEdges: LaidEdge[] = links.map(({ e, from, to, st }) => {
    const a = pos.get(from)!;
    const b = pos.get(to)!;
    const pair = from < to ? `${from}\u0000${to}` : `${to}\u0000${from}`;
    const k = pairs.get(pair) ?? 0;
    pairs.set(pair, k + 1);
    const fan = k === 0 ? 0 : (k % 2 === 1 ? -1 : 1) * Math.ceil(k / 2) * 9;
    let d: string;
    let mx: number;
    let my: number;
    if (from === to) {
      // To itself: a small loop above the vertex.
      const h = 18 + Math.abs(fan);
      d = `M${a.x},${a.y - r}c-14,-${h} 14,-${h} 0,0`;
      mx = a.x;
      my = a.y - r - h * 0.72;
    } else if (b.x > a.x) {
      const x1 = a.x + r;
      const x2 = b.x - r - 3;
      const c = (x2 - x1) / 2;
      // Along one row, a slight bow: a straight line has no height to point
      // at (and would hide behind the edges of the rows between).
      const bow = (Math.abs(b.y - a.y) < 1 ? Math.min(rowH * 0.6, 6 + (x2 - x1) * 0.03) : 0) - fan;
      d = `M${x1},${a.y}C${x1 + c},${a.y - bow} ${x2 - c},${b.y - bow} ${x2},${b.y}`;
      mx = (x1 + x2) / 2;
      my = (a.y + b.y) / 2 - bow * 0.75;
    } else {
      // Back (or within one column): an arc out to the right and back in.
      const bulge = colW * 0.35 + Math.abs(b.y - a.y) * 0.1 + Math.abs(fan);
      const x1 = a.x + r;
      const x2 = b.x + r + 3;
      d = `M${x1},${a.y}C${x1 + bulge},${a.y} ${x2 + bulge},${b.y} ${x2},${b.y}`;
      mx = Math.max(x1, x2) + bulge * 0.75;
      my = (a.y + b.y) / 2;
    }
    return { key: e.key, from, to, d, mx, my, state: st };
  });

  const nodes: LaidNode[] = [];
  verts.forEach((v, id) => {
    const p = pos.get(id)!;
    const o = id.startsWith('o:') ? owners.get(id.slice(2)) : undefined;
    const title = o
      ? `${o.name}: ${o.kind}${o.workload && o.workload !== o.name ? ` of ${o.workload}` : ''} on node ${o.node}`
      : `${v.label}: an address no owner of this map held`;
    nodes.push({ id, label: v.label, title, outside: v.outside, namespace: v.namespace, vertex: v.vertex, x: p.x, y: p.y, state: v.state });
  });
  return { nodes, edges: laidEdges, width, height, omitted: Math.max(0, edges.length - drawn.length) };
}

