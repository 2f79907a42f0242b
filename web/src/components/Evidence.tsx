import { Fragment } from 'preact';
import type { ApiError, Evidence } from '../api';
import { formatTime } from '../format';
import { linkClick, nodeHref, withParams } from '../route';
import { Empty, ErrorBox, Loading } from './common';

// Columns that read best first; anything else the agent sends follows.
const PREFERRED = ['direction', 'reason', 'state', 'src', 'dst', 'netns'];

export function evidenceColumns(events: Evidence[]): string[] {
  const keys = new Set<string>();
  events.forEach((e) => Object.keys(e.fields ?? {}).forEach((k) => keys.add(k)));
  const rest = [...keys].filter((k) => !PREFERRED.includes(k)).sort();
  return [...PREFERRED.filter((k) => keys.has(k)), ...rest];
}

export function EvidenceTable({ events, metric, error, loading, limit, onRetry }: { events: Evidence[] | undefined; metric: string; error: ApiError | null; loading: boolean; limit: number; onRetry: () => void }) {
  if (!events && error) return <ErrorBox title="Cannot load the evidence" error={error} onRetry={onRetry} />;
  if (!events || loading) return <Loading what="evidence" />;
  if (events.length === 0) return <Empty>No evidence recorded for this metric in this range. Evidence is sampled while a metric is raised.</Empty>;
  const cols = evidenceColumns(events);
  const showMetric = events.some((e) => e.metric !== metric);
  return (
    <div class="table-wrap">
      <table class="evidence">
        <caption class="sr-only">Evidence events for {metric}, newest first</caption>
        <thead>
          <tr>
            <th scope="col">Time</th>
            {showMetric && <th scope="col">Metric</th>}
            {cols.map((c) => (
              <th key={c} scope="col">
                {c}
              </th>
            ))}
          </tr>
        </thead>
        <tbody>
          {events.map((e, i) => (
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
                  <td colSpan={1 + (showMetric ? 1 : 0) + cols.length}>
                    <OtherSide others={e.counterparts} />
                  </td>
                </tr>
              )}
            </Fragment>
          ))}
        </tbody>
      </table>
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
