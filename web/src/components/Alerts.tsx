import { Fragment } from 'preact';
import { useEffect, useMemo, useState } from 'preact/hooks';
import { type Alert, type AlertDetail, type AlertEvaluator, type AlertFilter, type AlertGroup, type Delivery, api } from '../api';
import { alertMetric, alertTreeHref, alertValue, alertWhere, alertWindow, formatSpan, groupAlerts, groupKey, matchNodes, severityState, sortOpen } from '../alerts';
import { useCan } from '../auth';
import { formatAgo, formatCount, formatTime } from '../format';
import { useAction, useNow, usePoll } from '../hooks';
import { stepFor } from '../timerange';
import { Chart } from './Chart';
import { alertHref, alertRulesHref, alertsHref, linkClick, navigate, nodeHref, withParams } from '../route';
import { Empty, ErrorBox, Loading, StaleNotice, TableWrap } from './common';

export const ALERTS_REFRESH_MS = 5000;
const HISTORY_LIMIT = 100;
const MAX_LIMIT = 1000;
// The evaluator writes a heartbeat every second; this much silence means nobody evaluates.
const EVALUATOR_SILENT_MS = 15_000;

export type AlertStateFilter = '' | 'firing' | 'pending' | 'resolved';

export interface AlertFilters {
  state: AlertStateFilter;
  node: string;
  rule: string;
  limit: number;
}

export function alertFiltersFrom(p: URLSearchParams): AlertFilters {
  const st = p.get('state') ?? '';
  const limit = Number(p.get('limit'));
  return {
    state: st === 'firing' || st === 'pending' || st === 'resolved' ? st : '',
    node: p.get('node') ?? '',
    rule: p.get('rule') ?? '',
    limit: Number.isInteger(limit) && limit >= 1 ? Math.min(limit, MAX_LIMIT) : HISTORY_LIMIT,
  };
}

/** Whether the collector answered that it has no such API route (an older collector). */
const noRoute = (e: { notFound: boolean; message: string } | null | undefined) => !!e?.notFound && /route/i.test(e.message);

/** Alerts and Rules, the two pages of alerting (Rules only for a role that may read them). */
export function AlertTabs({ current }: { current: 'alerts' | 'rules' }) {
  const can = useCan();
  if (!can.readRules) return null;
  return (
    <nav class="tabs" aria-label="Alerting">
      <a href={alertsHref()} onClick={linkClick} aria-current={current === 'alerts' ? 'page' : undefined}>
        Alerts
      </a>
      <a href={alertRulesHref()} onClick={linkClick} aria-current={current === 'rules' ? 'page' : undefined}>
        Rules
      </a>
    </nav>
  );
}

export function SeverityBadge({ severity }: { severity: string }) {
  return <span class={`badge badge-sev st-${severityState(severity)}`}>{severity}</span>;
}

export function AlertStateTag({ state }: { state: string }) {
  const cls = state === 'firing' ? 'firing' : state === 'pending' ? 'pending' : 'resolved';
  return (
    <span class={`alert-state as-${cls}`}>
      <span class="as-dot" aria-hidden="true" />
      {state}
    </span>
  );
}

/** "acknowledged" and "silenced until …" tags, for the list and the detail page. */
export function HandledTags({ a, now }: { a: Alert; now: number }) {
  const silenced = a.silenced_until && Date.parse(a.silenced_until) > now;
  if (!a.acknowledged_at && !silenced) return null;
  return (
    <span class="handled-tags">
      {a.acknowledged_at && (
        <span class="tag tag-ack" title={a.acknowledged_by ? `by ${a.acknowledged_by}${a.ack_comment ? `: ${a.ack_comment}` : ''}` : undefined}>
          acknowledged
        </span>
      )}
      {silenced && (
        <span class="tag tag-silenced" title={a.silenced_by ? `by ${a.silenced_by}${a.silence_comment ? `: ${a.silence_comment}` : ''}` : undefined}>
          silenced until {formatTime(a.silenced_until!, new Date(now))}
        </span>
      )}
    </span>
  );
}

function When({ iso, now }: { iso: string | null | undefined; now: number }) {
  if (!iso) return <span class="muted">—</span>;
  return (
    <time dateTime={iso} title={formatTime(iso, new Date(now))}>
      {formatAgo(iso, now)}
    </time>
  );
}

function At({ iso, now }: { iso: string | null | undefined; now: number }) {
  if (!iso) return <span class="muted">—</span>;
  return (
    <time dateTime={iso} title={iso}>
      {formatTime(iso, new Date(now))}
    </time>
  );
}

function EvaluatorNote({ ev, now }: { ev: AlertEvaluator | null | undefined; now: number }) {
  if (!ev) return null;
  if (!ev.holder) {
    return (
      <p class="stale-notice" role="status">
        No collector has taken the lead in evaluating alerts yet; rules are checked once one does.
      </p>
    );
  }
  const silent = now - Date.parse(ev.heartbeat);
  if (silent > EVALUATOR_SILENT_MS) {
    return (
      <p class="stale-notice" role="status">
        The evaluating collector ({ev.holder}) last checked in {formatAgo(ev.heartbeat, now)}: nothing is evaluated until another collector takes over.
      </p>
    );
  }
  return (
    <p class="muted small evaluator">
      Evaluated by <span class="mono">{ev.holder}</span> since {formatTime(ev.since, new Date(now))}.
    </p>
  );
}

