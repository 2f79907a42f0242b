// One edge of the flow map: its counters at both ends, resets by reason
// and direction, drops, RTT, the per-minute series, and the way into each
// end's tree at the metric and to the evidence.
import { useEffect, useRef } from 'preact/hooks';
import { type FlowEdgeDetail, type FlowEvidenceLink, type FlowPoint, type FlowTreeLink, api } from '../api';
import { type FlowFilters, type Reasons, STATE_SHAPE, STATE_TEXT, edgeState, endTreeHref, evidenceMetric, flowEdgeQuery, formatBytes, ownerIndex, serverName, endName } from '../flows';
import { formatCount, formatNumber, formatTime } from '../format';
import { usePoll } from '../hooks';
import { linkClick } from '../route';
import { Sparkline } from './Sparkline';
import { ErrorBox, Loading, TableWrap } from './common';

const SERIES: { key: keyof FlowPoint; title: string }[] = [
  { key: 'opened', title: 'Opened' },
  { key: 'failed', title: 'Failed' },
  { key: 'resets', title: 'Resets' },
  { key: 'drops', title: 'Drops' },
  { key: 'retransmits', title: 'Retransmits' },
  { key: 'rtt_p99_ms', title: 'RTT p99 (ms)' },
];

export function FlowEdgePanel({ edgeKey, f, onClose }: { edgeKey: string; f: FlowFilters; onClose: () => void }) {
  const q = flowEdgeQuery(f, edgeKey);
  const polled = usePoll(`flow-edge:${q}`, (s) => api.flowEdge(q, s), 0);
  const head = useRef<HTMLHeadingElement>(null);
  useEffect(() => {
    head.current?.focus();
    const onKey = (e: KeyboardEvent) => e.key === 'Escape' && onClose();
    document.addEventListener('keydown', onKey);
    return () => document.removeEventListener('keydown', onKey);
  }, []);
  const d = polled.data;
  return (
    <aside class="flow-panel" aria-labelledby="flow-panel-title">
      <div class="flow-panel-head">
        <h2 id="flow-panel-title" ref={head} tabIndex={-1}>
          {d ? edgeTitle(d) : 'Edge'}
        </h2>
        <button type="button" class="btn btn-sm btn-quiet" onClick={onClose} aria-label="Close the edge">
          ✕ Close
        </button>
      </div>
      {polled.loading && !polled.error && <Loading what="the edge" />}
      {polled.error && <ErrorBox title="Cannot load the edge" error={polled.error} onRetry={polled.refresh} />}
      {d && <EdgeDetail d={d} f={f} />}
    </aside>
  );
}

function edgeTitle(d: FlowEdgeDetail): string {
  const owners = ownerIndex(d.owners ?? []);
  return `${endName(d.edge.client, owners)} → ${serverName(d.edge.server, owners)}`;
}

function reasonsText(r: Reasons | null | undefined): string {
  const e = Object.entries(r ?? {}).filter(([, n]) => n > 0);
  if (e.length === 0) return '0';
  return e
    .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
    .map(([k, n]) => `${formatCount(n)} ${k}`)
    .join(', ');
}

