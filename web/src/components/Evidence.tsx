import { Fragment } from 'preact';
import { useState } from 'preact/hooks';
import type { ApiError, Evidence } from '../api';
import { formatTime } from '../format';
import { linkClick, nodeHref, withParams } from '../route';
import { Empty, ErrorBox, Loading, TableWrap } from './common';

// Columns that read best first: whose it is (the owner), then what happened;
// the namespace inode and the rest the agent sends follow.
const PREFERRED = ['owner', 'owner_kind', 'pod', 'direction', 'reason', 'state', 'src', 'dst'];
const LAST = ['netns', 'owner_id'];

// What people call each field the agents send; a field not here is shown
// by its name, spaced and capitalised. To a customer the collector sends
// no namespace, process or owner-id fields (collector/api/customer.go), so
// the same table serves both.
const TITLES: Record<string, string> = {
  owner: 'Owner',
  owner_kind: 'Owner kind',
  owner_id: 'Owner id',
  pod: 'Pod',
  pod_uid: 'Pod UID',
  container: 'Container id',
  container_name: 'Container',
  runtime: 'Runtime',
  direction: 'Direction',
  reason: 'Reason',
  state: 'State',
  src: 'Source',
  dst: 'Destination',
  sport: 'Source port',
  dport: 'Destination port',
  protocol: 'Protocol',
  netns: 'Namespace inode',
  netns_name: 'Namespace',
  pid: 'PID',
  comm: 'Command',
  srtt_ms: 'Smoothed RTT (ms)',
  min_rtt_ms: 'Min RTT (ms)',
  rttvar_ms: 'RTT variance (ms)',
  cwnd: 'Congestion window',
};

/** A field's column title, for people. */
export function fieldTitle(field: string): string {
  const t = TITLES[field];
  if (t) return t;
  const spaced = field.replace(/_/g, ' ');
  return spaced.charAt(0).toUpperCase() + spaced.slice(1);
}

export function evidenceColumns(events: Evidence[]): string[] {
  const keys = new Set<string>();
  events.forEach((e) => Object.keys(e.fields ?? {}).forEach((k) => keys.add(k)));
  const rest = [...keys].filter((k) => !PREFERRED.includes(k) && !LAST.includes(k)).sort();
  return [...PREFERRED.filter((k) => keys.has(k)), ...rest, ...LAST.filter((k) => keys.has(k))];
}

/** What events are grouped by: nothing, their owner, the destination port, or the peer's address. */
export type GroupBy = 'none' | 'owner' | 'port' | 'peer';
export const GROUP_LABELS: Record<GroupBy, string> = { none: 'nothing (newest first)', owner: 'owner', port: 'destination port', peer: 'peer' };

/** Splits "10.0.0.1:443" or "[fd00::1]:443" into address and port. */
export function splitAddr(a: string | undefined): { addr: string; port: string } {
  if (!a) return { addr: '', port: '' };
  const m = /^\[(.*)\]:(\d+)$/.exec(a) ?? /^([^:]*):(\d+)$/.exec(a);
  return m ? { addr: m[1], port: m[2] } : { addr: a, port: '' };
}

/** An event's group under by; '' when it has no such field. */
export function groupKey(e: Evidence, by: GroupBy): string {
  const f = e.fields ?? {};
  switch (by) {
    case 'owner':
      return f.owner ? (f.owner_kind ? `${f.owner_kind} ${f.owner}` : f.owner) : '';
    case 'port':
      return f.dport ?? splitAddr(f.dst).port;
    case 'peer':
      // The other end: the destination of what this node sent, the source of what it received.
      return f.direction === 'received' ? splitAddr(f.src).addr : splitAddr(f.dst).addr || f.target || '';
  }
  return '';
}

/** Events grouped under by, biggest group first (then by name), each newest first. */
export function groupEvents(events: Evidence[], by: GroupBy): { key: string; events: Evidence[] }[] {
  if (by === 'none') return [{ key: '', events }];
  const m = new Map<string, Evidence[]>();
  events.forEach((e) => {
    const k = groupKey(e, by);
    m.set(k, [...(m.get(k) ?? []), e]);
  });
  return [...m.entries()]
    .map(([key, evs]) => ({ key, events: evs }))
    .sort((a, b) => b.events.length - a.events.length || a.key.localeCompare(b.key, 'en', { numeric: true }));
}

/** The grouping that says most: by owner where events name owners, else by peer. */
function defaultGroup(events: Evidence[]): GroupBy {
  if (events.some((e) => e.fields?.owner)) return 'owner';
  if (events.some((e) => e.fields?.dst || e.fields?.src)) return 'peer';
  return 'none';
}

