import { useEffect, useMemo, useRef } from 'preact/hooks';
import { type NodeSummary, api } from '../api';
import { formatAgo, formatValue } from '../format';
import { useNow, usePoll } from '../hooks';
import { fleetHref, linkClick, navigate, nodeHref, withParams } from '../route';
import { STATES, normState, sev, stateLabel, worse } from '../state';
import { Empty, ErrorBox, Loading, StaleNotice, StateBadge, StateDot } from './common';

export const FLEET_REFRESH_MS = 5000;

interface Filters {
  q: string;
  states: string[];
  group: string;
  labels: Record<string, string>;
  sort: 'state' | 'name';
}

export function filtersFrom(p: URLSearchParams): Filters {
  const labels: Record<string, string> = {};
  p.forEach((v, k) => {
    if (k.startsWith('l.') && k.length > 2) labels[k.slice(2)] = v;
  });
  return { q: p.get('q') ?? '', states: p.getAll('state').map(normState), group: p.get('group') ?? '', labels, sort: p.get('sort') === 'name' ? 'name' : 'state' };
}

/** Search matches the name, or label=value tokens, every token must match. */
export function matchesSearch(n: NodeSummary, q: string): boolean {
  const tokens = q.toLowerCase().split(/\s+/).filter(Boolean);
  return tokens.every((tok) => {
    const eq = tok.indexOf('=');
    if (eq > 0) {
      const k = tok.slice(0, eq);
      const v = tok.slice(eq + 1);
      return Object.entries(n.labels ?? {}).some(([lk, lv]) => lk.toLowerCase() === k && lv.toLowerCase().includes(v));
    }
    return n.name.toLowerCase().includes(tok) || Object.values(n.labels ?? {}).some((v) => v.toLowerCase() === tok);
  });
}

export function matchesLabels(n: NodeSummary, labels: Record<string, string>): boolean {
  return Object.entries(labels).every(([k, v]) => (n.labels ?? {})[k] === v);
}

function byState(a: NodeSummary, b: NodeSummary) {
  return sev(b.state) - sev(a.state) || a.name.localeCompare(b.name);
}
function byName(a: NodeSummary, b: NodeSummary) {
  return a.name.localeCompare(b.name);
}

