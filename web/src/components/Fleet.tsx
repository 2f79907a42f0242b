import { useEffect, useRef } from 'preact/hooks';
import { type FleetFilter, type FleetNode, type FleetRoot, type State, api } from '../api';
import { formatAgo, formatValue } from '../format';
import { useNow, usePoll } from '../hooks';
import { fleetHref, linkClick, navigate, nodeHref, withParams } from '../route';
import { STATES, normState, stateLabel } from '../state';
import { Empty, ErrorBox, Loading, StaleNotice, StateBadge, StateDot } from './common';

export const FLEET_REFRESH_MS = 5000;
/** Nodes per page: the collector pages the fleet (GET /fleet, at most 500 a page). */
export const FLEET_PAGE = 100;

type Sort = 'state' | 'name' | 'last_seen';

interface Filters {
  q: string;
  states: State[];
  labels: Record<string, string>;
  sort: Sort;
  page: number;
}

export function filtersFrom(p: URLSearchParams): Filters {
  const labels: Record<string, string> = {};
  p.forEach((v, k) => {
    if (k.startsWith('l.') && k.length > 2) labels[k.slice(2)] = v;
  });
  const sort = p.get('sort');
  const page = Number.parseInt(p.get('page') ?? '1', 10);
  return {
    q: p.get('q') ?? '',
    states: [...new Set(p.getAll('state').map(normState))],
    labels,
    sort: sort === 'name' || sort === 'last_seen' ? sort : 'state',
    page: Number.isFinite(page) && page > 1 ? page : 1,
  };
}

/** What the collector is asked: the search's key=value tokens and the l.key=value parameters are label
 *  selectors, the rest of the search is a name substring. */
export function fleetQuery(f: Filters): FleetFilter {
  const labels = { ...f.labels };
  const words: string[] = [];
  for (const tok of f.q.split(/\s+/).filter(Boolean)) {
    const eq = tok.indexOf('=');
    if (eq > 0) labels[tok.slice(0, eq)] = tok.slice(eq + 1);
    else words.push(tok);
  }
  return {
    q: words.join(' '),
    label: Object.entries(labels).map(([k, v]) => `${k}=${v}`),
    state: f.states,
    sort: f.sort,
    offset: (f.page - 1) * FLEET_PAGE,
    limit: FLEET_PAGE,
  };
}