function ValueCell({ a }: { a: Alert }) {
  const v = alertValue(a);
  return (
    <td class="num alert-value" data-label="Value" title={a.description || undefined}>
      <strong>{v.value}</strong>
      {v.threshold && <span class="muted"> vs {v.threshold}</span>}
    </td>
  );
}

function WhereCell({ a }: { a: Alert }) {
  if (a.node) {
    return (
      <td class="nowrap" data-label="Node">
        <a href={nodeHref(a.node)} onClick={linkClick}>
          {a.node}
        </a>
      </td>
    );
  }
  return (
    <td data-label="Group">
      <span class="tag">group</span> {alertWhere(a)}
    </td>
  );
}

function MetricCell({ a }: { a: Alert }) {
  const m = a.child || a.metric;
  return (
    <td class="alert-metric" data-label="Metric">
      {m ? (
        <a href={alertTreeHref(a)} onClick={linkClick} class="mono" title={a.node ? `Open ${m} in the tree of ${a.node} over the breach` : 'Open the fleet with these labels'}>
          {m}
        </a>
      ) : (
        <span class="muted">—</span>
      )}
    </td>
  );
}

/** One open alert's row, alone or inside its group. */
function OpenRow({ a, now, inGroup }: { a: Alert; now: number; inGroup?: boolean }) {
  return (
    <tr class={`alert-row sev-${severityState(a.severity)} as-${a.state}${inGroup ? ' in-group' : ''}`} data-alert-id={a.id} data-state={a.state} data-node={a.node ?? ''} data-rule={a.rule}>
      <td class="alert-sev">
        <SeverityBadge severity={a.severity} />
      </td>
      <td class="alert-st">
        <AlertStateTag state={a.state} />
      </td>
      <td class="alert-rule-cell">
        <a href={alertHref(a.id)} onClick={linkClick} class="alert-rule" title={a.summary || 'Details and delivery log'}>
          {a.rule}
        </a>
        <HandledTags a={a} now={now} />
        {a.summary && <div class="muted small alert-summary">{a.summary}</div>}
      </td>
      <WhereCell a={a} />
      <td class="mono" data-label="Root">
        {a.root || <span class="muted">—</span>}
      </td>
      <MetricCell a={a} />
      <ValueCell a={a} />
      <td class="nowrap" data-label="Since">
        <When iso={a.since} now={now} />
      </td>
    </tr>
  );
}

/** A group of at most this many alerts is shown as its alerts; a larger one as one row, opened on demand. */
export const GROUP_INLINE = 5;
/** The page of a group's alerts, and of the open list, asked at a time. */
export const ALERT_PAGE = 100;

const sameGroup = (g: AlertGroup, a: Alert) => a.state !== 'resolved' && groupKey(a) === groupKey(g);

/** What a group's one row says of its size: "2,999 nodes · 3 firing · 2,996 pending". */
export function groupText(g: AlertGroup): string {
  const what = g.first.kind === 'group' ? 'groups' : 'nodes';
  const parts = [`${formatCount(g.count)} ${g.count === 1 ? what.slice(0, -1) : what}`];
  if (g.firing) parts.push(`${formatCount(g.firing)} firing`);
  if (g.pending) parts.push(`${formatCount(g.pending)} pending`);
  return parts.join(' · ');
}

/** Alerts fetched a page at a time from a cursor: the first page polled, the further ones kept until the filter changes. */
function useAlertPages(key: string, f: AlertFilter, enabled: boolean) {
  const first = usePoll(key, (s) => (enabled ? api.alertList(f, s) : Promise.resolve(null)), enabled ? ALERTS_REFRESH_MS : 0);
  const [more, setMore] = useState<{ key: string; alerts: Alert[]; next: string | null; busy: boolean; error: string }>({ key, alerts: [], next: null, busy: false, error: '' });
  const extra = more.key === key ? more : { key, alerts: [], next: null, busy: false, error: '' };
  const seen = new Set<number>();
  const alerts = [...(first.data?.alerts ?? []), ...extra.alerts].filter((a) => !seen.has(a.id) && !!seen.add(a.id));
  const next = extra.alerts.length ? extra.next : (first.data?.nextCursor ?? null);
  const loadMore = async () => {
    if (!next) return;
    setMore({ ...extra, busy: true, error: '' });
    try {
      const pg = await api.alertList({ ...f, cursor: next, groups: false });
      setMore((m) => (m.key === key ? { key, alerts: [...extra.alerts, ...pg.alerts], next: pg.nextCursor, busy: false, error: '' } : m));
    } catch (e) {
      setMore((m) => (m.key === key ? { ...m, busy: false, error: (e as Error).message } : m));
    }
  };
  return { first, alerts, next, loadMore, busy: extra.busy, moreError: extra.error };
}

/** "Showing 100 of 2,999" and the button that fetches the next page. */
function MoreAlerts({ shown, total, next, busy, error, onMore, what }: { shown: number; total: number; next: string | null; busy: boolean; error: string; onMore: () => void; what: string }) {
  if (shown >= total && !next) return null;
  return (
    <p class="alerts-more" role="status">
      <span class="muted">
        Showing {formatCount(shown)} of {formatCount(total)} {what}.
      </span>{' '}
      {next && (
        <button type="button" class="btn btn-sm" disabled={busy} onClick={onMore}>
          {busy ? 'Loading…' : `Show ${formatCount(Math.min(ALERT_PAGE, Math.max(total - shown, 1)))} more`}
        </button>
      )}
      {error && <span class="field-error"> {error}</span>}
    </p>
  );
}