function EdgeDetail({ d: detail, f }: { d: FlowEdgeDetail; f: FlowFilters }) {
  const d = detail.edge;
  const owners = ownerIndex(detail.owners ?? []);
  const s = edgeState(d);
  const seen = d.seen_by ?? [];
  const series = detail.series ?? [];
  const tree = detail.links?.tree ?? [];
  const evidence = detail.links?.evidence ?? [];
  return (
    <div class="flow-detail" data-state={s}>
      <p>
        <span class={`badge st-${s}`}>
          <span aria-hidden="true">{STATE_SHAPE[s]} </span>
          {STATE_TEXT[s]}
        </span>{' '}
        {d.explain}
      </p>
      <p class="muted small">
        Seen by {seen.length === 2 ? 'both ends' : seen.length === 1 ? `the ${seen[0]} only` : 'no end'}.
        {d.rtt_p50_ms !== null && d.rtt_p50_ms !== undefined && ` RTT p50 ${formatNumber(d.rtt_p50_ms)} ms`}
        {d.rtt_p99_ms !== null && d.rtt_p99_ms !== undefined && `, p99 ${formatNumber(d.rtt_p99_ms)} ms.`}
      </p>
      <table class="flow-ends-table">
        <caption class="sr-only">The edge at each end</caption>
        <thead>
          <tr>
            <th scope="col">
              <span class="sr-only">Counter</span>
            </th>
            <th scope="col">Client {endName(d.client, owners)}</th>
            <th scope="col">Server {serverName(d.server, owners)}</th>
          </tr>
        </thead>
        <tbody>
          <tr>
            <th scope="row">Resets sent</th>
            <td>{reasonsText(d.resets?.client_sent)}</td>
            <td>{reasonsText(d.resets?.server_sent)}</td>
          </tr>
          <tr>
            <th scope="row">Resets received</th>
            <td>{reasonsText(d.resets?.client_received)}</td>
            <td>{reasonsText(d.resets?.server_received)}</td>
          </tr>
          <tr>
            <th scope="row">Drops</th>
            <td>{reasonsText(d.drops?.client)}</td>
            <td>{reasonsText(d.drops?.server)}</td>
          </tr>
          <tr>
            <th scope="row">Bytes sent</th>
            <td class="num">{formatBytes(d.bytes_client_to_server)}</td>
            <td class="num">{formatBytes(d.bytes_server_to_client)}</td>
          </tr>
        </tbody>
      </table>
      <dl class="flow-figures">
        <dt>Opened</dt>
        <dd class="num">{formatCount(d.opened)}</dd>
        <dt>Failed</dt>
        <dd class="num">{formatCount(d.failed)}</dd>
        <dt>Closed</dt>
        <dd class="num">{formatCount(d.closed)}</dd>
        <dt>Retransmits</dt>
        <dd class="num">{formatCount(d.retransmits)}</dd>
      </dl>
      {series.length > 0 && (
        <>
          <h3>Per {detail.resolution}</h3>
          {series.length > 1 && (
            <ul class="flow-sparks">
              {SERIES.map(({ key, title }) => (
                <li key={key}>
                  <span>{title}</span>
                  <Sparkline values={series.map((p) => (typeof p[key] === 'number' ? (p[key] as number) : null))} state={s} label={title} width={140} />
                </li>
              ))}
            </ul>
          )}
          <details open={series.length === 1}>
            <summary>As a table</summary>
            <TableWrap label="The edge per minute">
            <table class="flow-series">
              <thead>
                <tr>
                  <th scope="col">Minute</th>
                  {SERIES.map(({ key, title }) => (
                    <th key={key} scope="col" class="num">
                      {title}
                    </th>
                  ))}
                </tr>
              </thead>
              <tbody>
                {series.map((p) => (
                  <tr key={p.t}>
                    <td>{formatTime(p.t)}</td>
                    {SERIES.map(({ key }) => (
                      <td key={key} class="num">
                        {typeof p[key] === 'number' ? formatNumber(p[key] as number) : '—'}
                      </td>
                    ))}
                  </tr>
                ))}
              </tbody>
            </table>
            </TableWrap>
          </details>
        </>
      )}
      <h3>Into the trees</h3>
      <ul class="flow-links">
        <EndLinks who="Client" link={tree.find((l) => l.end === 'client')} evidence={evidence.filter((l) => l.end === 'client')} f={f} />
        <EndLinks who="Server" link={tree.find((l) => l.end === 'server')} evidence={evidence.filter((l) => l.end === 'server')} f={f} />
      </ul>
    </div>
  );
}

function EndLinks({ who, link, evidence, f }: { who: string; link: FlowTreeLink | undefined; evidence: FlowEvidenceLink[]; f: FlowFilters }) {
  if (!link?.node) {
    return <li class="muted">{who}: not a node of yours (no tree to open).</li>;
  }
  const metrics = link.metrics ?? [];
  const end = who.toLowerCase();
  return (
    <li data-end={end}>
      {who}: node <strong>{link.node}</strong>{' '}
      {metrics.length === 0 ? (
        <a href={endTreeHref(link, undefined, f)} onClick={linkClick}>
          its tree
        </a>
      ) : (
        metrics.map((m, i) => (
          <span key={m}>
            {i > 0 && ' · '}
            <a class="tree-link" href={endTreeHref(link, m, f)} onClick={linkClick} aria-label={`${m} on ${link.node} (${end})`}>
              {m}
            </a>
          </span>
        ))
      )}
      {evidence.map((ev) => {
        const m = evidenceMetric(ev.path);
        return (
          <span key={ev.path}>
            {' · '}
            <a class="evidence-link" href={endTreeHref({ node: ev.node, path: link.node === ev.node ? link.path : '' }, m ?? undefined, f)} onClick={linkClick}>
              evidence{m ? ` of ${m}` : ''} on {ev.node}
            </a>{' '}
            <a class="muted small" href={ev.path} aria-label={`evidence on ${ev.node} as JSON`}>
              (JSON)
            </a>
          </span>
        );
      })}
    </li>
  );
}