export function FleetPage({ params }: { params: URLSearchParams }) {
  const polled = usePoll('fleet', (s) => api.nodes(s), FLEET_REFRESH_MS);
  const f = filtersFrom(params);
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

  const update = (changes: Record<string, string | string[] | null>, replace = true) => navigate(fleetHref(withParams(params, changes)), { replace });

  const nodes = polled.data ?? [];
  const labelKeys = useMemo(() => [...new Set(nodes.flatMap((n) => Object.keys(n.labels ?? {})))].sort(), [nodes]);
  const labelValues = (k: string) => [...new Set(nodes.map((n) => n.labels?.[k]).filter((v): v is string => !!v))].sort();

  const base = nodes.filter((n) => matchesSearch(n, f.q) && matchesLabels(n, f.labels));
  const counts: Record<string, number> = { crit: 0, warn: 0, unknown: 0, ok: 0 };
  base.forEach((n) => counts[normState(n.state)]++);
  const shown = base.filter((n) => f.states.length === 0 || f.states.includes(normState(n.state))).sort(f.sort === 'name' ? byName : byState);

  const groups = new Map<string, NodeSummary[]>();
  if (f.group) {
    for (const n of shown) {
      const g = n.labels?.[f.group] ?? '';
      groups.set(g, [...(groups.get(g) ?? []), n]);
    }
  } else groups.set('', shown);
  const groupNames = [...groups.keys()].sort((a, b) => (a === '' ? 1 : b === '' ? -1 : a.localeCompare(b)));

  const toggleState = (s: string) => update({ state: f.states.includes(s) ? f.states.filter((x) => x !== s) : [...f.states, s] });
  const filtered = f.q !== '' || f.states.length > 0 || Object.keys(f.labels).length > 0;

  return (
    <div class="page fleet">
      <div class="page-head">
        <h1>Fleet</h1>
        <div class="state-counts" role="group" aria-label="Filter by state">
          {STATES.map((s) => (
            <button key={s} type="button" class={`count-btn st-${s}`} aria-pressed={f.states.includes(s)} onClick={() => toggleState(s)} title={`Show only ${stateLabel[s]} nodes`}>
              <span class="count-n">{polled.data ? counts[s] : '–'}</span> <span class="count-l">{stateLabel[s]}</span>
            </button>
          ))}
        </div>
        <span class="muted updated" aria-live="off">
          {polled.data && `${nodes.length} node${nodes.length === 1 ? '' : 's'} · live, every ${FLEET_REFRESH_MS / 1000}s`}
        </span>
      </div>

      <div class="toolbar" role="search">
        <label class="field-inline grow">
          <span class="sr-only">Search nodes</span>
          <input
            ref={search}
            type="search"
            placeholder="Search nodes: name or label=value   ( / )"
            value={f.q}
            onInput={(e) => update({ q: (e.currentTarget as HTMLInputElement).value })}
            onKeyDown={(e) => {
              if (e.key === 'Escape') update({ q: null });
            }}
            aria-keyshortcuts="/"
          />
        </label>
        <label class="field-inline">
          <span>Group by</span>
          <select value={f.group} onChange={(e) => update({ group: (e.currentTarget as HTMLSelectElement).value || null })}>
            <option value="">nothing</option>
            {labelKeys.map((k) => (
              <option key={k} value={k}>
                {k}
              </option>
            ))}
            {f.group && !labelKeys.includes(f.group) && <option value={f.group}>{f.group}</option>}
          </select>
        </label>
        {labelKeys.map((k) => (
          <label key={k} class="field-inline">
            <span>{k}</span>
            <select value={f.labels[k] ?? ''} onChange={(e) => update({ [`l.${k}`]: (e.currentTarget as HTMLSelectElement).value || null })}>
              <option value="">any</option>
              {labelValues(k).map((v) => (
                <option key={v} value={v}>
                  {v}
                </option>
              ))}
            </select>
          </label>
        ))}
        <label class="field-inline">
          <span>Sort</span>
          <select value={f.sort} onChange={(e) => update({ sort: (e.currentTarget as HTMLSelectElement).value === 'name' ? 'name' : null })}>
            <option value="state">worst first</option>
            <option value="name">by name</option>
          </select>
        </label>
        {filtered && (
          <button type="button" class="btn btn-sm btn-quiet" onClick={() => update({ q: null, state: null, ...Object.fromEntries(Object.keys(f.labels).map((k) => [`l.${k}`, null])) })}>
            Clear filters
          </button>
        )}
      </div>

      {polled.data && <StaleNotice error={polled.error} />}
      {polled.loading && !polled.error && <Loading what="the fleet" />}
      {!polled.data && polled.error && <ErrorBox title="Cannot load the fleet" error={polled.error} onRetry={polled.refresh} />}
      {polled.data && nodes.length === 0 && (
        <Empty>
          <p>No node has reported to this collector yet.</p>
          <p class="muted">
            Start an agent pointing at this collector's gRPC address, e.g. <code>nbs-agent --collector.address collector:7701</code>.
          </p>
        </Empty>
      )}
      {polled.data && nodes.length > 0 && shown.length === 0 && <Empty>No node matches these filters.</Empty>}
      {polled.data && shown.length > 0 && (
        <div class="groups">
          {f.group && <p class="sr-only">Showing {shown.length} nodes in {groupNames.length} groups</p>}
          {groupNames.map((g) => {
            const members = groups.get(g)!;
            const worst = members.reduce((w, n) => worse(w, n.state), 'ok');
            return (
              <section key={g || '-'} class="group" aria-label={f.group ? `${f.group} ${g || 'unset'}` : 'Nodes'}>
                {f.group && (
                  <h2 class="group-head">
                    <StateDot state={worst} /> {f.group} = {g || <em>unset</em>} <span class="muted">({members.length})</span>
                  </h2>
                )}
                <ul class="tiles">
                  {members.map((n) => (
                    <li key={n.name}>
                      <NodeTile n={n} now={now} />
                    </li>
                  ))}
                </ul>
              </section>
            );
          })}
        </div>
      )}
    </div>
  );
}

function NodeTile({ n, now }: { n: NodeSummary; now: number }) {
  const s = normState(n.state);
  // A node that moved to another tenant: its former tenant sees what it reported before, never live.
  const status = n.retired_at ? 'moved to another tenant' : n.stale ? `stale, last report ${formatAgo(n.last_report, now)}` : !n.connected ? 'disconnected' : '';
  return (
    <a class={`tile st-${s}`} href={nodeHref(n.name)} onClick={linkClick} data-node={n.name} aria-label={`${n.name}: ${stateLabel[s]}${status ? `, ${status}` : ''}`}>
      <div class="tile-head">
        <span class="tile-name">{n.name}</span>
        <StateBadge state={s} small />
      </div>
      {n.roots.length > 0 ? (
        <ul class="tile-roots">
          {n.roots.map((r) => (
            <li key={r.id} class={`st-${normState(r.state)}`}>
              <StateDot state={r.state} />
              <span class="root-title">{r.title}</span>
              <span class="root-val num">{formatValue(r.value, r.unit)}</span>
            </li>
          ))}
        </ul>
      ) : (
        <div class="tile-roots muted">no report yet</div>
      )}
      <div class="tile-meta">
        {status && <span class="tag tag-warn">{n.retired_at ? 'moved' : n.stale ? 'stale' : 'disconnected'}</span>}
        {Object.entries(n.labels ?? {}).map(([k, v]) => (
          <span key={k} class="tag">
            {k}={v}
          </span>
        ))}
      </div>
    </a>
  );
}
