import type { TreeNode } from '../api';
import { api } from '../api';
import { formatTime, formatValue } from '../format';
import { usePoll } from '../hooks';
import { normState, stateLabel } from '../state';
import { type TimeRange, describeRange, resolveRange, stepFor } from '../timerange';
import { Chart } from './Chart';
import { EvidenceTable } from './Evidence';
import { ThresholdEditor } from './ThresholdEditor';
import { ErrorBox, Loading, StaleNotice, StateBadge } from './common';

const EVIDENCE_LIMIT = 200;

interface Props {
  node: string;
  metricId: string;
  tn: TreeNode | null;
  range: TimeRange;
  labels: Record<string, string>;
  intervalMs: number;
  onZoom: (from: number, to: number) => void;
  onThresholdChange: () => void;
  /** The page shows a past time: the value is as of it, not now. */
  asOf?: number;
  /** The node stopped reporting: the value is its last, not a current one. */
  stale?: boolean;
}

/** One metric: what it means, its chart over the range, its threshold, and its evidence. */
export function MetricView({ node, metricId, tn, range, labels, intervalMs, onZoom, onThresholdChange, asOf, stale }: Props) {
  const rangeKey = range.kind === 'relative' ? range.last : `${range.from}-${range.to}`;
  const refresh = range.kind === 'relative' ? Math.max(5_000, Math.min(intervalMs, 30_000)) : 0;
  const series = usePoll(
    `series:${node}:${metricId}:${rangeKey}`,
    (s) => {
      const { from, to } = resolveRange(range);
      return api.series(node, metricId, from, to, stepFor(to - from, 300, intervalMs), s);
    },
    refresh,
  );
  const events = usePoll(
    `events:${node}:${metricId}:${rangeKey}`,
    (s) => {
      const { from, to } = resolveRange(range);
      return api.events(node, metricId, from, to, EVIDENCE_LIMIT, s);
    },
    refresh ? Math.max(refresh, 10_000) : 0,
  );

  const unit = tn?.unit ?? series.data?.unit ?? '';
  const title = tn?.title ?? metricId;
  const s = normState(tn?.state);
  const own = normState(tn?.own_state);

  return (
    <article class="metric-view" aria-labelledby="metric-title">
      <header class="metric-head">
        <div class="metric-title-row">
          <h2 id="metric-title">{title}</h2>
          {tn && <StateBadge state={s} />}
        </div>
        <div class="metric-sub">
          <code class="metric-id">{metricId}</code>
          {tn && <span class="kind">{tn.kind}</span>}
          {tn && (
            <span class="metric-now">
              {asOf !== undefined ? `at ${formatTime(asOf)}` : stale ? 'last known (stale)' : 'now'} <strong class={`num${stale ? ' is-stale' : ''}`}>{formatValue(tn.value, unit)}</strong>
              {tn.kind === 'rate' && tn.count != null && <span class="muted"> ({formatValue(tn.count, '')} in the last interval)</span>}
            </span>
          )}
          {tn?.updated_at && <span class="muted">updated {formatTime(tn.updated_at)}</span>}
        </div>
        {tn && own !== s && (
          <p class="small muted">
            Its own value is {stateLabel[own]}; it is {stateLabel[s]} because of a child.
          </p>
        )}
        {tn?.note && (
          <p class="metric-note" role="note">
            <span class="note-mark" aria-hidden="true">
              ⚠
            </span>{' '}
            <strong>Note:</strong> {tn.note}
          </p>
        )}
        {!tn && <p class="muted small">This metric is not in the node's current tree (the agent no longer announces it); its history is shown.</p>}
      </header>

      {tn?.description && <p class="description">{tn.description}</p>}

      <section class="metric-section" aria-labelledby="chart-h">
        <h3 id="chart-h">
          Over the {describeRange(range)} <span class="muted small">(drag across the chart to zoom)</span>
        </h3>
        {series.data && <StaleNotice error={series.error} />}
        {series.loading && !series.error && <Loading what="the series" />}
        {!series.data && series.error && <ErrorBox title="Cannot load the series" error={series.error} onRetry={series.refresh} />}
        {series.data && <Chart series={series.data} threshold={tn?.threshold} title={title} onZoom={onZoom} />}
      </section>

      <section class="metric-section" aria-labelledby="th-h">
        <h3 id="th-h">Threshold</h3>
        <ThresholdEditor node={node} labels={labels} metric={metricId} unit={unit} fallback={tn?.threshold ?? null} onSaved={onThresholdChange} />
      </section>

      <section class="metric-section" aria-labelledby="ev-h">
        <h3 id="ev-h">
          Evidence{' '}
          {events.data && (
            <span class="muted small">
              ({events.data.length}
              {events.data.length >= EVIDENCE_LIMIT ? '+' : ''} events, newest first)
            </span>
          )}
        </h3>
        <EvidenceTable events={events.data} metric={metricId} error={events.error} loading={events.loading && !events.error} limit={EVIDENCE_LIMIT} onRetry={events.refresh} />
      </section>
    </article>
  );
}
