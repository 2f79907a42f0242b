// The flow map page (/flows): owners as vertices, edges coloured by their
// state and marked by shape, the explaining figure on hover and focus; a
// table of the same page beside it; at phone width a list. flows.ts holds
// the URL state, the query and the layout.
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { api } from '../api';
import { useSession } from '../auth';
import {
  type FlowEdge,
  type FlowFilters,
  type FlowGraph,
  type FlowOwner,
  type FlowState,
  type Layout,
  type TableCol,
  FLOW_MAX_PAGE,
  GRAPH_MAX_EDGES,
  STATE_SHAPE,
  STATE_TEXT,
  edgeBytes,
  edgeDrops,
  edgeResets,
  edgeState,
  edgeSummary,
  endName,
  flowFiltersFrom,
  flowParams,
  flowsHref,
  flowsQuery,
  formatBytes,
  layoutGraph,
  ownerIndex,
  serverName,
  sortEdges,
  vertexName,
} from '../flows';
import { formatCount, formatNumber, formatTime } from '../format';
import { usePoll } from '../hooks';
import { navigate, withParams } from '../route';
import { type TimeRange, toLocalInput } from '../timerange';
import { FlowEdgePanel } from './FlowMapEdge';
import { TimeRangePicker } from './TimeRangePicker';
import { Empty, ErrorBox, Loading, StaleNotice, TableWrap } from './common';

/** A live window (relative, no at=) is asked again this often. */
export const FLOWS_REFRESH_MS = 30000;
const NARROW = '(max-width: 700px)';

/** Whether the screen is phone-narrow: the map is a list there. */
export function useNarrow(): boolean {
  const mq = typeof matchMedia === 'function' ? matchMedia(NARROW) : null;
  const [narrow, setNarrow] = useState(() => !!mq?.matches);
  useEffect(() => {
    if (!mq) return;
    const on = () => setNarrow(mq.matches);
    mq.addEventListener?.('change', on);
    return () => mq.removeEventListener?.('change', on);
  }, []);
  return narrow;
}