export function EvidenceTable({ events, metric, error, loading, limit, onRetry }: { events: Evidence[] | undefined; metric: string; error: ApiError | null; loading: boolean; limit: number; onRetry: () => void }) {
  const [chosen, setChosen] = useState<GroupBy | null>(null);
  if (!events && error) return <ErrorBox title="Cannot load the evidence" error={error} onRetry={onRetry} />;
  if (!events || loading) return <Loading what="evidence" />;
  if (events.length === 0) return <Empty>No evidence recorded for this metric in this range. Evidence is sampled while a metric is raised.</Empty>;
  const by = chosen ?? defaultGroup(events);
  const cols = evidenceColumns(events);
  const showMetric = events.some((e) => e.metric !== metric);
  const groups = groupEvents(events, by);
  const span = 1 + (showMetric ? 1 : 0) + cols.length;
  return (
    <div>
      <div class="evidence-groups">
        <label for="evidence-group">Group by</label>
        <select id="evidence-group" value={by} onChange={(e) => setChosen((e.target as HTMLSelectElement).value as GroupBy)}>
          {(Object.keys(GROUP_LABELS) as GroupBy[]).map((g) => (
            <option key={g} value={g}>
              {GROUP_LABELS[g]}
            </option>
          ))}
        </select>
        {by !== 'none' && (
          <span class="muted small">
            {groups.length} group{groups.length === 1 ? '' : 's'} of {events.length} events
          </span>
        )}
      </div>
      <TableWrap label={`Evidence table of ${metric}`}>
        <table class="evidence">
          <caption class="sr-only">
            Evidence events for {metric}
            {by !== 'none' ? `, grouped by ${GROUP_LABELS[by]}` : ''}, newest first
          </caption>
          <thead>
            <tr>
              <th scope="col">Time</th>
              {showMetric && <th scope="col">Metric</th>}
              {cols.map((c) => (
                <th key={c} scope="col" title={c}>
                  {fieldTitle(c)}
                </th>
              ))}
            </tr>
          </thead>
          {groups.map((g) => (
            <tbody key={g.key}>
              {by !== 'none' && (
                <tr class="group-head">
                  <th scope="rowgroup" colSpan={span}>
                    {g.key || <span class="muted">no {GROUP_LABELS[by]}</span>} <span class="muted small">({g.events.length} event{g.events.length === 1 ? '' : 's'})</span>
                  </th>
                </tr>
              )}
              {g.events.map((e, i) => (
                <Fragment key={`${e.t}-${i}`}>
                  <tr>
                    <td class="num nowrap">{formatTime(e.t)}</td>
                    {showMetric && <td class="mono">{e.metric.startsWith(metric + '/') ? e.metric.slice(metric.length + 1) : e.metric}</td>}
                    {cols.map((c) => (
                      <td key={c} class={c === 'src' || c === 'dst' || c === 'netns' ? 'mono' : ''}>
                        {e.fields?.[c] ?? ''}
                      </td>
                    ))}
                  </tr>
                  {(e.counterparts ?? []).length > 0 && (
                    <tr class="other-side">
                      <td colSpan={span}>
                        <OtherSide others={e.counterparts} />
                      </td>
                    </tr>
                  )}
                </Fragment>
              ))}
            </tbody>
          ))}
        </table>
      </TableWrap>
      {events.length >= limit && <p class="muted small">Showing the newest {limit} events; narrow the range to see older ones.</p>}
    </div>
  );
}

// What the other node's kernel said about the same flow, most telling
// field first: a sent reset's reason, a drop's reason, a socket's state.
function said(fields: Record<string, string>): string {
  if (fields.reason) return fields.reason;
  if (fields.state) return fields.state;
  return '';
}

/** The other side of an event: the evidence other nodes hold about its flow, each linking to that node's tree at the metric. */
function OtherSide({ others }: { others: Evidence['counterparts'] }) {
  return (
    <span class="small">
      The other side said:{' '}
      {others.map((c, i) => (
        <Fragment key={`${c.node}-${c.t}-${i}`}>
          {i > 0 && '; '}
          <a href={nodeHref(c.node, withParams(new URLSearchParams(), { metric: c.metric }))} onClick={linkClick}>
            {c.node}
          </a>{' '}
          <span class="mono">{c.metric}</span>
          {said(c.fields ?? {}) && <> ({said(c.fields ?? {})})</>} at {formatTime(c.t)}
        </Fragment>
      ))}
    </span>
  );
}