/** A large group's alerts, a page at a time, shown when its row is opened. */
function GroupAlerts({ g, f, now }: { g: AlertGroup; f: AlertFilters; now: number }) {
  const filter: AlertFilter = { state: f.state || 'open', node: f.node, rule: g.rule, limit: ALERT_PAGE };
  const pages = useAlertPages(`alerts:group:${f.state}:${f.node}:${g.rule}`, filter, true);
  const alerts = pages.alerts.filter((a) => sameGroup(g, a));
  return (
    <>
      {alerts.map((a) => (
        <OpenRow key={a.id} a={a} now={now} inGroup />
      ))}
      <tr class="group-more">
        <td colSpan={8}>
          {pages.first.loading && !pages.first.error && <Loading what={`the alerts of ${g.rule}`} />}
          {pages.first.error && <span class="field-error">Cannot load the alerts of {g.rule}: {pages.first.error.message}</span>}
          {pages.first.data && (
            <MoreAlerts shown={alerts.length} total={pages.first.data.total} next={pages.next} busy={pages.busy} error={pages.moreError} onMore={pages.loadMore} what={`alerts of ${g.rule}`} />
          )}
        </td>
      </tr>
    </>
  );
}

/** One group: its alerts when few, else one row that opens to them. */
function GroupRows({ g, page, f, now }: { g: AlertGroup; page: Alert[]; f: AlertFilters; now: number }) {
  const [open, setOpen] = useState(false);
  const members = page.filter((a) => sameGroup(g, a));
  if (!members.some((a) => a.id === g.first.id)) members.unshift(g.first);
  if (g.count <= GROUP_INLINE && members.length >= g.count) {
    return (
      <tbody class="alert-group" data-rule={g.rule}>
        {members.map((a) => (
          <OpenRow key={a.id} a={a} now={now} />
        ))}
      </tbody>
    );
  }
  const a = g.first;
  return (
    <tbody class="alert-group" data-rule={g.rule} data-count={g.count}>
      <tr class={`alert-group-row sev-${severityState(a.severity)} as-${a.state}`} data-rule={g.rule} data-count={g.count} data-state={a.state}>
        <td class="alert-sev">
          <SeverityBadge severity={a.severity} />
        </td>
        <td class="alert-st">
          <AlertStateTag state={a.state} />
        </td>
        <td class="alert-rule-cell" colSpan={2}>
          <button type="button" class="btn-link group-toggle" aria-expanded={open} onClick={() => setOpen(!open)}>
            <span aria-hidden="true">{open ? '▾' : '▸'}</span> <strong class="alert-rule">{g.rule}</strong> — <span class="group-size">{groupText(g)}</span>
          </button>
          <div class="muted small">
            worst:{' '}
            <a href={alertHref(a.id)} onClick={linkClick}>
              {alertWhere(a)}
            </a>
            {a.summary ? ` · ${a.summary}` : ''}
          </div>
        </td>
        <td class="mono" data-label="Root">
          {a.root || <span class="muted">—</span>}
        </td>
        <MetricCell a={a} />
        <ValueCell a={a} />
        <td class="nowrap" data-label="Since">
          <When iso={a.since} now={now} />
        </td>
      </tr>
      {open && <GroupAlerts g={g} f={f} now={now} />}
    </tbody>
  );
}

function OpenTable({ groups, page, f, now }: { groups: AlertGroup[]; page: Alert[]; f: AlertFilters; now: number }) {
  return (
    <TableWrap page label="Firing and pending alerts table">
      <table class="alerts-table open-alerts cards-narrow">
        <caption class="sr-only">Firing and pending alerts by rule, firing first, worst first</caption>
        <thead>
          <tr>
            <th scope="col">Severity</th>
            <th scope="col">State</th>
            <th scope="col">Rule</th>
            <th scope="col">Node</th>
            <th scope="col">Root</th>
            <th scope="col">Explaining metric</th>
            <th scope="col">Value vs threshold</th>
            <th scope="col">Since</th>
          </tr>
        </thead>
        {groups.map((g) => (
          <GroupRows key={groupKey(g)} g={g} page={page} f={f} now={now} />
        ))}
      </table>
    </TableWrap>
  );
}

