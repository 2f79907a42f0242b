import type { ApiError, Evidence } from '../api';
import { formatTime } from '../format';
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
            <tr key={`${e.t}-${i}`}>
              <td class="num nowrap">{formatTime(e.t)}</td>
              {showMetric && <td class="mono">{e.metric.startsWith(metric + '/') ? e.metric.slice(metric.length + 1) : e.metric}</td>}
              {cols.map((c) => (
                <td key={c} class={c === 'src' || c === 'dst' || c === 'netns' ? 'mono' : ''}>
                  {e.fields?.[c] ?? ''}
                </td>
              ))}
            </tr>
          ))}
        </tbody>
      </table>
      {events.length >= limit && <p class="muted small">Showing the newest {limit} events; narrow the range to see older ones.</p>}
    </div>
  );
}