export function FlowMapPage({ params }: { params: URLSearchParams }) {
  const session = useSession();
  const staff = session?.me.role !== 'customer';
  const f = flowFiltersFrom(params);
  const q = flowsQuery(f, staff);
  const live = f.range.kind === 'relative' && f.at === null;
  const polled = usePoll(`flows:${q}`, (s) => api.flows(q, s), live ? FLOWS_REFRESH_MS : 0);
  const narrow = useNarrow();
  // The cursors of the pages before this one, to go back a page.
  const [back, setBack] = useState<string[]>([]);

  useEffect(() => {
    document.title = 'Flow map · NBS';
  }, []);

  const go = (changes: Partial<FlowFilters>, replace = true) => navigate(flowsHref(flowParams({ ...f, ...changes })), { replace });
  // A filter, order or time changed: back to the first page, no edge open.
  const refilter = (changes: Partial<FlowFilters>) => {
    setBack([]);
    go({ cursor: '', edge: '', ...changes });
  };
  // A vertex clicked (or its × or a click again): only its edges, or all
  // again. A new history entry, so Back undoes it too.
  const refocusVertex = useRef('');
  const showVertex = (vertex: string) => {
    setBack([]);
    go({ cursor: '', edge: '', vertex }, false);
  };
  const data = polled.data;
  const owners = useMemo(() => ownerIndex(data?.owners ?? []), [data]);
  const edges = data?.edges ?? [];
  const filtered = !!(f.tenant || f.labels.length || f.namespace || f.owner || f.vertex);

  return (
    <div class="page flows">
      <div class="page-head">
        <h1>Flow map</h1>
        <span class="muted updated" aria-live="off">
          {data && `${formatCount(data.total_edges)} edge${data.total_edges === 1 ? '' : 's'} · ${data.resolution} resolution${live ? `, every ${FLOWS_REFRESH_MS / 1000}s` : ''}`}
        </span>
      </div>
      <FlowToolbar f={f} staff={staff} onChange={refilter} vertexLabel={vertexName(f.vertex, owners)} onVertex={showVertex} />
      {f.at !== null && (
        <p class="viewing" role="status">
          <span>
            Viewing the {f.range.kind === 'relative' ? f.range.last : 'window'} up to <strong>{formatTime(f.at)}</strong>.
          </span>
          <button type="button" class="btn btn-sm" onClick={() => refilter({ at: null })}>
            Back to now
          </button>
        </p>
      )}
      {data && <StaleNotice error={polled.error} />}
      {polled.loading && !polled.error && <Loading what="the flow map" />}
      {!data && polled.error && <ErrorBox title="Cannot load the flow map" error={polled.error} onRetry={polled.refresh} />}
      {data && (
        <>
          <FlowSummary data={data} f={f} narrow={narrow} csv={`/api/v1/flows?${withParams(q, { format: 'csv' })}`} />
          {edges.length === 0 ? (
            <Empty>{filtered ? 'No flow matches these filters in this window.' : 'No flow was reported in this window. Agents report flows when started with --flows.'}</Empty>
          ) : narrow ? (
            <FlowList edges={edges} owners={owners} onOpen={(key) => go({ edge: key }, false)} />
          ) : (
            <>
              <div class="view-toggle" role="group" aria-label="View">
                <button type="button" class="btn btn-sm" aria-pressed={f.view === 'graph'} onClick={() => go({ view: 'graph' })}>
                  Graph
                </button>
                <button type="button" class="btn btn-sm" aria-pressed={f.view === 'table'} onClick={() => go({ view: 'table' })}>
                  Table
                </button>
              </div>
              {f.view === 'graph' ? (
                <FlowGraphView
                  edges={edges}
                  owners={owners}
                  selected={f.edge}
                  onOpen={(key) => go({ edge: key }, false)}
                  vertex={f.vertex}
                  onVertex={(v) => showVertex(v === f.vertex ? '' : v)}
                  refocusRef={refocusVertex}
                />
              ) : (
                <FlowTable edges={edges} owners={owners} f={f} onSort={(tsort, tdesc) => go({ tsort, tdesc })} onOpen={(key) => go({ edge: key }, false)} />
              )}
            </>
          )}
          <FlowPager
            data={data}
            hasPrev={f.cursor !== ''}
            onFirst={() => {
              setBack([]);
              go({ cursor: '', edge: '' }, false);
            }}
            onPrev={() => {
              const prev = back[back.length - 1] ?? '';
              setBack(back.slice(0, -1));
              go({ cursor: prev, edge: '' }, false);
            }}
            onNext={() => {
              setBack([...back, f.cursor]);
              go({ cursor: data.next_cursor ?? '', edge: '' }, false);
            }}
          />
        </>
      )}
      {f.edge && <FlowEdgePanel key={f.edge} edgeKey={f.edge} f={f} onClose={() => go({ edge: '' }, false)} />}
    </div>
  );
}

/** The owner search waits for typing to pause this long: each map is a heavy read at the collector. */
export const OWNER_SEARCH_MS = 350;