function HistoryTable({ alerts, now }: { alerts: Alert[]; now: number }) {
  return (
    <TableWrap page label="Alert history table">
      <table class="alerts-table history cards-narrow">
        <caption class="sr-only">Alert history, newest first</caption>
        <thead>
          <tr>
            <th scope="col">Severity</th>
            <th scope="col">Rule</th>
            <th scope="col">Node</th>
            <th scope="col">Root</th>
            <th scope="col">Explaining metric</th>
            <th scope="col">Value vs threshold</th>
            <th scope="col">Began</th>
            <th scope="col">Resolved</th>
            <th scope="col">Lasted</th>
          </tr>
        </thead>
        <tbody>
          {alerts.map((a) => (
            <tr key={a.id} class={`alert-row sev-${severityState(a.severity)} as-${a.state}`} data-alert-id={a.id} data-state={a.state} data-node={a.node ?? ''} data-rule={a.rule}>
              <td class="alert-sev">
                <SeverityBadge severity={a.severity} />
              </td>
              <td class="alert-rule-cell">
                <a href={alertHref(a.id)} onClick={linkClick} class="alert-rule" title={a.summary || 'Details and delivery log'}>
                  {a.rule}
                </a>
                {!a.starts_at && <span class="muted small"> (never fired)</span>}
              </td>
              <WhereCell a={a} />
              <td class="mono" data-label="Root">
                {a.root || <span class="muted">—</span>}
              </td>
              <MetricCell a={a} />
              <ValueCell a={a} />
              <td class="nowrap" data-label="Began">
                <At iso={a.since} now={now} />
              </td>
              <td class="nowrap" data-label="Resolved">
                <At iso={a.ends_at} now={now} />
              </td>
              <td class="nowrap num" data-label="Lasted">
                {a.since && a.ends_at ? formatSpan(Date.parse(a.ends_at) - Date.parse(a.since)) : '—'}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </TableWrap>
  );
}

/** Firing and pending alerts first, then the history; the URL holds the filters. */
/**
 * The Node filter: a search box suggesting the few node names that match what is typed (matchNodes),
 * never a choice per node of the fleet. Enter or a click on a suggestion filters by it; Enter on text
 * that matches no suggestion filters by the text as typed; emptying the box clears the filter.
 */
function NodeFilter({ value, names, onUse, onPick }: { value: string; names: string[]; onUse: () => void; onPick: (node: string) => void }) {
  const [text, setText] = useState(value);
  const [open, setOpen] = useState(false);
  const [active, setActive] = useState(-1);
  useEffect(() => setText(value), [value]);
  const matches = open ? matchNodes(names, text) : [];
  const expanded = open && matches.length > 0;
  const pick = (n: string) => {
    setText(n);
    setOpen(false);
    setActive(-1);
    onPick(n);
  };
  return (
    <div class="field-inline node-filter">
      <label for="alerts-node-filter">Node</label>
      <input
        id="alerts-node-filter"
        type="search"
        role="combobox"
        list={undefined /* the suggestions are the listbox below, not a datalist of every node */}
        aria-label="Node"
        aria-autocomplete="list"
        aria-expanded={expanded}
        aria-controls="alerts-node-options"
        aria-activedescendant={expanded && active >= 0 ? `alerts-node-option-${active}` : undefined}
        placeholder="any"
        autoComplete="off"
        spellcheck={false}
        value={text}
        onFocus={() => {
          onUse();
          setOpen(true);
        }}
        onBlur={() => setOpen(false)}
        onInput={(e) => {
          const v = (e.currentTarget as HTMLInputElement).value;
          setText(v);
          setOpen(true);
          setActive(-1);
          if (v === '') onPick('');
        }}
        onKeyDown={(e) => {
          if (e.key === 'ArrowDown') {
            e.preventDefault();
            setOpen(true);
            setActive((a) => Math.min(a + 1, matches.length - 1));
          } else if (e.key === 'ArrowUp') {
            e.preventDefault();
            setActive((a) => Math.max(a - 1, -1));
          } else if (e.key === 'Enter') {
            e.preventDefault();
            pick(expanded && active >= 0 ? matches[active] : text.trim());
          } else if (e.key === 'Escape' && open) {
            e.stopPropagation();
            setOpen(false);
            setActive(-1);
            setText(value);
          }
        }}
      />
      {expanded && (
        <ul id="alerts-node-options" role="listbox" aria-label="Nodes" class="node-options">
          {matches.map((n, i) => (
            <li
              key={n}
              id={`alerts-node-option-${i}`}
              role="option"
              aria-selected={i === active}
              data-node={n}
              // mousedown, not click: the input's blur would close the list before a click lands.
              onMouseDown={(e) => {
                e.preventDefault();
                pick(n);
              }}
            >
              {n}
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}

export function AlertsPage({ params }: { params: URLSearchParams }) {
  const f = alertFiltersFrom(params);
  const now = useNow(1000);
  const showOpen = f.state !== 'resolved';
  const showHistory = f.state === '' || f.state === 'resolved';
  const open = usePoll(
    `alerts:open:${f.state}:${f.node}:${f.rule}`,
    (s) =>
      showOpen ? api.alertList({ state: f.state || 'open', node: f.node, rule: f.rule, limit: ALERT_PAGE, groups: true }, s) : Promise.resolve(null),
    showOpen ? ALERTS_REFRESH_MS : 0,
  );
  const history = useAlertPages(`alerts:history:${f.node}:${f.rule}:${f.limit}`, { state: 'resolved', node: f.node, rule: f.rule, limit: f.limit }, showHistory);
  // Choices for the filters: the fleet's nodes and the rules, whatever alerts exist. Every node with
  // its roots is a large answer in a large fleet: it is asked only once someone uses the Node filter.
  const [wantNodes, setWantNodes] = useState(false);
  const nodes = usePoll(`alerts:nodes:${wantNodes}`, (s) => (wantNodes ? api.nodes(s).catch(() => []) : Promise.resolve([])), wantNodes ? 60_000 : 0);
  const can = useCan();
  const rules = usePoll(`alerts:rules:${can.readRules}`, (s) => (can.readRules ? api.alertRules(s).catch(() => []) : Promise.resolve([])), can.readRules ? 60_000 : 0);

  useEffect(() => {
    document.title = 'Alerts · NBS';
  }, []);

  const update = (changes: Record<string, string | null>) => navigate(alertsHref(withParams(params, changes)), { replace: true });

  const openAlerts = useMemo(() => sortOpen(open.data?.alerts ?? []), [open.data]);
  // An older collector answers no groups: each alert is its own.
  const groups = useMemo(
    () => open.data?.groups ?? groupAlerts(openAlerts),
    [open.data, openAlerts],
  );
  const past = history.alerts;
  const evaluator = open.data?.evaluator ?? history.first.data?.evaluator;
  const firing = open.data?.totals.firing ?? 0;
  const pending = open.data?.totals.pending ?? 0;

  const nodeNames = useMemo(
    () =>
      [...new Set([...(nodes.data ?? []).map((n) => n.name), ...openAlerts.map((a) => a.node ?? ''), ...groups.map((g) => g.first.node ?? ''), ...past.map((a) => a.node ?? '')])]
        .filter(Boolean)
        .sort(),
    [nodes.data, openAlerts, groups, past],
  );
  const ruleNames = [...new Set([...(rules.data ?? []).map((r) => r.name), ...groups.map((g) => g.rule), ...past.map((a) => a.rule), f.rule])].filter(Boolean).sort();
  const filtered = f.state !== '' || f.node !== '' || f.rule !== '';

  if (noRoute(open.error) || noRoute(history.first.error)) {
    return (
      <div class="page">
        <h1>Alerts</h1>
        <Empty>This collector has no alerts API (/api/v1/alerts); it predates threshold alerts.</Empty>
      </div>
    );
  }

  return (
    <div class="page alerts-page">
      <div class="page-head">
        <h1>Alerts</h1>
        <AlertTabs current="alerts" />
        <span class="muted updated" aria-live="off">
          {open.data && `${formatCount(firing)} firing · ${formatCount(pending)} pending · `}live, every {ALERTS_REFRESH_MS / 1000}s
        </span>
      </div>
      <EvaluatorNote ev={evaluator} now={now} />

      <div class="toolbar" role="search" aria-label="Filter alerts">
        <label class="field-inline">
          <span>State</span>
          <select aria-label="State" value={f.state} onChange={(e) => update({ state: (e.currentTarget as HTMLSelectElement).value || null, limit: null })}>
            <option value="">open, then history</option>
            <option value="firing">firing</option>
            <option value="pending">pending</option>
            <option value="resolved">resolved (history)</option>
          </select>
        </label>
        <NodeFilter value={f.node} names={nodeNames} onUse={() => setWantNodes(true)} onPick={(n) => update({ node: n || null, limit: null })} />
        <label class="field-inline">
          <span>Rule</span>
          <select aria-label="Rule" value={f.rule} onChange={(e) => update({ rule: (e.currentTarget as HTMLSelectElement).value || null, limit: null })}>
            <option value="">any</option>
            {ruleNames.map((n) => (
              <option key={n} value={n}>
                {n}
              </option>
            ))}
          </select>
        </label>
        {filtered && (
          <button type="button" class="btn btn-sm btn-quiet" onClick={() => update({ state: null, node: null, rule: null, limit: null })}>
            Clear filters
          </button>
        )}
      </div>

      {showOpen && (
        <section class="alerts-section" aria-labelledby="open-alerts-h">
          <h2 id="open-alerts-h">
            {f.state === 'firing' ? 'Firing' : f.state === 'pending' ? 'Pending' : 'Firing and pending'}{' '}
            {open.data && <span class="muted count-inline">({formatCount(open.data.total)})</span>}
          </h2>
          {open.data && <StaleNotice error={open.error} />}
          {open.loading && !open.error && <Loading what="alerts" />}
          {!open.data && open.error && <ErrorBox title="Cannot load the alerts" error={open.error} onRetry={open.refresh} />}
          {open.data &&
            (open.data.total === 0 && groups.length === 0 ? (
              <Empty>{filtered ? 'No open alert matches these filters.' : 'Nothing is firing or pending.'}</Empty>
            ) : (
              <>
                <OpenTable groups={groups} page={openAlerts} f={f} now={now} />
                {open.data.groups && open.data.groupsTotal > groups.length && (
                  <p class="alerts-more muted" role="status">
                    Showing the worst {formatCount(groups.length)} of {formatCount(open.data.groupsTotal)} groups; filter by node or rule to see the others.
                  </p>
                )}
              </>
            ))}
        </section>
      )}

      {showHistory && (
        <section class="alerts-section" aria-labelledby="history-h">
          <h2 id="history-h">History {history.first.data && <span class="muted count-inline">({formatCount(history.first.data.total)})</span>}</h2>
          {history.first.data && !showOpen && <StaleNotice error={history.first.error} />}
          {history.first.loading && !history.first.error && <Loading what="the alert history" />}
          {!history.first.data && history.first.error && <ErrorBox title="Cannot load the alert history" error={history.first.error} onRetry={history.first.refresh} />}
          {history.first.data &&
            (past.length === 0 ? (
              <Empty>{filtered ? 'No resolved alert matches these filters.' : 'No alert has resolved yet.'}</Empty>
            ) : (
              <HistoryTable alerts={past} now={now} />
            ))}
          {history.first.data && (
            <MoreAlerts
              shown={past.length}
              total={history.first.data.total}
              next={history.next}
              busy={history.busy}
              error={history.moreError}
              onMore={history.loadMore}
              what="resolved alerts, newest first"
            />
          )}
        </section>
      )}
    </div>
  );
}

function deliveryResult(d: Delivery): { text: string; cls: string } {
  if (d.status === 'delivered') return { text: 'delivered', cls: 'st-ok' };
  if (d.status === 'failed') return { text: 'failed, given up', cls: 'st-crit' };
  if (d.attempts > 0) return { text: 'retrying', cls: 'st-warn' };
  return { text: 'queued', cls: 'st-unknown' };
}

const DELIVERY_TEXT: Record<string, { text: string; cls: string }> = {
  delivered: { text: 'delivered', cls: 'st-ok' },
  pending: { text: 'being delivered', cls: 'st-warn' },
  failed: { text: 'delivery failed', cls: 'st-crit' },
};

/** Whether the alert reached its receivers, without where they are: what a customer is told. */
export function DeliveryStatus({ status, alertState }: { status: string | undefined; alertState: string }) {
  const d = status ? DELIVERY_TEXT[status] : undefined;
  if (d) {
    return (
      <p class="delivery-status" data-delivery={status}>
        <span class={`badge badge-sm ${d.cls}`}>{d.text}</span>{' '}
        {status === 'delivered' ? 'The on-call receivers have been notified.' : status === 'pending' ? 'NBS is still sending the notification.' : 'NBS gave up sending the notification.'}
      </p>
    );
  }
  return (
    <p class="delivery-status muted" data-delivery="none">
      {alertState === 'pending' ? 'Nothing is sent while an alert is pending: it notifies when it fires.' : 'No notification was sent for this alert.'}
    </p>
  );
}

export function DeliveryLog({ deliveries, now, alertState }: { deliveries: Delivery[]; now: number; alertState: string }) {
  if (deliveries.length === 0) {
    return (
      <Empty>
        {alertState === 'pending' ? (
          <p>Nothing is sent while an alert is pending: it notifies when it fires.</p>
        ) : (
          <p>
            No notification was queued: this collector has no receiver configured (<code>--alertmanager.url</code>, <code>--alert.webhook-url</code>), or
            the alert was silenced.
          </p>
        )}
      </Empty>
    );
  }
  return (
    <TableWrap page label="Delivery log table">
      <table class="deliveries cards-narrow">
        <caption class="sr-only">Delivery log: one row per notification, oldest first</caption>
        <thead>
          <tr>
            <th scope="col">Receiver</th>
            <th scope="col">Event</th>
            <th scope="col">Queued</th>
            <th scope="col">Result</th>
            <th scope="col">Attempts</th>
            <th scope="col">Delivered</th>
            <th scope="col">Error</th>
          </tr>
        </thead>
        <tbody>
          {deliveries.map((d) => {
            const r = deliveryResult(d);
            return (
              <tr key={d.id} data-delivery-id={d.id} data-status={d.status}>
                <td data-label="Receiver">
                  <div>
                    <strong>{d.target}</strong>
                    <div class="muted small mono wrap-long">{d.url}</div>
                  </div>
                </td>
                <td data-label="Event">{d.event}</td>
                <td class="nowrap" data-label="Queued">
                  <At iso={d.created_at} now={now} />
                </td>
                <td class="nowrap" data-label="Result">
                  <span class={`badge badge-sm ${r.cls}`}>{r.text}</span>
                </td>
                <td class="num" data-label="Attempts">
                  {d.attempts}
                </td>
                <td class="nowrap" data-label="Delivered">
                  <At iso={d.delivered_at} now={now} />
                </td>
                <td class="wrap-long" data-label="Error">
                  {d.last_error ? <span class="field-error">{d.last_error}</span> : <span class="muted">—</span>}
                </td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </TableWrap>
  );
}

// Annotations shown in their own place; the others are listed as they are.
const SHOWN_ANNOTATIONS = new Set(['summary', 'description', 'value', 'threshold', 'baseline_median', 'tree_url', 'runbook_url']);

/** One alert: what, where, since when, the link to the tree, and its delivery log. */
export function AlertDetailPage({ id }: { id: number }) {
  const can = useCan();
  const now = useNow(1000);
  const polled = usePoll(`alert:${id}`, (s) => api.alert(id, s), ALERTS_REFRESH_MS);
  const a = polled.data;

  useEffect(() => {
    document.title = a ? `${a.rule} ${alertWhere(a)} · Alerts · NBS` : `Alert ${id} · NBS`;
  }, [a?.rule, id]);

  if (polled.error?.notFound) {
    return (
      <div class="page">
        <ErrorBox title={noRoute(polled.error) ? 'This collector has no alerts API' : `Alert ${id} does not exist`} error={polled.error} />
        <p>
          <a href={alertsHref()} onClick={linkClick}>
            All alerts
          </a>
        </p>
      </div>
    );
  }
  if (!a) {
    return (
      <div class="page">
        {polled.loading && !polled.error && <Loading what={`alert ${id}`} />}
        {polled.error && <ErrorBox title={`Cannot load alert ${id}`} error={polled.error} onRetry={polled.refresh} />}
      </div>
    );
  }

  const v = alertValue(a);
  const m = a.child || a.metric;
  const ann = a.annotations ?? {};
  const extraAnn = Object.entries(ann).filter(([k]) => !SHOWN_ANNOTATIONS.has(k));
  const end = a.ends_at ? Date.parse(a.ends_at) : now;
  return (
    <div class="page alert-page">
      <StaleNotice error={polled.error} />
      <div class="page-head">
        <h1 class="alert-title">
          <SeverityBadge severity={a.severity} /> {a.rule} <span class="muted">on {alertWhere(a)}</span>
        </h1>
        <AlertStateTag state={a.state} />
      </div>
      {a.summary && <p class="alert-summary-line">{a.summary}</p>}
      <div class="alert-actions">
        <a class="btn btn-primary" href={alertTreeHref(a)} onClick={linkClick}>
          {a.node ? `Open ${m || 'the node'} in the tree` : 'Open these nodes in the fleet'}
        </a>
        {ann.runbook_url && (
          <a class="btn" href={ann.runbook_url} target="_blank" rel="noopener noreferrer">
            Runbook
          </a>
        )}
        <a class="btn btn-quiet" href={alertsHref(a.node ? new URLSearchParams({ node: a.node }) : undefined)} onClick={linkClick}>
          {a.node ? `All alerts of ${a.node}` : 'All alerts'}
        </a>
      </div>
      <HandledTags a={a} now={now} />
      {can.actOnAlerts && <AlertActions a={a} now={now} onDone={polled.refresh} />}
      {a.node && alertMetric(a) && <AlertChart a={a} now={now} />}
      <section class="panel alert-facts-panel" aria-labelledby="alert-facts-h">
        {/* The h3s below (Labels, Annotations) need an h2 above them even when
            neither the chart nor the actions (each with its h2) are shown. */}
        <h2 id="alert-facts-h" class="sr-only">
          Alert facts
        </h2>
        <dl class="facts">
          <dt>State</dt>
          <dd>{a.state}</dd>
          <dt>Severity</dt>
          <dd>{a.severity}</dd>
          {a.node ? (
            <>
              <dt>Node</dt>
              <dd>
                <a href={nodeHref(a.node)} onClick={linkClick}>
                  {a.node}
                </a>
              </dd>
              <dt>Root</dt>
              <dd class="mono">{a.root || '—'}</dd>
              <dt>Metric the rule matched</dt>
              <dd class="mono">{a.metric || '—'}</dd>
              <dt>Explaining metric</dt>
              <dd class="mono">
                {a.child ? (
                  <a href={alertTreeHref(a)} onClick={linkClick}>
                    {a.child}
                  </a>
                ) : (
                  '—'
                )}
              </dd>
            </>
          ) : (
            <>
              <dt>Group</dt>
              <dd>{alertWhere(a)}</dd>
              <dt>Metric</dt>
              <dd class="mono">{a.metric || '—'}</dd>
            </>
          )}
          <dt>Value</dt>
          <dd class="num">{v.value}</dd>
          {v.threshold && (
            <>
              <dt>Threshold</dt>
              <dd>{v.threshold}</dd>
            </>
          )}
          <dt>Breach began</dt>
          <dd>
            <At iso={a.since} now={now} /> <span class="muted">({formatAgo(a.since, now)})</span>
          </dd>
          <dt>Fired</dt>
          <dd>{a.starts_at ? <At iso={a.starts_at} now={now} /> : <span class="muted">{a.state === 'pending' ? 'not yet: waiting for the hold' : 'never'}</span>}</dd>
          <dt>Resolved</dt>
          <dd>{a.ends_at ? <At iso={a.ends_at} now={now} /> : <span class="muted">not yet</span>}</dd>
          <dt>{a.ends_at ? 'Lasted' : 'Lasting'}</dt>
          <dd class="num">{a.since ? formatSpan(end - Date.parse(a.since)) : '—'}</dd>
          <dt>Rule</dt>
          <dd>
            {a.rule_id && can.readRules ? (
              <a href={alertRulesHref(can.editRules ? new URLSearchParams({ edit: String(a.rule_id) }) : undefined)} onClick={linkClick}>
                {a.rule}
              </a>
            ) : (
              a.rule
            )}
          </dd>
          {a.fingerprint && (
            <>
              <dt>Fingerprint</dt>
              <dd class="mono small">{a.fingerprint}</dd>
            </>
          )}
        </dl>
        {a.description && <p class="description">{a.description}</p>}
        {Object.keys(a.labels ?? {}).length > 0 && (
          <div class="alert-labels">
            <h3>Labels</h3>
            <div class="labels">
              {Object.entries(a.labels ?? {}).map(([k, val]) => (
                <span key={k} class="tag">
                  {k}={val}
                </span>
              ))}
            </div>
          </div>
        )}
        {extraAnn.length > 0 && (
          <div class="alert-labels">
            <h3>Annotations</h3>
            <dl class="facts">
              {extraAnn.map(([k, val]) => (
                <Fragment key={k}>
                  <dt>{k}</dt>
                  <dd class="break">{val}</dd>
                </Fragment>
              ))}
            </dl>
          </div>
        )}
      </section>
      <section class="alerts-section" aria-labelledby="deliveries-h">
        {can.readRules ? (
          <>
            <h2 id="deliveries-h">Delivery log</h2>
            <DeliveryLog deliveries={a.deliveries} now={now} alertState={a.state} />
          </>
        ) : (
          <>
            <h2 id="deliveries-h">Notification</h2>
            <DeliveryStatus status={a.delivery} alertState={a.state} />
          </>
        )}
      </section>
    </div>
  );
}

/** An agent's report interval when its node cannot be read (the agent's --interval default). */
const DEFAULT_INTERVAL_MS = 10_000;

/** The explaining metric over the breach window, with its threshold: what on-call looks at first. */
function AlertChart({ a, now }: { a: AlertDetail; now: number }) {
  const metric = alertMetric(a);
  const node = a.node!;
  // The window of an open alert follows now, a minute at a time, so the poll key does not change every second.
  const w = alertWindow(a, a.ends_at ? now : Math.ceil(now / 60_000) * 60_000);
  // The node's report interval bounds the step: a histogram reported every 10 s asked at 5 s comes back
  // as lone points and draws no line. Until the node answers the chart waits; if it cannot, the agents' default.
  const info = usePoll(`alert-node:${node}`, (s) => api.node(node, s), 60_000);
  const intervalMs = info.data?.interval_ms || (info.error ? DEFAULT_INTERVAL_MS : undefined);
  const step = w && intervalMs ? stepFor(w.to - w.from, 240, intervalMs) : '';
  const key = `alert-series:${node}:${metric}:${w?.from}:${w?.to}:${step}`;
  const series = usePoll(key, (s) => (w && step ? api.series(node, metric, w.from, w.to, step, s) : Promise.resolve(null)), a.ends_at ? 0 : 15_000);
  const thresholds = usePoll(`alert-thr:${node}`, (s) => api.effective(node, s).catch(() => []), 60_000);
  const thr = thresholds.data?.find((t) => t.metric === metric)?.threshold ?? null;
  return (
    <section class="alerts-section alert-chart" aria-labelledby="alert-chart-h">
      <h2 id="alert-chart-h">
        <span class="mono">{metric}</span> over the breach{' '}
        {w && (
          <span class="muted small">
            ({formatTime(new Date(w.from).toISOString(), new Date(now))} – {formatTime(new Date(w.to).toISOString(), new Date(now))})
          </span>
        )}
      </h2>
      {series.loading && !series.error && <Loading what="the series" />}
      {!series.data && series.error && <ErrorBox title="Cannot load the series" error={series.error} onRetry={series.refresh} />}
      {series.data && <Chart series={series.data} threshold={thr} title={`${metric} on ${node}`} height={200} />}
    </section>
  );
}

const SILENCE_CHOICES: [number, string][] = [
  [3600, '1 hour'],
  [4 * 3600, '4 hours'],
  [24 * 3600, '1 day'],
  [7 * 24 * 3600, '1 week'],
];

/** Acknowledge and silence (operators): audited by the collector; a silence goes to Alertmanager where it is the receiver. */
export function AlertActions({ a, now, onDone }: { a: Alert; now: number; onDone: () => void }) {
  const { status, error, busy, act } = useAction(onDone);
  const [comment, setComment] = useState('');
  const [duration, setDuration] = useState(SILENCE_CHOICES[0][0]);
  const silenced = !!a.silenced_until && Date.parse(a.silenced_until) > now;
  const open = a.state !== 'resolved';
  return (
    <section class="panel alert-actions-panel" aria-labelledby="alert-act-h">
      <h2 id="alert-act-h" class="sr-only">
        Acknowledge or silence
      </h2>
      <div class="alert-act-row">
        <label class="field-inline alert-comment">
          <span>Comment</span>
          <input type="text" maxLength={1000} value={comment} placeholder="what is being done, or why" onInput={(e) => setComment((e.currentTarget as HTMLInputElement).value)} />
        </label>
        {open &&
          (a.acknowledged_at ? (
            <button type="button" class="btn btn-sm" disabled={busy} onClick={() => act(() => api.unacknowledgeAlert(a.id), 'Acknowledgement withdrawn.')}>
              Withdraw acknowledgement
            </button>
          ) : (
            <button type="button" class="btn btn-sm btn-primary" disabled={busy} onClick={() => act(() => api.acknowledgeAlert(a.id, comment), 'Acknowledged.')}>
              Acknowledge
            </button>
          ))}
        {silenced ? (
          <button type="button" class="btn btn-sm" disabled={busy} onClick={() => act(() => api.unsilenceAlert(a.id), 'Silence ended.')}>
            End silence
          </button>
        ) : (
          <>
            <label class="field-inline">
              <span>Silence for</span>
              <select value={String(duration)} onChange={(e) => setDuration(Number((e.currentTarget as HTMLSelectElement).value))}>
                {SILENCE_CHOICES.map(([s, label]) => (
                  <option key={s} value={String(s)}>
                    {label}
                  </option>
                ))}
              </select>
            </label>
            <button type="button" class="btn btn-sm" disabled={busy} onClick={() => act(() => api.silenceAlert(a.id, duration, comment), 'Silenced.')}>
              Silence
            </button>
          </>
        )}
      </div>
      {status && (
        <p class="muted small" role="status">
          {status}
        </p>
      )}
      {error && (
        <p class="field-error" role="alert">
          {error.message}
        </p>
      )}
    </section>
  );
}