export function FleetPage({ params }: { params: URLSearchParams }) {
  const f = filtersFrom(params);
  const fq = fleetQuery(f);
  const key = JSON.stringify(fq);
  const polled = usePoll(`fleet:${key}`, (s) => api.fleet(fq, s), FLEET_REFRESH_MS);
  const search = useRef<HTMLInputElement>(null);
  const now = useNow(1000);

  useEffect(() => {
    document.title = 'Fleet · NBS';
    const onKey = (e: KeyboardEvent) => {
      const t = e.target as HTMLElement;
      if (e.key === '/' && !/^(INPUT|SELECT|TEXTAREA)$/.test(t.tagName) && !e.ctrlKey && !e.metaKey && !e.altKey) {
        e.preventDefault();
        search.current?.focus();
      }
    };
    window.addEventListener('keydown', onKey);
    return () => window.removeEventListener('keydown', onKey);
  }, []);

  // Any change of filter or order starts at the first page.
  const update = (changes: Record<string, string | string[] | null>, replace = true) =>
    navigate(fleetHref(withParams(params, { page: null, ...changes })), { replace });
  const toPage = (n: number) => navigate(fleetHref(withParams(params, { page: n > 1 ? String(n) : null })));

  const data = polled.data;
  const nodes = data?.nodes ?? [];
  const toggleState = (s: string) => update({ state: f.states.includes(s as State) ? f.states.filter((x) => x !== s) : [...f.states, s] });
  const labelKeys = Object.keys(f.labels);
  const filtered = f.q !== '' || f.states.length > 0 || labelKeys.length > 0;
  const pages = data ? Math.max(1, Math.ceil(data.matched / FLEET_PAGE)) : 1;
  const first = data ? data.offset + 1 : 0;
  const last = data ? data.offset + nodes.length : 0;

  return (
    <div class="page fleet">
      <div class="page-head">
        <h1>Fleet</h1>
        <div class="state-counts" role="group" aria-label="Filter by state">
          {STATES.map((s) => (
            <button key={s} type="button" class={`count-btn st-${s}`} aria-pressed={f.states.includes(s)} onClick={() => toggleState(s)} title={`Show only ${stateLabel[s]} nodes`}>
              <span class="count-n">{data ? data.counts[s].toLocaleString('en-US') : '–'}</span> <span class="count-l">{stateLabel[s]}</span>
            </button>
          ))}
        </div>
        <span class="muted updated" aria-live="off">
          {data && `${data.total.toLocaleString('en-US')} node${data.total === 1 ? '' : 's'} · live, every ${FLEET_REFRESH_MS / 1000}s`}
        </span>
      </div>

      <div class="toolbar" role="search">
        <label class="field-inline grow">
          <span class="sr-only">Search nodes</span>
          <input
            ref={search}
            type="search"
            placeholder="Search: part of a name, or label=value   ( / )"
            value={f.q}
            maxLength={256}
            onInput={(e) => update({ q: (e.currentTarget as HTMLInputElement).value })}
            onKeyDown={(e) => {
              if (e.key === 'Escape') update({ q: null });
            }}
            aria-keyshortcuts="/"
          />
        </label>
        <label class="field-inline">
          <span>Sort</span>
          <select value={f.sort} onChange={(e) => update({ sort: ((e.currentTarget as HTMLSelectElement).value as Sort) === 'state' ? null : (e.currentTarget as HTMLSelectElement).value })}>
            <option value="state">worst first</option>
            <option value="name">by name</option>
            <option value="last_seen">last seen</option>
          </select>
        </label>
        {labelKeys.map((k) => (
          <button key={k} type="button" class="tag tag-filter" onClick={() => update({ [`l.${k}`]: null })} title={`Stop filtering on ${k}`}>
            {k}={f.labels[k]} <span aria-hidden="true">×</span>
            <span class="sr-only">remove</span>
          </button>
        ))}
        {filtered && (
          <button type="button" class="btn btn-sm btn-quiet" onClick={() => update({ q: null, state: null, ...Object.fromEntries(labelKeys.map((k) => [`l.${k}`, null])) })}>
            Clear filters
          </button>
        )}
      </div>

      {data && <StaleNotice error={polled.error} />}
      {polled.loading && !polled.error && <Loading what="the fleet" />}
      {!data && polled.error && <ErrorBox title="Cannot load the fleet" error={polled.error} onRetry={polled.refresh} />}
      {data && data.total === 0 && !filtered && (
        <Empty>
          <p>No node has reported to this collector yet.</p>
          <p class="muted">
            Start an agent pointing at this collector's gRPC address, e.g. <code>nbs-agent --collector.address collector:7701</code>.
          </p>
        </Empty>
      )}
      {data && (data.total > 0 || filtered) && data.matched === 0 && <Empty>No node matches these filters.</Empty>}
      {data && data.matched > 0 && nodes.length === 0 && (
        <Empty>
          Page {f.page} is past the last ({pages}).{' '}
          <a href={fleetHref(withParams(params, { page: null }))} onClick={linkClick}>
            First page
          </a>
        </Empty>
      )}
      {data && nodes.length > 0 && (
        <>
          <ul class="tiles fleet-tiles" aria-label={`Nodes ${first} to ${last} of ${data.matched}`}>
            {nodes.map((n) => (
              <li key={n.name}>
                <NodeTile n={n} now={now} />
              </li>
            ))}
          </ul>
          <Pager page={f.page} pages={pages} first={first} last={last} matched={data.matched} onPage={toPage} />
        </>
      )}
    </div>
  );
}