function FlowToolbar({
  f,
  staff,
  onChange,
  vertexLabel,
  onVertex,
}: {
  f: FlowFilters;
  staff: boolean;
  onChange: (c: Partial<FlowFilters>) => void;
  vertexLabel: string;
  onVertex: (vertex: string) => void;
}) {
  // What is typed, ahead of the URL by up to OWNER_SEARCH_MS.
  const [owner, setOwner] = useState(f.owner);
  const typed = useRef<ReturnType<typeof setTimeout> | undefined>(undefined);
  useEffect(() => {
    if (typed.current === undefined) setOwner(f.owner);
  }, [f.owner]);
  useEffect(() => () => clearTimeout(typed.current), []);
  const searchOwner = (v: string, now = false) => {
    setOwner(v);
    clearTimeout(typed.current);
    const go = () => {
      typed.current = undefined;
      onChange({ owner: v });
    };
    if (now) go();
    else typed.current = setTimeout(go, OWNER_SEARCH_MS);
  };
  const [label, setLabel] = useState('');
  const [labelErr, setLabelErr] = useState('');
  const addLabel = (e: Event) => {
    e.preventDefault();
    const l = label.trim();
    if (!/^[^=\s]+=\S*$/.test(l)) {
      setLabelErr('A label is key=value.');
      return;
    }
    setLabelErr('');
    setLabel('');
    if (!f.labels.includes(l)) onChange({ labels: [...f.labels, l] });
  };
  return (
    <div class="toolbar flow-toolbar" role="search" aria-label="Flows">
      <label class="field-inline grow">
        <span>Owner</span>
        <input
          type="search"
          placeholder="part of an owner's name or an address"
          value={owner}
          maxLength={256}
          onInput={(e) => searchOwner((e.currentTarget as HTMLInputElement).value)}
          onKeyDown={(e) => {
            if (e.key === 'Escape') searchOwner('', true);
            if (e.key === 'Enter') searchOwner((e.currentTarget as HTMLInputElement).value, true);
          }}
        />
      </label>
      <label class="field-inline">
        <span>Namespace</span>
        <input type="text" size={10} value={f.namespace} maxLength={253} onChange={(e) => onChange({ namespace: (e.currentTarget as HTMLInputElement).value.trim() })} />
      </label>
      {staff && (
        <label class="field-inline">
          <span>Tenant</span>
          <input type="text" size={10} value={f.tenant} maxLength={253} onChange={(e) => onChange({ tenant: (e.currentTarget as HTMLInputElement).value.trim() })} />
        </label>
      )}
      <form class="field-inline label-add" onSubmit={addLabel}>
        <label class="field-inline">
          <span>Label</span>
          <input
            type="text"
            size={12}
            placeholder="key=value"
            value={label}
            maxLength={512}
            aria-invalid={labelErr ? true : undefined}
            aria-describedby={labelErr ? 'flow-label-err' : undefined}
            onInput={(e) => setLabel((e.currentTarget as HTMLInputElement).value)}
          />
        </label>
        <button type="submit" class="btn btn-sm">
          Add
        </button>
        {labelErr && (
          <span id="flow-label-err" class="field-error" role="alert">
            {labelErr}
          </span>
        )}
      </form>
      <label class="field-inline">
        <span>Sort</span>
        <select value={f.sort} onChange={(e) => onChange({ sort: (e.currentTarget as HTMLSelectElement).value === 'traffic' ? 'traffic' : 'worst' })}>
          <option value="worst">worst first</option>
          <option value="traffic">traffic first</option>
        </select>
      </label>
      <TimeRangePicker range={f.range} onChange={(r: TimeRange) => onChange({ range: r, ...(r.kind === 'absolute' ? { at: null } : {}) })} />
      {f.range.kind === 'relative' && (
        <label class="field-inline">
          <span>Ending</span>
          <input
            type="datetime-local"
            class="flow-at"
            value={f.at === null ? '' : toLocalInput(f.at)}
            title="Time travel: the window ends then (empty: now)"
            onChange={(e) => {
              const v = (e.currentTarget as HTMLInputElement).value;
              const t = v ? new Date(v).getTime() : NaN;
              onChange({ at: Number.isFinite(t) ? t : null });
            }}
          />
        </label>
      )}
      {f.vertex && (
        <button type="button" class="tag tag-filter vertex-filter" onClick={() => onVertex('')} title={`Show every edge again, not only ${vertexLabel}'s`}>
          only {vertexLabel}'s edges <span aria-hidden="true">×</span>
          <span class="sr-only">, remove</span>
        </button>
      )}
      {f.labels.map((l) => (
        <button key={l} type="button" class="tag tag-filter" onClick={() => onChange({ labels: f.labels.filter((x) => x !== l) })} title={`Stop filtering on ${l}`}>
          {l} <span aria-hidden="true">×</span>
          <span class="sr-only">remove</span>
        </button>
      ))}
    </div>
  );
}

