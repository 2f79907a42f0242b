import { useEffect, useRef, useState } from 'preact/hooks';
import type { ExportKindStatus, ExportReceiverStatus, ExportStatus } from '../api';
import { api } from '../api';
import { EXPORT_METRICS_PATH, HEALTH_STATE, HEALTH_TEXT, type ReceiverHealth, orderKinds, overflowing, receiverHealth, scrapeConfig } from '../exportstatus';
import { formatAgo, formatCount, formatNumber, formatTime, formatValue, formatWindow } from '../format';
import { useNow, usePoll } from '../hooks';
import { Empty, ErrorBox, Loading, StaleNotice, TableWrap } from './common';

export const EXPORT_REFRESH_MS = 15_000;

const kindName = (kind: string) => (kind === 'scrape' ? 'Scrape' : kind);

function At({ iso, now, never = '—' }: { iso: string | undefined; now: number; never?: string }) {
  if (!iso) return <span class="muted">{never}</span>;
  return (
    <>
      <time dateTime={iso} title={iso}>
        {formatTime(iso, new Date(now))}
      </time>{' '}
      <span class="muted small">({formatAgo(iso, now)})</span>
    </>
  );
}

/** The newest export of each kind past a cap: what was lost to the overflow series, and the flags that raise the caps. */
function OverflowNotice({ st }: { st: ExportStatus }) {
  const over = overflowing(st.exports);
  if (over.length === 0) return null;
  return (
    <div class="notice export-overflow" role="status">
      <p>
        <strong>Series over a cap.</strong> In the newest export of{' '}
        {over.map((k, i) => (
          <span key={k.kind} data-kind={k.kind}>
            {i > 0 && (i === over.length - 1 ? ' and ' : ', ')}
            <strong>{kindName(k.kind)}</strong> {formatCount(k.overflowed)} of {formatCount(k.series)} series
          </span>
        ))}{' '}
        went past a cap: their counters are summed into <code>_overflow</code> series (totals stay right) and gauges are left out.
      </p>
      <p>
        Raise <code>--export.max-series-per-node</code> (now {formatCount(st.max_series_per_node)}) when single nodes have more series than that, or{' '}
        <code>--export.max-series-per-family</code> (now {formatCount(st.max_series_per_family)}) when one metric's series across the fleet do, and keep an eye on what your
        Prometheus can hold.
      </p>
    </div>
  );
}

function KindRow({ k, now }: { k: ExportKindStatus; now: number }) {
  return (
    <tr data-kind={k.kind} class={k.overflowed > 0 ? 'export-over' : undefined}>
      <th scope="row" data-label="Export">
        <strong>{kindName(k.kind)}</strong>
        {k.kind === 'scrape' ? <div class="muted small">GET {EXPORT_METRICS_PATH}</div> : <div class="muted small">push</div>}
      </th>
      <td data-label="Newest">
        <div>
          <At iso={k.at} now={now} />
        </div>
      </td>
      <td class="num" data-label="Nodes" data-nodes>
        {formatCount(k.nodes)}
      </td>
      <td class="num" data-label="Series" data-series>
        {formatCount(k.series)}
      </td>
      <td data-label="Overflowed" data-overflowed={k.overflowed}>
        <div>
          {k.overflowed > 0 ? <span class="badge badge-sm st-warn">{formatCount(k.overflowed)} over a cap</span> : <span>none</span>}
          {k.overflowed_total > 0 && <div class="muted small">{formatCount(k.overflowed_total)} since start</div>}
        </div>
      </td>
      <td class="num" data-label="Took">
        {formatNumber(k.took_ms)} ms
      </td>
      <td class="num" data-label="Exports" title="since this collector started">
        {formatCount(k.exports)}
      </td>
    </tr>
  );
}

function Exports({ st, now }: { st: ExportStatus; now: number }) {
  const kinds = orderKinds(st.exports);
  const scraped = kinds.some((k) => k.kind === 'scrape');
  return (
    <section class="export-section" aria-labelledby="export-series-h">
      <h2 id="export-series-h">Active series</h2>
      <p class="muted small">The newest export of each kind on this collector: its series are what a Prometheus holds of NBS.</p>
      {!scraped && (
        <Empty>
          <p class="export-no-scrape">No scrape yet on this collector.</p>
          <p class="muted small">
            Prometheus's scrapes of <code>{EXPORT_METRICS_PATH}</code> appear here (each collector counts its own; behind a load balancer, ask each).
          </p>
        </Empty>
      )}
      {kinds.length > 0 && (
        <TableWrap page label="Exports table">
          <table class="export-table cards-narrow">
            <caption class="sr-only">The newest export of each kind: its nodes, series and overflow</caption>
            <thead>
              <tr>
                <th scope="col">Export</th>
                <th scope="col">Newest</th>
                <th scope="col">Nodes</th>
                <th scope="col">Series</th>
                <th scope="col">Overflowed</th>
                <th scope="col">Took</th>
                <th scope="col">Exports</th>
              </tr>
            </thead>
            <tbody>
              {kinds.map((k) => (
                <KindRow key={k.kind} k={k} now={now} />
              ))}
            </tbody>
          </table>
        </TableWrap>
      )}
    </section>
  );
}

