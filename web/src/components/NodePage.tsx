import { useCallback, useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { type ApiError, type NodeSummary, SERIES_BATCH_MAX, type TreeNode, type TreeTime, api, isAbort } from '../api';
import { useCan, useSession } from '../auth';
import { gridValues } from '../chartdata';
import { formatAgo, formatDuration, formatTime } from '../format';
import { useNow, usePoll } from '../hooks';
import { fleetHref, linkClick, navigate, nodeHref, withParams } from '../route';
import { normState, stateLabel } from '../state';
import { type TimeRange, rangeFromParams, rangeToParams, resolveRange, stepFor } from '../timerange';
import { allIds, ancestors, customerRoots, defaultOpen, explaining, findNode, goneId, treeTimeFromParams } from '../tree';
import { MetricView } from './MetricView';
import { TenancyNotices, TenantEditor } from './NodeTenancy';
import { TimeRangePicker } from './TimeRangePicker';
import { Tree } from './Tree';
import { ErrorBox, Loading, StaleNotice, StateBadge } from './common';

const LIVE_SECONDS = 300; // each expand request keeps the full tree streaming this long
const LIVE_RENEW_MS = 240_000;

export function treeRefreshMs(intervalMs: number | undefined): number {
  return Math.min(10_000, Math.max(2_000, intervalMs || 10_000));
}

/** Around a lone ?at=, the charts show this much before and after it. */
const AT_SPAN_MS = 30 * 60_000;

/** The charts' range: the URL's, or around ?at= when only an instant is given. */
export function pageRange(params: URLSearchParams, past: TreeTime | null): TimeRange {
  const r = rangeFromParams(params);
  if (r.kind === 'relative' && past?.at !== undefined) return { kind: 'absolute', from: past.at - AT_SPAN_MS, to: past.at + AT_SPAN_MS };
  return r;
}

export function NodePage({ node, params }: { node: string; params: URLSearchParams }) {
  const summary = usePoll(`node:${node}`, (s) => api.node(node, s), 10_000);
  const intervalMs = summary.data?.interval_ms;
  // A past time in the URL (?at=, or an absolute ?from=&to=): the tree as of then, read once.
  const past = treeTimeFromParams(params);
  const pastKey = past ? `${past.at ?? ''}|${past.from ?? ''}|${past.to ?? ''}` : 'live';
  const tree = usePoll(`tree:${node}:${pastKey}`, (s) => api.tree(node, s, past), past ? 0 : treeRefreshMs(intervalMs));
  const range = pageRange(params, past);
  const metric = params.get('metric');
  const live = params.get('live') === '1';
  const customer = useSession()?.me.role === 'customer';
  const roots = useMemo(() => (customer ? customerRoots(tree.data?.roots ?? []) : tree.data?.roots ?? []), [tree.data, customer]);

  const go = useCallback((changes: Record<string, string | string[] | null>, replace = false) => navigate(nodeHref(node, withParams(params, changes)), { replace }), [node, params]);

  useEffect(() => {
    document.title = `${node} · NBS`;
  }, [node]);

  // Branches: open by default where a raised child is; the URL keeps what the user changed.
  const userOpen = params.getAll('open');
  const userClosed = params.getAll('closed');
  const defaults = useMemo(() => defaultOpen(roots), [tree.data]);
  const backToLive = () => go({ at: null, from: null, to: null, range: null });
  const openSet = useMemo(() => {
    const s = new Set([...defaults, ...userOpen]);
    userClosed.forEach((id) => s.delete(id));
    if (metric) ancestors(metric).forEach((id) => userClosed.includes(id) || s.add(id));
    // A selected owner child that is gone shows: its branch's fold opens too.
    if (metric && metric.includes('/')) s.add(goneId(metric.slice(0, metric.lastIndexOf('/'))));
    return s;
  }, [defaults, params]);
  const toggle = (id: string, open: boolean) => {
    const o = new Set(userOpen);
    const c = new Set(userClosed);
    if (open) {
      c.delete(id);
      if (!defaults.has(id)) o.add(id);
    } else {
      o.delete(id);
      if (defaults.has(id) || (metric && ancestors(metric).includes(id))) c.add(id);
    }
    go({ open: [...o], closed: [...c] }, true);
  };
  const setAll = (open: boolean) => go(open ? { open: allIds(roots), closed: null } : { open: null, closed: allIds(roots) }, true);

  // Without a metric in the URL, show the one that explains the worst root.
  const explains = useMemo(() => explaining(roots)?.id ?? null, [tree.data]);
  const autoSelected = useRef(false);
  useEffect(() => {
    if (!tree.data || autoSelected.current) return;
    autoSelected.current = true;
    if (!metric && explains) go({ metric: explains }, true);
  }, [tree.data]);

  // Live mode asks the collector to expand the node: only for a role that may.
  const can = useCan();
  useLiveExpand(node, live && can.expand && !past); // a past tree is not live
  const [liveErr, setLiveErr] = useState<string>('');
  useEffect(() => {
    const on = (e: Event) => setLiveErr((e as CustomEvent<string>).detail);
    window.addEventListener('nbs:live-error', on);
    return () => window.removeEventListener('nbs:live-error', on);
  }, []);
  useEffect(() => setLiveErr(''), [live]);
  // Triggered sources the agent detached (over budget), as the expand answered.
  const [detached, setDetached] = useState<string[]>([]);
  useEffect(() => {
    const on = (e: Event) => setDetached((e as CustomEvent<string[]>).detail);
    window.addEventListener('nbs:live-detached', on);
    return () => window.removeEventListener('nbs:live-detached', on);
  }, []);
  useEffect(() => setDetached([]), [live]);

  const [visible, setVisible] = useState<string[]>([]);
  const sparks = useSparks(node, visible, range, intervalMs ?? 10_000);

  const selected = metric ? findNode(roots, metric) : null;
  // A range picked or zoomed replaces a lone ?at=: relative is live again, absolute a past window.
  const setRange = (r: TimeRange) => go({ ...rangeToParams(r), at: null });

  if (summary.error?.notFound || tree.error?.notFound) {
    return (
      <div class="page">
        <h1>{node}</h1>
        <ErrorBox title={`Node “${node}” is not known to this collector`} error={(summary.error ?? tree.error)!} />
        <p>
          <a href={fleetHref()} onClick={linkClick}>
            Back to the fleet
          </a>
        </p>
      </div>
    );
  }

  return (
    <div class="page node-page">
      <NodeHeader
        node={node}
        summary={summary.data}
        error={summary.error}
        live={live && can.expand && !past}
        onLive={can.expand && !past ? (on) => go({ live: on ? '1' : null }, true) : undefined}
        liveErr={liveErr}
        treeTime={tree.data?.time ?? null}
        canDelete={can.manageNodes}
        canBind={can.bindLabels}
        onRebound={() => {
          summary.refresh();
          tree.refresh();
        }}
      />
      {live && detached.length > 0 && (
        <p class="muted small live-detached" role="status">
          {detached.join('; ')}
        </p>
      )}
      <div class="toolbar">
        <TimeRangePicker range={range} onChange={setRange} />
        <div class="toolbar-spacer" />
        <button type="button" class="btn btn-sm btn-quiet" onClick={() => setAll(true)} disabled={!roots.length}>
          Expand all
        </button>
        <button type="button" class="btn btn-sm btn-quiet" onClick={() => setAll(false)} disabled={!roots.length}>
          Collapse all
        </button>
        {(userOpen.length > 0 || userClosed.length > 0) && (
          <button type="button" class="btn btn-sm btn-quiet" onClick={() => go({ open: null, closed: null }, true)} title="Open exactly the raised branches again">
            Reset to raised
          </button>
        )}
      </div>
      {past && <Viewing past={past} onLive={backToLive} />}
      {!past && tree.data?.stale && (
        <p class="viewing stale-note" role="status">
          <span class="tag tag-warn">stale</span> This node has not reported since {formatTime(tree.data.time)} ({formatAgo(tree.data.time)}): the values below are its last, not current ones.
        </p>
      )}
      {tree.data && <StaleNotice error={tree.error} />}
      <div class="node-layout">
        <section class="panel tree-panel" aria-label="Metric tree">
          {tree.loading && !tree.error && <Loading what="the metric tree" />}
          {!tree.data && tree.error && <ErrorBox title="Cannot load the metric tree" error={tree.error} onRetry={tree.refresh} />}
          {tree.data && (
            <Tree
              roots={roots}
              isOpen={(id) => openSet.has(id)}
              onToggle={toggle}
              selected={metric}
              onSelect={(id) => go({ metric: id })}
              sparks={sparks}
              explains={explains}
              onVisible={setVisible}
              windowS={tree.data.window_s}
              newest={tree.data.time ?? null}
              stale={!past && tree.data.stale}
              past={!!past}
            />
          )}
          {tree.data && !tree.data.time && <p class="muted small">This node has not sent a report yet; values appear with its first report.</p>}
        </section>
        <section class="panel metric-panel" aria-label="Metric detail" tabIndex={0}>
          {metric ? (
            <MetricView
              node={node}
              metricId={metric}
              tn={selected}
              range={range}
              labels={summary.data?.labels ?? {}}
              intervalMs={intervalMs ?? 10_000}
              onZoom={(from, to) => setRange({ kind: 'absolute', from, to })}
              onThresholdChange={tree.refresh}
              asOf={past ? past.at ?? past.to : undefined}
              stale={!past && !!tree.data?.stale}
            />
          ) : (
            <div class="hint">
              <h2>Pick a metric</h2>
              <p>
                {tree.data && roots.every((r) => normState(r.state) === 'ok')
                  ? 'Every root of this node is OK. Select a row to see its chart, thresholds and evidence.'
                  : 'Select a row of the tree to see its chart, thresholds and evidence.'}
              </p>
              <p class="muted small">Keyboard: ↑ ↓ move, → opens, ← closes, Enter selects.</p>
            </div>
          )}
        </section>
      </div>
    </div>
  );
}

/** Says the page shows a past time, which, and offers the way back to live. */
function Viewing({ past, onLive }: { past: TreeTime; onLive: () => void }) {
  const at = past.at ?? past.to!;
  return (
    <p class="viewing" role="status">
      <span>
        Viewing <strong>{formatTime(at)}</strong>
        {past.from !== undefined && past.to !== undefined && (
          <span class="muted">
            {' '}
            (window {formatTime(past.from)} – {formatTime(past.to)})
          </span>
        )}
        : the tree and its states as they were then, to the minute.
      </span>
      <button type="button" class="btn btn-sm" onClick={onLive}>
        Back to live
      </button>
    </p>
  );
}

function NodeHeader({
  node,
  summary,
  error,
  live,
  onLive,
  liveErr,
  treeTime,
  canDelete,
  canBind,
  onRebound,
}: {
  node: string;
  summary?: NodeSummary;
  error: ApiError | null;
  live: boolean;
  onLive?: (on: boolean) => void; // absent: the role may not expand nodes
  liveErr: string;
  treeTime: string | null;
  canDelete?: boolean;
  /** An admin binds its labels, its tenant among them. */
  canBind?: boolean;
  onRebound?: () => void;
}) {
  const [deleting, setDeleting] = useState(false);
  const [binding, setBinding] = useState(false);
  const [bound, setBound] = useState('');
  const bindBtn = useRef<HTMLButtonElement>(null);
  const now = useNow(1000);
  const s = normState(summary?.state);
  const missing = summary?.capabilities?.filter((c) => !c.available) ?? [];
  // A row its tenant lost to another: what it reported before, never live.
  const retired = !!summary?.retired_at;
  const closeBinding = () => {
    setBinding(false);
    requestAnimationFrame(() => bindBtn.current?.focus());
  };
  return (
    <div class="node-head">
      <div class="node-title">
        <h1>{node}</h1>
        {summary && <StateBadge state={s} />}
        {summary && !retired && (
          <span class={`conn ${summary.connected ? 'conn-on' : 'conn-off'}`}>
            <span class="conn-dot" aria-hidden="true" />
            {summary.connected ? 'connected' : 'disconnected'}
          </span>
        )}
        {retired && <span class="tag tag-warn">moved to another tenant</span>}
        {summary?.stale && !retired && <span class="tag tag-warn">stale</span>}
        <div class="toolbar-spacer" />
        {onLive && !retired && (
          <button
            type="button"
            class={`btn live-btn${live ? ' live-on' : ''}`}
            aria-pressed={live}
            onClick={() => onLive(!live)}
            title="Live mode asks the agent to stream its full tree (not only raised branches) while you watch"
          >
            <span class="live-dot" aria-hidden="true" /> {live ? 'Live: full tree' : 'Go live'}
          </button>
        )}
        {canBind && summary && !retired && !binding && (
          <button
            ref={bindBtn}
            type="button"
            class="btn btn-quiet"
            onClick={() => {
              setBinding(true);
              setBound('');
            }}
          >
            Tenant &amp; labels…
          </button>
        )}
        {canDelete && !deleting && !retired && (
          <button type="button" class="btn btn-quiet" onClick={() => setDeleting(true)}>
            Delete node…
          </button>
        )}
      </div>
      {canDelete && deleting && <DeleteNode node={node} onCancel={() => setDeleting(false)} />}
      {summary && <TenancyNotices summary={summary} />}
      {liveErr && (
        <p class="field-error" role="alert">
          Live mode: {liveErr}
        </p>
      )}
      {error && !summary && <ErrorBox title="Cannot load the node" error={error} />}
      {summary && (
        <dl class="node-facts">
          <div>
            <dt>Last report</dt>
            <dd title={summary.last_report ?? ''}>{formatAgo(summary.last_report ?? treeTime, now)}</dd>
          </div>
          <div>
            <dt>Interval</dt>
            <dd>{summary.interval_ms ? formatDuration(summary.interval_ms) : '—'}</dd>
          </div>
          <div>
            <dt>Agent</dt>
            <dd>{summary.agent_version || '—'}</dd>
          </div>
          <div>
            <dt>Kernel</dt>
            <dd>{summary.kernel_release || '—'}</dd>
          </div>
          <div>
            <dt>Tenant</dt>
            <dd class="node-tenant">{summary.tenant || <span class="muted">none</span>}</dd>
          </div>
          <div>
            <dt>Labels</dt>
            <dd class="labels">
              {Object.keys(summary.labels ?? {}).length === 0 && <span class="muted">none</span>}
              {Object.entries(summary.labels ?? {}).map(([k, v]) => (
                <a key={k} class="tag" href={fleetHref(new URLSearchParams({ [`l.${k}`]: v }))} onClick={linkClick} title={`Fleet nodes with ${k}=${v}`}>
                  {k}={v}
                </a>
              ))}
            </dd>
          </div>
        </dl>
      )}
      {canBind && binding && summary && (
        <TenantEditor
          node={node}
          tenant={summary.tenant ?? ''}
          onClose={closeBinding}
          onBound={(msg) => {
            setBound(msg);
            closeBinding();
            onRebound?.();
          }}
        />
      )}
      {bound && (
        <p class="saved" role="status">
          {bound}
        </p>
      )}
      {missing.length > 0 && (
        <ul class="capabilities" aria-label="Missing sources">
          {missing.map((c) => (
            <li key={c.name}>
              <span class="tag tag-warn">{capabilityLabel(c.name)} unavailable</span> {c.reason}
            </li>
          ))}
        </ul>
      )}
      {summary && normState(summary.state) !== 'ok' && summary.roots.length > 0 && (
        <p class="sr-only" aria-live="polite">
          {node} is {stateLabel[s]}
        </p>
      )}
    </div>
  );
}

/**
 * A capability as the header names it: staff get the agent's name
 * (owner.oci_bundles), a customer the topic the collector maps it to
 * (pod_names → "pod names", collector/api/customer.go).
 */
export function capabilityLabel(name: string): string {
  return name.includes('.') ? name : name.replace(/_/g, ' ');
}

/** While live, asks the collector to have the agent stream its full tree, renewed before it lapses. */
function useLiveExpand(node: string, live: boolean) {
  useEffect(() => {
    if (!live) return;
    let stopped = false;
    const ask = () =>
      api.expand(node, LIVE_SECONDS).then(
        (res) => {
          window.dispatchEvent(new CustomEvent('nbs:live-error', { detail: '' }));
          const notes = (res.triggered ?? [])
            .filter((t) => !t.attached)
            .map((t) => `${t.metric.split('/').pop()} ${t.note}`);
          window.dispatchEvent(new CustomEvent('nbs:live-detached', { detail: notes }));
        },
        (err: ApiError) => {
          if (stopped) return;
          const msg = err.notFound && /route/i.test(err.message) ? 'this collector cannot expand nodes.' : err.message;
          window.dispatchEvent(new CustomEvent('nbs:live-error', { detail: msg }));
        },
      );
    void ask();
    const id = setInterval(ask, LIVE_RENEW_MS);
    return () => {
      stopped = true;
      clearInterval(id);
    };
  }, [node, live]);
}

/**
 * Sparkline values for the visible rows: one batch request (GET …/series/batch, at most
 * SERIES_BATCH_MAX metrics each) for the rows not fetched lately, refreshed every 30 s.
 */
function useSparks(node: string, ids: string[], range: TimeRange, intervalMs: number): Record<string, (number | null)[]> {
  const [data, setData] = useState<{ key: string; values: Record<string, (number | null)[]> }>({ key: '', values: {} });
  const [tick, setTick] = useState(0);
  const rangeKey = range.kind === 'relative' ? range.last : `${range.from}-${range.to}`;
  const key = `${node}|${rangeKey}`;
  const have = data.key === key ? data.values : {};
  const fetchedAt = useRef(new Map<string, number>());
  const fetchedKey = useRef('');

  useEffect(() => {
    if (range.kind !== 'relative') return;
    const id = setInterval(() => !document.hidden && setTick((t) => t + 1), 30_000);
    return () => clearInterval(id);
  }, [key]);

  useEffect(() => {
    if (fetchedKey.current !== key) {
      fetchedAt.current.clear();
      fetchedKey.current = key;
    }
    const ctl = new AbortController();
    const now = Date.now();
    const todo = ids.filter((id) => now - (fetchedAt.current.get(id) ?? 0) > 25_000);
    if (!todo.length) return;
    const { from, to } = resolveRange(range);
    const step = stepFor(to - from, 60, intervalMs);
    const run = async () => {
      for (let i = 0; i < todo.length && !ctl.signal.aborted; i += SERIES_BATCH_MAX) {
        const chunk = todo.slice(i, i + SERIES_BATCH_MAX);
        chunk.forEach((id) => fetchedAt.current.set(id, Date.now())); // a failing batch is retried on the next tick
        try {
          const got = await api.seriesBatch(node, chunk, from, to, step, ctl.signal);
          const values: Record<string, (number | null)[]> = {};
          got.forEach((s) => (values[s.metric] = gridValues(s, from, to)));
          setData((d) => ({ key, values: { ...(d.key === key ? d.values : {}), ...values } }));
        } catch (err) {
          if (isAbort(err)) {
            chunk.forEach((id) => fetchedAt.current.delete(id)); // not answered: ask again
            return;
          }
        }
      }
    };
    void run();
    return () => ctl.abort();
  }, [key, ids.join('\n'), tick]);

  return have as Record<string, (number | null)[]>;
}

export type { TreeNode };

/**
 * Deleting a node removes it and everything it reported, for good, so the
 * admin types its name first. An agent still running under the name comes
 * back as a new node unless its credential is revoked too.
 */
function DeleteNode({ node, onCancel }: { node: string; onCancel: () => void }) {
  const [typed, setTyped] = useState('');
  const [busy, setBusy] = useState(false);
  const [err, setErr] = useState<ApiError | null>(null);
  const input = useRef<HTMLInputElement>(null);
  useEffect(() => input.current?.focus(), []);
  const submit = async (e: Event) => {
    e.preventDefault();
    if (typed !== node) return;
    setBusy(true);
    setErr(null);
    try {
      await api.deleteNode(node);
      navigate(fleetHref());
    } catch (x) {
      setErr(x as ApiError);
      setBusy(false);
    }
  };
  return (
    <form class="node-delete" onSubmit={submit} onKeyDown={(e) => e.key === 'Escape' && onCancel()} aria-label={`Delete ${node}`}>
      <p>
        Deleting <strong>{node}</strong> removes it and everything it reported (reports, histograms, evidence), for good; its alert history and threshold overrides stay. An agent still
        running under this name registers it again as a new node, unless its credential is revoked (<code>nbs-collector nodes revoke</code>) or
        its certificate withdrawn.
      </p>
      <label for="node-delete-name">Type the node's name to delete it</label>
      <input
        id="node-delete-name"
        ref={input}
        value={typed}
        autocomplete="off"
        spellcheck={false}
        onInput={(e) => setTyped((e.target as HTMLInputElement).value)}
      />
      <button type="submit" class="btn btn-danger" disabled={busy || typed !== node}>
        Delete {node}
      </button>
      <button type="button" class="btn btn-quiet" onClick={onCancel} disabled={busy}>
        Cancel
      </button>
      {err && <ErrorBox title="The node was not deleted" error={err} />}
    </form>
  );
}