/** The counts of the page, what the graph leaves out, and what agents folded into "other". */
function FlowSummary({ data, f, narrow, csv }: { data: FlowGraph; f: FlowFilters; narrow: boolean; csv: string }) {
  const n = data.edges.length;
  const counts: Record<FlowState, number> = { crit: 0, warn: 0, ok: 0 };
  data.edges.forEach((e) => counts[edgeState(e)]++);
  const o = data.other;
  const drawn = Math.min(n, GRAPH_MAX_EDGES);
  return (
    <div class="flow-summary">
      <p class="flow-counts" role="status">
        {(['crit', 'warn', 'ok'] as FlowState[]).map((s) => (
          <span key={s} class={`count-btn st-${s}`}>
            <span class="count-n">{formatCount(counts[s])}</span> <span class="count-l">{STATE_TEXT[s]}</span>
          </span>
        ))}{' '}
        <span class="muted">
          on this page: {formatCount(n)} of {formatCount(data.total_edges)} edges, {f.sort === 'worst' ? 'worst' : 'most traffic'} first ·{' '}
          <a href={csv} download>
            CSV of this page
          </a>
        </span>
      </p>
      {!narrow && f.view === 'graph' && n > drawn && (
        <p class="note graph-cap">
          The graph draws the first {formatCount(drawn)} edges of this page; the table holds all {formatCount(n)}
          {data.total_edges > n ? ', and Next the rest' : ''}.
        </p>
      )}
      {o && (o.edges_folded > 0 || o.holders_left_out > 0) && (
        <p class="note flow-other">
          <strong>Other</strong>:{' '}
          {o.edges_folded > 0 && (
            <>
              {formatCount(o.edges_folded)} edge{o.edges_folded === 1 ? '' : 's'} fell past the agents' per-node cap
              {o.nodes_capped > 0 ? ` on ${formatCount(o.nodes_capped)} node${o.nodes_capped === 1 ? '' : 's'}` : ''}; together{' '}
              {formatCount(o.opened)} opened, {formatCount(o.failed)} failed, {formatCount(o.resets)} resets, {formatCount(o.drops)}{' '}
              drops, {formatCount(o.retransmits)} retransmits, {formatBytes(o.bytes)}.{' '}
            </>
          )}
          {o.holders_left_out > 0 && (
            <span class="holders-left-out">
              {formatCount(o.holders_left_out)} address holder{o.holders_left_out === 1 ? ' was' : 's were'} left out of agents'
              reports past the most a report carries: peers at those addresses show as addresses, not owners.
            </span>
          )}
        </p>
      )}
    </div>
  );
}

/** The legend: each state by its line and mark, not colour alone. */
function Legend() {
  return (
    <ul class="flow-legend" aria-label="Legend">
      {(['crit', 'warn', 'ok'] as FlowState[]).map((s) => (
        <li key={s}>
          <svg width="34" height="12" aria-hidden="true" class="legend-line">
            <path class={`fe st-${s}`} d="M1,6H33" />
            {s === 'crit' && <rect class="fe-mark" x="13" y="2" width="8" height="8" transform="rotate(45 17 6)" />}
          </svg>
          {STATE_TEXT[s]} {s === 'crit' ? '(thick, ◆)' : s === 'warn' ? '(dashed)' : '(thin)'}
        </li>
      ))}
      <li>
        <span class="fv-mark fv-outside" aria-hidden="true" /> an address or outside
      </li>
    </ul>
  );
}