function HealthCell({ h, r, now }: { h: ReceiverHealth; r: ExportReceiverStatus; now: number }) {
  return (
    <>
      <span class={`badge badge-sm st-${HEALTH_STATE[h.state]}`}>{HEALTH_TEXT[h.state]}</span>
      {h.state === 'failing' && (
        <div class="export-failing">
          {h.since ? (
            <>
              Failing since <At iso={h.since} now={now} />: nothing delivered after it.
            </>
          ) : (
            <>
              Failing: nothing delivered yet{r.queue_oldest ? `; the oldest waiting export is from ${formatAgo(r.queue_oldest, now)}` : ''}.
            </>
          )}
        </div>
      )}
      {h.state === 'retrying' && <div class="muted small">the latest push failed; the one before got through</div>}
      {h.state === 'waiting' && <div class="muted small">just configured, or another collector leads the pushing</div>}
    </>
  );
}

function ReceiverRow({ r, now }: { r: ExportReceiverStatus; now: number }) {
  const h = receiverHealth(r, now);
  return (
    <tr data-receiver={r.name} data-health={h.state} class={`receiver-${h.state}`}>
      <th scope="row" data-label="Receiver">
        <strong>{r.name}</strong> <span class="tag">{r.type === 'otlp' ? 'OTLP' : 'remote write'}</span>
        <div class="muted small mono break">{r.url}</div>
      </th>
      <td class="receiver-state" data-label="State">
        <div>
          <HealthCell h={h} r={r} now={now} />
        </div>
      </td>
      <td data-label="Queue">
        <div>
          <span class="nowrap">{formatValue(r.queue_bytes, 'bytes')}</span>
          <div class="muted small">{r.queue_oldest ? `oldest ${formatAgo(r.queue_oldest, now)}` : 'empty'}</div>
        </div>
      </td>
      <td data-label="Last success">
        <div>
          <At iso={r.last_success} now={now} never="never" />
        </div>
      </td>
      <td class="num" data-label="Samples">
        <div>
          <span class="nowrap">{formatCount(r.samples_sent)} sent</span>
          <div class={r.samples_dropped > 0 ? 'field-error small' : 'muted small'}>{formatCount(r.samples_dropped)} dropped</div>
        </div>
      </td>
      <td class="wrap-long" data-label="Last error">
        {r.last_error ? <span class="field-error export-error break">{r.last_error}</span> : <span class="muted">—</span>}
      </td>
    </tr>
  );
}

function Receivers({ st, now }: { st: ExportStatus; now: number }) {
  return (
    <section class="export-section" aria-labelledby="export-receivers-h">
      <h2 id="export-receivers-h">Push receivers</h2>
      {st.receivers.length === 0 ? (
        <Empty>
          <p class="export-no-receivers">
            No push receivers configured (<code class="nowrap">--export.receivers-file</code>).
          </p>
        </Empty>
      ) : (
        <TableWrap page label="Push receivers table">
          <table class="receivers-table cards-narrow">
            <caption class="sr-only">Push receivers: state, queue, last success, samples and the last error</caption>
            <thead>
              <tr>
                <th scope="col">Receiver</th>
                <th scope="col">State</th>
                <th scope="col">Queue</th>
                <th scope="col">Last success</th>
                <th scope="col">Samples</th>
                <th scope="col">Last error</th>
              </tr>
            </thead>
            <tbody>
              {st.receivers.map((r) => (
                <ReceiverRow key={r.name} r={r} now={now} />
              ))}
            </tbody>
          </table>
        </TableWrap>
      )}
    </section>
  );
}