function Pager({ page, pages, first, last, matched, onPage }: { page: number; pages: number; first: number; last: number; matched: number; onPage: (n: number) => void }) {
  return (
    <nav class="pager" aria-label="Fleet pages">
      <button type="button" class="btn btn-sm" disabled={page <= 1} onClick={() => onPage(page - 1)}>
        ‹ Previous
      </button>
      <span class="muted" aria-live="polite">
        {first.toLocaleString('en-US')}–{last.toLocaleString('en-US')} of {matched.toLocaleString('en-US')} · page {page} of {pages}
      </span>
      <button type="button" class="btn btn-sm" disabled={page >= pages} onClick={() => onPage(page + 1)}>
        Next ›
      </button>
    </nav>
  );
}

/** "since 5m" for a state that began at iso; empty when it is not known. */
function since(iso: string | null | undefined, now: number): string {
  return iso ? `since ${formatAgo(iso, now).replace(/ ago$/, '')}` : '';
}

function NodeTile({ n, now }: { n: FleetNode; now: number }) {
  const s = normState(n.state);
  // A node that moved to another tenant: its former tenant sees what it reported before, never live.
  const status = n.retired_at ? 'moved to another tenant' : n.stale ? `stale, last report ${formatAgo(n.last_report, now)}` : !n.connected ? 'disconnected' : '';
  const old = !!n.retired_at || n.stale;
  const nodeSince = since(n.since, now);
  return (
    <article class={`tile st-${s}${old ? ' tile-old' : ''}`} data-node={n.name}>
      <div class="tile-head">
        <a class="tile-name tile-link" href={nodeHref(n.name)} onClick={linkClick} aria-label={`${n.name}: ${stateLabel[s]}${status ? `, ${status}` : ''}`}>
          {n.name}
        </a>
        <span class="tile-state">
          <StateBadge state={s} small />
          {nodeSince && <span class="muted tile-since">{nodeSince}</span>}
        </span>
      </div>
      {n.roots.length > 0 ? (
        <ul class="tile-roots" aria-label={old ? 'Last reported values' : 'Roots'}>
          {n.roots.map((r) => (
            <RootLine key={r.id} node={n.name} r={r} old={old} now={now} />
          ))}
        </ul>
      ) : (
        <div class="tile-roots muted">no report yet</div>
      )}
      <div class="tile-meta">
        {status && (
          <span class="tag tag-warn" title={status}>
            {n.retired_at ? 'moved' : n.stale ? `stale · ${formatAgo(n.last_report, now)}` : 'disconnected'}
          </span>
        )}
        {Object.entries(n.labels ?? {}).map(([k, v]) => (
          <span key={k} class="tag">
            {k}={v}
          </span>
        ))}
      </div>
    </article>
  );
}

function RootLine({ node, r, old, now }: { node: string; r: FleetRoot; old: boolean; now: number }) {
  const st = normState(r.state);
  const raisedNow = !old && st !== 'ok';
  const e = r.explains;
  return (
    <li class={`st-${old ? 'unknown' : st}`}>
      <div class="root-line">
        <StateDot state={old ? 'unknown' : r.state} />
        <span class="root-title">{r.title}</span>
        <span class={`root-val num${old ? ' old' : ''}`} title={old ? 'last reported value, not current' : undefined}>
          {old && <span class="sr-only">last reported </span>}
          {formatValue(r.value, r.unit)}
        </span>
      </div>
      {raisedNow && (
        <div class="root-why">
          {e ? (
            <a class="explains-link" href={nodeHref(node, new URLSearchParams({ metric: e.id }))} onClick={linkClick} title={`Open ${e.id} on ${node}`}>
              ↳ {e.title} <span class="num">{formatValue(e.value, e.unit)}</span>
            </a>
          ) : null}
          {r.since && <span class="muted"> {since(r.since, now)}</span>}
        </div>
      )}
    </li>
  );
}