export function FlowGraphView({
  edges,
  owners,
  selected,
  onOpen,
  vertex = '',
  onVertex,
  refocusRef,
}: {
  edges: FlowEdge[];
  owners: Map<string, FlowOwner>;
  selected: string;
  onOpen: (key: string) => void;
  /** The vertex whose edges alone are shown ('' for none). */
  vertex?: string;
  /** A vertex clicked, or Enter on it; without it vertices are not controls. */
  onVertex?: (vertex: string) => void;
  /** The vertex to focus once drawn (set as the keyboard chooses one). */
  refocusRef?: { current: string };
}) {
  const layout: Layout = useMemo(() => layoutGraph(edges, owners), [edges, owners]);
  const byKey = useMemo(() => new Map(edges.map((e) => [e.key, e])), [edges]);
  // The vertices a click filters by, in the layout's order: the arrows move along them.
  const vnodes = useMemo(() => (onVertex ? layout.nodes.filter((n) => n.vertex) : []), [layout, onVertex]);
  const vindex = useMemo(() => new Map(vnodes.map((n, i) => [n.id, i])), [vnodes]);
  const [focus, setFocus] = useState(0);
  const [vfocus, setVfocus] = useState(0);
  // A vertex chosen by keyboard keeps the focus once the map is drawn
  // again, its edges only (or all of them again): the page keeps the ref,
  // since the graph is drawn anew from the new answer.
  const own = useRef('');
  const refocus = refocusRef ?? own;
  useEffect(() => {
    const v = refocus.current;
    const el = v ? [...(svg.current?.querySelectorAll<SVGElement>('[data-vertex]') ?? [])].find((x) => x.getAttribute('data-vertex') === v) : undefined;
    if (!el) return;
    refocus.current = '';
    setVfocus(Number(el.getAttribute('data-vi')));
    el.focus();
  }, [layout]);
  const [tip, setTip] = useState<string | null>(null);
  const svg = useRef<SVGSVGElement>(null);
  const tipEdge = tip ? layout.edges.find((e) => e.key === tip) : undefined;
  const tipData = tip ? byKey.get(tip) : undefined;

  const focusEdge = (i: number) => {
    const n = layout.edges.length;
    const j = ((i % n) + n) % n;
    setFocus(j);
    (svg.current?.querySelector(`[data-i="${j}"]`) as SVGElement | null)?.focus();
  };
  const focusVertex = (i: number) => {
    const n = vnodes.length;
    const j = ((i % n) + n) % n;
    setVfocus(j);
    (svg.current?.querySelector(`[data-vi="${j}"]`) as SVGElement | null)?.focus();
  };
  const keyFrom = (t: EventTarget | null) => (t instanceof Element ? t.getAttribute('data-key') : null);
  const vertexFrom = (t: EventTarget | null) => (t instanceof Element ? (t.closest('[data-vertex]')?.getAttribute('data-vertex') ?? null) : null);

  return (
    <div class="flow-graph-wrap">
      <Legend />
      <p class="muted small">
        Callers left, callees right. Hover or focus an edge for its figure; click or Enter opens it. Click an owner (or Tab to the owners, Enter) for its edges
        only; again, or ×, for all. Keyboard: Tab into the map, ← → or ↑ ↓ move between edges (and between owners).
      </p>
      <div class="flow-graph" tabIndex={-1}>
        <svg
          ref={svg}
          width={layout.width}
          height={layout.height}
          viewBox={`0 0 ${layout.width} ${layout.height}`}
          role="group"
          aria-label={`Flow map: ${layout.nodes.length} owners and peers, ${layout.edges.length} edges`}
          onMouseOver={(e) => setTip(keyFrom(e.target))}
          onMouseOut={(e) => keyFrom(e.target) && setTip(null)}
          onFocusIn={(e) => {
            const k = keyFrom(e.target);
            setTip(k);
            const i = (e.target as Element).getAttribute?.('data-i');
            if (i !== null && i !== undefined) setFocus(Number(i));
            const vi = (e.target as Element).getAttribute?.('data-vi');
            if (vi !== null && vi !== undefined) setVfocus(Number(vi));
          }}
          onFocusOut={() => setTip(null)}
          onClick={(e) => {
            const v = vertexFrom(e.target);
            if (v && onVertex) return onVertex(v);
            const k = keyFrom(e.target);
            if (k) onOpen(k);
          }}
          onKeyDown={(e) => {
            const v = (e.target as Element).getAttribute?.('data-vi') != null ? vertexFrom(e.target) : null;
            if (v && onVertex) {
              const i = vindex.get((e.target as Element).getAttribute('data-id') ?? '') ?? 0;
              const to: Record<string, number> = { ArrowRight: i + 1, ArrowDown: i + 1, ArrowLeft: i - 1, ArrowUp: i - 1, Home: 0, End: vnodes.length - 1 };
              if (e.key === 'Enter' || e.key === ' ') {
                e.preventDefault();
                refocus.current = v;
                onVertex(v);
              } else if (e.key in to) {
                e.preventDefault();
                focusVertex(to[e.key]);
              }
              return;
            }
            const k = keyFrom(e.target);
            if (!k) return;
            if (e.key === 'Enter' || e.key === ' ') {
              e.preventDefault();
              onOpen(k);
            } else if (e.key === 'ArrowRight' || e.key === 'ArrowDown') {
              e.preventDefault();
              focusEdge(focus + 1);
            } else if (e.key === 'ArrowLeft' || e.key === 'ArrowUp') {
              e.preventDefault();
              focusEdge(focus - 1);
            } else if (e.key === 'Home') {
              e.preventDefault();
              focusEdge(0);
            } else if (e.key === 'End') {
              e.preventDefault();
              focusEdge(layout.edges.length - 1);
            }
          }}
        >
          <defs>
            {(['ok', 'warn', 'crit'] as FlowState[]).map((s) => (
              <marker key={s} id={`fa-${s}`} class={`fa st-${s}`} viewBox="0 0 8 8" refX="7" refY="4" markerUnits="userSpaceOnUse" markerWidth="9" markerHeight="9" orient="auto">
                <path d="M0,0L8,4L0,8z" />
              </marker>
            ))}
          </defs>
          {/* The worst are drawn last, over the others; the keyboard goes worst first (data-i). */}
          <g class="fes">
            {layout.edges.map((_, j) => {
              const i = layout.edges.length - 1 - j;
              const le = layout.edges[i];
              const e = byKey.get(le.key)!;
              return (
                <path
                  key={le.key}
                  class={`fe st-${le.state}${le.key === selected ? ' fe-sel' : ''}`}
                  d={le.d}
                  marker-end={`url(#fa-${le.state})`}
                  data-key={le.key}
                  data-i={i}
                  data-state={le.state}
                  tabindex={i === focus ? 0 : -1}
                  role="button"
                  aria-label={edgeSummary(e, owners)}
                />
              );
            })}
          </g>
          <g class="fe-marks" aria-hidden="true">
            {layout.edges
              .filter((le) => le.state === 'crit')
              .map((le) => (
                <rect key={le.key} class="fe-mark" x={le.mx - 4} y={le.my - 4} width="8" height="8" transform={`rotate(45 ${le.mx} ${le.my})`} />
              ))}
          </g>
          <g class="fvs">
            {layout.nodes.map((n) => {
              const vi = vindex.get(n.id);
              const control = vi !== undefined;
              return (
                <g
                  key={n.id}
                  class={`fv st-${n.state}${n.outside ? ' fv-outside' : ''}${control ? ' fv-btn' : ''}${control && n.vertex === vertex ? ' fv-sel' : ''}`}
                  data-id={n.id}
                  data-vertex={control ? n.vertex : undefined}
                  data-vi={vi}
                  role={control ? 'button' : undefined}
                  tabindex={control ? (vi === Math.min(vfocus, vnodes.length - 1) ? 0 : -1) : undefined}
                  aria-pressed={control ? n.vertex === vertex : undefined}
                  aria-label={control ? `Only the edges of ${n.label}` : undefined}
                >
                  <title>{n.title}</title>
                  <circle cx={n.x} cy={n.y} r="6" />
                  <text x={n.x + 9} y={n.y + 4}>
                    {n.label.length > 28 ? `${n.label.slice(0, 27)}…` : n.label}
                  </text>
                </g>
              );
            })}
          </g>
        </svg>
        {tipEdge && tipData && (
          <div class={`flow-tip st-${tipEdge.state}`} role="tooltip" style={{ left: `${tipEdge.mx + 8}px`, top: `${tipEdge.my + 8}px` }}>
            <strong>
              {STATE_SHAPE[tipEdge.state]} {STATE_TEXT[tipEdge.state]}
            </strong>{' '}
            {endName(tipData.client, owners)} → {serverName(tipData.server, owners)}
            <div>{tipData.explain || figures(tipData)}</div>
          </div>
        )}
      </div>
    </div>
  );
}