function Settings({ st }: { st: ExportStatus }) {
  return (
    <section class="export-section" aria-labelledby="export-settings-h">
      <h2 id="export-settings-h">Settings</h2>
      <dl class="facts export-settings">
        <dt>Window</dt>
        <dd data-setting="window">
          {formatWindow(st.window_seconds)} <code class="small">--export.window</code>
          <div class="muted small">nodes that reported within it, and child counters that moved within it; a gone node's or owner's series end after it</div>
        </dd>
        <dt>Counter hold</dt>
        <dd data-setting="counter-hold">
          {st.counter_hold_seconds > 0 ? formatWindow(st.counter_hold_seconds) : 'off'} <code class="small">--export.counter-hold</code>
          <div class="muted small">a new counter's first increase waits this long: keep the scrape interval shorter</div>
        </dd>
        <dt>Series per node</dt>
        <dd data-setting="max-series-per-node">
          at most {formatCount(st.max_series_per_node)} <code class="small">--export.max-series-per-node</code>
        </dd>
        <dt>Series per metric</dt>
        <dd data-setting="max-series-per-family">
          at most {formatCount(st.max_series_per_family)} <code class="small">--export.max-series-per-family</code>
        </dd>
      </dl>
    </section>
  );
}

/** Copies text; where the clipboard is refused, selects el's text for the user to copy. */
async function copyFrom(text: string, el: HTMLElement | null): Promise<boolean> {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    const sel = window.getSelection();
    if (el && sel) {
      const range = document.createRange();
      range.selectNodeContents(el);
      sel.removeAllRanges();
      sel.addRange(range);
    }
    return false;
  }
}

function ScrapeSetup({ st }: { st: ExportStatus }) {
  const url = `${location.origin}${EXPORT_METRICS_PATH}`;
  const config = scrapeConfig(location.origin, st.counter_hold_seconds);
  const urlEl = useRef<HTMLElement>(null);
  const configEl = useRef<HTMLPreElement>(null);
  const [copied, setCopied] = useState('');
  const doCopy = async (text: string, el: HTMLElement | null, what: string) =>
    setCopied((await copyFrom(text, el)) ? `${what} copied.` : `Copying was refused: the ${what.toLowerCase()} is selected, press Ctrl+C.`);
  return (
    <section class="export-section" aria-labelledby="export-scrape-h">
      <h2 id="export-scrape-h">Scrape from Prometheus</h2>
      <div class="export-url">
        <code ref={urlEl} class="break" data-scrape-url>
          {url}
        </code>{' '}
        <button type="button" class="btn btn-sm" onClick={() => doCopy(url, urlEl.current, 'Scrape URL')}>
          Copy URL
        </button>
      </div>
      <p class="muted small">
        Put this in <code>prometheus.yml</code> with a token of this collector (<code>Authorization: Bearer</code>): a staff token scrapes every node, a customer's token only its
        tenant's; <code>?match=label=value</code> narrows either.
      </p>
      <pre ref={configEl} class="export-config">
        {config}
      </pre>
      <p>
        <button type="button" class="btn btn-sm" onClick={() => doCopy(config, configEl.current, 'Scrape config')}>
          Copy scrape config
        </button>{' '}
        <span class="muted small" role="status">
          {copied}
        </span>
      </p>
      <p class="muted small">
        Remote write, OTLP and the Grafana dashboards: <code>docs/export.md</code> in the NBS source.
      </p>
    </section>
  );
}

/** /export, for staff: whether the Prometheus export is healthy, and how to scrape it. */
export function ExportPage() {
  const ticked = useNow(EXPORT_REFRESH_MS);
  const polled = usePoll('export-status', (s) => api.exportStatus(s), EXPORT_REFRESH_MS);
  const st = polled.data;
  // Ages from the newest of the clock's tick and this render (a refresh's data).
  const now = Math.max(ticked, Date.now());

  useEffect(() => {
    document.title = 'Export · NBS';
  }, []);

  return (
    <div class="page export-page">
      <div class="page-head">
        <h1>Prometheus export</h1>
        <span class="muted updated">this collector · refreshed every {EXPORT_REFRESH_MS / 1000}s</span>
      </div>
      <p class="muted small page-intro">
        What Prometheus scrapes of the fleet's metric trees and what this collector pushes to remote write and OTLP receivers: the active series, anything past a cap, each receiver's
        queue and errors.
      </p>
      {st && <StaleNotice error={polled.error} />}
      {polled.loading && !polled.error && <Loading what="the export's status" />}
      {!st && polled.error && <ErrorBox title="Cannot load the export's status" error={polled.error} onRetry={polled.refresh} />}
      {st && (
        <>
          <OverflowNotice st={st} />
          <Exports st={st} now={now} />
          <Receivers st={st} now={now} />
          <ScrapeSetup st={st} />
          <Settings st={st} />
        </>
      )}
    </div>
  );
}