/** The counters in one line, for an edge with no explanation (an OK one). */
export function figures(e: FlowEdge): string {
  const parts = [`${formatCount(e.opened)} opened`];
  if (e.failed) parts.push(`${formatCount(e.failed)} failed`);
  const r = edgeResets(e);
  if (r) parts.push(`${formatCount(r)} resets`);
  const d = edgeDrops(e);
  if (d) parts.push(`${formatCount(d)} drops`);
  if (e.retransmits) parts.push(`${formatCount(e.retransmits)} retransmits`);
  if (e.rtt_p99_ms !== null && e.rtt_p99_ms !== undefined) parts.push(`RTT p99 ${formatNumber(e.rtt_p99_ms)} ms`);
  return parts.join(', ');
}

/** Rows the table draws at first (and each "Show more" adds): a page may hold 5,000. */
export const TABLE_ROWS = 500;

const COL_TEXT: Record<TableCol, string> = {
  state: 'State',
  client: 'Client',
  server: 'Server',
  opened: 'Opened',
  failed: 'Failed',
  resets: 'Resets',
  drops: 'Drops',
  retransmits: 'Retrans.',
  rtt: 'RTT p99',
  bytes: 'Bytes',
};

export function FlowTable({
  edges,
  owners,
  f,
  onSort,
  onOpen,
}: {
  edges: FlowEdge[];
  owners: Map<string, FlowOwner>;
  f: FlowFilters;
  onSort: (col: TableCol | null, desc: boolean) => void;
  onOpen: (key: string) => void;
}) {
  const sorted = useMemo(() => sortEdges(edges, owners, f.tsort, f.tdesc), [edges, owners, f.tsort, f.tdesc]);
  const [shown, setShown] = useState(TABLE_ROWS);
  const rows = sorted.length > shown ? sorted.slice(0, shown) : sorted;
  const cols = Object.keys(COL_TEXT) as TableCol[];
  return (
    <>
      <TableWrap label="Flows">
        <table class="flow-table">
          <thead>
            <tr>
              {cols.map((c) => {
                const on = f.tsort === c;
                const text = c === 'client' || c === 'server';
                return (
                  <th key={c} scope="col" aria-sort={on ? (f.tdesc ? 'descending' : 'ascending') : undefined} class={text ? undefined : 'num'}>
                    <button
                      type="button"
                      class="th-sort"
                      onClick={() => (on ? (f.tdesc === text ? onSort(null, true) : onSort(c, !f.tdesc)) : onSort(c, !text))}
                      title={on ? 'Change the order' : `Sort by ${COL_TEXT[c]}`}
                    >
                      {COL_TEXT[c]}
                      {on && <span aria-hidden="true">{f.tdesc ? ' ▾' : ' ▴'}</span>}
                    </button>
                  </th>
                );
              })}
            </tr>
          </thead>
          <tbody>
            {rows.map((e) => {
              const s = edgeState(e);
              return (
                <tr key={e.key} data-key={e.key} data-state={s} class={e.key === f.edge ? 'sel' : undefined}>
                  <td>
                    <span class={`badge badge-sm st-${s}`}>
                      <span aria-hidden="true">{STATE_SHAPE[s]} </span>
                      {STATE_TEXT[s]}
                    </span>
                  </td>
                  <td>
                    <button type="button" class="link-btn" onClick={() => onOpen(e.key)} title={e.explain || figures(e)}>
                      {endName(e.client, owners)}
                    </button>
                  </td>
                  <td>{serverName(e.server, owners)}</td>
                  <td class="num">{formatCount(e.opened)}</td>
                  <td class="num">{formatCount(e.failed)}</td>
                  <td class="num">{formatCount(edgeResets(e))}</td>
                  <td class="num">{formatCount(edgeDrops(e))}</td>
                  <td class="num">{formatCount(e.retransmits)}</td>
                  <td class="num">{e.rtt_p99_ms === null || e.rtt_p99_ms === undefined ? '—' : `${formatNumber(e.rtt_p99_ms)} ms`}</td>
                  <td class="num">{formatBytes(edgeBytes(e))}</td>
                </tr>
              );
            })}
          </tbody>
        </table>
      </TableWrap>
      {sorted.length > rows.length && (
        <p class="table-more">
          <span class="muted">
            {formatCount(rows.length)} of this page's {formatCount(sorted.length)} rows shown.
          </span>{' '}
          <button type="button" class="btn btn-sm" onClick={() => setShown(shown + TABLE_ROWS)}>
            Show {formatCount(Math.min(TABLE_ROWS, sorted.length - rows.length))} more
          </button>
        </p>
      )}
    </>
  );
}

/** At phone width: one item per edge, worst first, each opening its detail. */
export function FlowList({ edges, owners, onOpen }: { edges: FlowEdge[]; owners: Map<string, FlowOwner>; onOpen: (key: string) => void }) {
  return (
    <ul class="flow-list" aria-label="Flows">
      {edges.map((e) => {
        const s = edgeState(e);
        return (
          <li key={e.key} class={`st-${s}`} data-key={e.key} data-state={s}>
            <button type="button" class="flow-item" onClick={() => onOpen(e.key)}>
              <span class={`badge badge-sm st-${s}`}>
                <span aria-hidden="true">{STATE_SHAPE[s]} </span>
                {STATE_TEXT[s]}
              </span>{' '}
              <span class="flow-ends">
                {endName(e.client, owners)} → {serverName(e.server, owners)}
              </span>
              <span class="flow-why muted small">{e.explain || figures(e)}</span>
            </button>
          </li>
        );
      })}
    </ul>
  );
}

function FlowPager({ data, hasPrev, onFirst, onPrev, onNext }: { data: FlowGraph; hasPrev: boolean; onFirst: () => void; onPrev: () => void; onNext: () => void }) {
  if (!hasPrev && !data.next_cursor) return null;
  return (
    <nav class="pager" aria-label="Flow pages">
      <button type="button" class="btn btn-sm" disabled={!hasPrev} onClick={onFirst}>
        « First
      </button>
      <button type="button" class="btn btn-sm" disabled={!hasPrev} onClick={onPrev}>
        ‹ Previous
      </button>
      <span class="muted" aria-live="polite">
        {formatCount(data.edges.length)} edges on this page of {formatCount(data.total_edges)} (at most {formatCount(FLOW_MAX_PAGE)} a page)
      </span>
      <button type="button" class="btn btn-sm" disabled={!data.next_cursor} onClick={onNext}>
        Next ›
      </button>
    </nav>
  );
}

