import type { ComponentChildren } from 'preact';
import { useMemo, useState } from 'preact/hooks';
import { ApiError, api } from '../api';
import { useSession } from '../auth';
import { usePoll } from '../hooks';
import {
  type Change,
  PERIODS,
  type ReportQuery,
  alignSeries,
  availabilityBar,
  change,
  definitionReportUrl,
  fmtDuration,
  fmtErrorBound,
  fmtLatency,
  fmtMs,
  fmtNum,
  fmtShare,
  fmtUtc,
  parseSelector,
  parseTargets,
  periodRange,
  pingObjective,
  queryFromParams,
  reportDefinitionHref,
  reportUrl,
  reportsHref,
  scopedSelector,
  selectorString,
} from '../report';
import type { Num, Report, ReportDefinition } from '../reporttypes';
import { linkClick, navigate } from '../route';
import { Empty, ErrorBox, Loading } from './common';
import { ReportChart } from './ReportChart';

const canEdit = (role: string | undefined) => role === 'operator' || role === 'admin';

/** /reports (a query in the URL) and /reports/{id} (a saved definition). */
export function ReportsPage({ params, id }: { params: URLSearchParams; id?: number }) {
  const session = useSession();
  const me = session?.me;
  const scope = me?.role === 'customer' ? me.selector : undefined;
  const q = useMemo(() => {
    const base = queryFromParams(params);
    return { ...base, selector: scopedSelector(base.selector, scope) };
  }, [params.toString(), selectorString(scope)]);
  // The period ends when the page is opened (or Run again), not at every render.
  const [now, setNow] = useState(() => Date.now());

  const defs = usePoll('report-definitions', (s) => api.reportDefinitions(s), 0);
  const def = usePoll(id ? `report-definition:${id}` : 'report-definition:none', (s) => (id ? api.reportDefinition(id, s) : Promise.resolve(null)), 0);

  const range = id ? null : periodRange(q, now);
  const rangeError = range && 'error' in range ? range.error : null;
  const url = id ? definitionReportUrl(id) : range && !('error' in range) ? reportUrl(q, range) : null;
  const csvUrl = id ? definitionReportUrl(id, 'csv') : range && !('error' in range) ? reportUrl(q, range, 'csv') : null;
  const report = usePoll(`report:${url}:${now}`, (s) => (url ? api.report(url, s) : Promise.resolve(null)), 0);

  const title = id ? (def.data?.name ?? `Report ${id}`) : 'Report';
  return (
    <div class="page report-page">
      <div class="page-head">
        <h1>{title}</h1>
        {report.data && (
          <span class="muted updated">
            {fmtUtc(report.data.period.from)} – {fmtUtc(report.data.period.to)}
          </span>
        )}
      </div>
      <div class="report-controls no-print">
        {id ? (
          <p class="muted small">
            A saved report, run for its period ending now. <a href={reportsHref()} onClick={linkClick}>New report</a>
            {canEdit(me?.role) && def.data && <DeleteDefinition id={id} name={def.data.name} onDeleted={() => navigate(reportsHref())} />}
          </p>
        ) : (
          <QueryForm q={q} scope={scope} onRun={(next) => {
            setNow(Date.now());
            navigate(reportsHref(next));
          }} />
        )}
        <SavedReports defs={defs.data ?? []} error={defs.error} current={id} />
        {!id && canEdit(me?.role) && !rangeError && <SaveForm q={q} onSaved={(d) => { defs.refresh(); navigate(reportDefinitionHref(d.id)); }} />}
      </div>
      {rangeError && <ErrorBox title="Cannot run this report" error={new Error(rangeError)} />}
      {def.error && <ErrorBox title="Cannot load this saved report" error={def.error} onRetry={def.refresh} />}
      {url && report.loading && !report.error && <Loading what="the report" />}
      {url && report.error && <ErrorBox title="Cannot load the report" error={report.error} onRetry={() => setNow(Date.now())} />}
      {report.data && url && csvUrl && <ReportView r={report.data} jsonUrl={url} csvUrl={csvUrl} />}
    </div>
  );
}

function QueryForm({ q, scope, onRun }: { q: ReportQuery; scope: Record<string, string> | undefined; onRun: (q: ReportQuery) => void }) {
  const [sel, setSel] = useState(selectorString(q.selector));
  const [period, setPeriod] = useState(q.period);
  const [from, setFrom] = useState(q.from ?? '');
  const [to, setTo] = useState(q.to ?? '');
  const [targets, setTargets] = useState(q.targets.join(', '));
  const [err, setErr] = useState<string | null>(null);
  const fixed = scope && Object.keys(scope).length > 0;
  const submit = (e: Event) => {
    e.preventDefault();
    const s = parseSelector(sel);
    if ('error' in s) return setErr(String(s.error));
    const next: ReportQuery = { selector: scopedSelector(s as Record<string, string>, scope), period, from: from || undefined, to: to || undefined, targets: parseTargets(targets) };
    const r = periodRange(next, Date.now());
    if ('error' in r) return setErr(r.error);
    setErr(null);
    onRun(next);
  };
  return (
    <form class="toolbar report-form" onSubmit={submit} aria-label="What to report on">
      <label class="field-inline">
        <span>Nodes</span>
        <input
          type="text"
          aria-label="Nodes"
          value={sel}
          placeholder="customer=acme"
          aria-describedby="report-sel-help"
          onInput={(e) => setSel((e.currentTarget as HTMLInputElement).value)}
        />
      </label>
      <span id="report-sel-help" class="muted small">
        {fixed ? `Always within your scope ${selectorString(scope)}.` : 'A label selector: label=value, comma-separated; empty is every node.'}
      </span>
      <label class="field-inline">
        <span>Period</span>
        <select aria-label="Period" value={period} onChange={(e) => setPeriod((e.currentTarget as HTMLSelectElement).value as ReportQuery['period'])}>
          {PERIODS.map((p) => (
            <option key={p.value} value={p.value}>
              {p.label}
            </option>
          ))}
        </select>
      </label>
      {period === 'custom' && (
        <>
          <label class="field-inline">
            <span>From</span>
            <input type="date" aria-label="From" value={from} onInput={(e) => setFrom((e.currentTarget as HTMLInputElement).value)} />
          </label>
          <label class="field-inline">
            <span>To</span>
            <input type="date" aria-label="To" value={to} onInput={(e) => setTo((e.currentTarget as HTMLInputElement).value)} />
          </label>
        </>
      )}
      <label class="field-inline">
        <span>Targets</span>
        <input type="text" aria-label="Targets" value={targets} placeholder="all" onInput={(e) => setTargets((e.currentTarget as HTMLInputElement).value)} />
      </label>
      <button type="submit" class="btn btn-primary">
        Run
      </button>
      {err && (
        <span class="field-error" role="alert">
          {err}
        </span>
      )}
    </form>
  );
}

function SavedReports({ defs, error, current }: { defs: ReportDefinition[]; error: ApiError | null; current?: number }) {
  if (error && !error.notFound) return <p class="field-error">Cannot list saved reports: {error.message}</p>;
  if (defs.length === 0) return null;
  return (
    <nav class="saved-reports" aria-label="Saved reports">
      <span class="muted small">Saved:</span>
      {defs.map((d) => (
        <a key={d.id} href={reportDefinitionHref(d.id)} onClick={linkClick} aria-current={d.id === current ? 'page' : undefined}>
          {d.name}
        </a>
      ))}
    </nav>
  );
}

function SaveForm({ q, onSaved }: { q: ReportQuery; onSaved: (d: ReportDefinition) => void }) {
  const [name, setName] = useState('');
  const [objective, setObjective] = useState('');
  const [busy, setBusy] = useState(false);
  const [err, setErr] = useState<string | null>(null);
  const save = async (e: Event) => {
    e.preventDefault();
    if (!name.trim()) return setErr('Give the report a name.');
    const o = pingObjective(objective);
    if (o && 'error' in o) return setErr(o.error);
    setBusy(true);
    try {
      const d = await api.createReportDefinition({
        name: name.trim(),
        selector: q.selector,
        period: q.period,
        from: q.period === 'custom' && q.from ? `${q.from}T00:00:00Z` : null,
        to: q.period === 'custom' && q.to ? `${q.to}T00:00:00Z` : null,
        targets: q.targets,
        objectives: o ? [o] : [],
      });
      setErr(null);
      onSaved(d);
    } catch (x) {
      setErr((x as Error).message);
    } finally {
      setBusy(false);
    }
  };
  return (
    <form class="toolbar report-save" onSubmit={save} aria-label="Save this report">
      <label class="field-inline">
        <span>Save as</span>
        <input type="text" value={name} maxLength={200} onInput={(e) => setName((e.currentTarget as HTMLInputElement).value)} />
      </label>
      <label class="field-inline">
        <span>Objective: ping p99 below</span>
        <input type="number" aria-label="Objective: ping p99 below, ms" min="0" step="any" value={objective} placeholder="none" onInput={(e) => setObjective((e.currentTarget as HTMLInputElement).value)} />
        <span>ms per hour</span>
      </label>
      <button type="submit" class="btn" disabled={busy}>
        Save
      </button>
      {err && (
        <span class="field-error" role="alert">
          {err}
        </span>
      )}
    </form>
  );
}

function DeleteDefinition({ id, name, onDeleted }: { id: number; name: string; onDeleted: () => void }) {
  const [err, setErr] = useState<string | null>(null);
  const del = async () => {
    if (!confirm(`Delete the saved report "${name}"? Its link stops working.`)) return;
    try {
      await api.deleteReportDefinition(id);
      onDeleted();
    } catch (x) {
      setErr((x as Error).message);
    }
  };
  return (
    <>
      {' '}
      <button type="button" class="btn btn-sm btn-quiet" onClick={del}>
        Delete this saved report
      </button>
      {err && (
        <span class="field-error" role="alert">
          {err}
        </span>
      )}
    </>
  );
}

/** A headline number and its change against the previous period. */
function Delta({ c }: { c: Change }) {
  const cls = c.direction === 'none' || c.direction === 'same' ? 'delta-flat' : c.worse ? 'delta-worse' : 'delta-better';
  return (
    <span class={`delta ${cls}`} title="Change against the previous period of the same length">
      {c.text}
    </span>
  );
}

function Section({ id, title, children }: { id: string; title: string; children: ComponentChildren }) {
  return (
    <section class="report-section" aria-labelledby={`rs-${id}`} data-section={id}>
      <h2 id={`rs-${id}`}>{title}</h2>
      {children}
    </section>
  );
}

export function ReportView({ r, jsonUrl, csvUrl }: { r: Report; jsonUrl: string; csvUrl: string }) {
  const from = Date.parse(r.period.from);
  const to = Date.parse(r.period.to);
  const nodes = r.scope?.nodes ?? [];
  return (
    <article class="report" aria-label="Report">
      <div class="report-meta">
        <p>
          Nodes <strong>{selectorString(r.scope?.selector) || 'all'}</strong> ({nodes.length}: {nodes.join(', ') || 'none'}) · {fmtUtc(r.period.from)} – {fmtUtc(r.period.to)} · compared with{' '}
          {fmtUtc(r.period.previous_from)} – {fmtUtc(r.period.previous_to)}
        </p>
        <p class="muted small">
          Percentiles come from merged histogram buckets and are within {fmtErrorBound(r.error_bound)} of the exact value. Periods without data are drawn as gaps and
          counted as “no data”, never as zero or OK. Generated {fmtUtc(r.generated_at)}.
        </p>
        <p class="downloads no-print">
          Download: <a href={csvUrl} download>CSV</a> · <a href={jsonUrl} download>JSON</a>
        </p>
      </div>
      <PingSection r={r} from={from} to={to} />
      <KernelSection r={r} from={from} to={to} />
      <ReliabilitySection r={r} />
      <AvailabilitySection r={r} />
      <IncidentsSection r={r} />
      <ObjectivesSection r={r} />
    </article>
  );
}

function PingSection({ r, from, to }: { r: Report; from: number; to: number }) {
  const targets = r.ping?.targets ?? [];
  const perNode = r.ping?.per_node ?? [];
  const series = r.ping?.series ?? [];
  return (
    <Section id="ping" title="Ping delay">
      {targets.length === 0 ? (
        <Empty>No ping targets in this period.</Empty>
      ) : (
        <PingTable caption="Per target" first="Target">
          {targets.map((t) => (
            <tr key={t.target}>
              <th scope="row">
                {t.target}
                <div class="muted small">{t.nodes.join(', ')}</div>
              </th>
              <td>
                {fmtMs(t.p50_ms)} <Delta c={change(t.p50_ms, t.previous?.p50_ms)} />
              </td>
              <td>{fmtMs(t.p90_ms)}</td>
              <td>
                {fmtMs(t.p99_ms)} <Delta c={change(t.p99_ms, t.previous?.p99_ms)} />
              </td>
              <td>{fmtMs(t.max_ms)}</td>
              <td>
                {fmtShare(t.loss)} <span class="muted">({fmtNum(t.lost)} / {fmtNum(t.sent)})</span> <Delta c={change(t.loss, t.previous?.loss, 'share')} />
              </td>
              <td>
                {fmtMs(t.host_delay_p50_ms)} / {fmtMs(t.host_delay_p99_ms)}
              </td>
            </tr>
          ))}
        </PingTable>
      )}
      {perNode.length > 0 && (
        <PingTable caption="Per node" first="Node">
          {perNode.map((n) => (
            <tr key={n.node}>
              <th scope="row">{n.node}</th>
              <td>{fmtMs(n.p50_ms)}</td>
              <td>{fmtMs(n.p90_ms)}</td>
              <td>{fmtMs(n.p99_ms)}</td>
              <td>{fmtMs(n.max_ms)}</td>
              <td>
                {fmtShare(n.loss)} <span class="muted">({fmtNum(n.lost)} / {fmtNum(n.sent)})</span>
              </td>
              <td>
                {fmtMs(n.host_delay_p50_ms)} / {fmtMs(n.host_delay_p99_ms)}
              </td>
            </tr>
          ))}
        </PingTable>
      )}
      {series.map((s) => (
        <div class="report-chart-block" key={s.target}>
          <h3>{s.target}: delay over the period</h3>
          <ReportChart data={alignSeries(s.points, ['p50_ms', 'p99_ms'])} labels={['p50', 'p99']} fmt={(v) => fmtMs(v)} title={`Ping delay to ${s.target}`} from={from} to={to} />
        </div>
      ))}
    </Section>
  );
}

function KernelSection({ r, from, to }: { r: Report; from: number; to: number }) {
  const rows = r.kernel_latency ?? [];
  return (
    <Section id="kernel" title="Kernel latency">
      {rows.length === 0 ? (
        <Empty>No kernel latency was measured in this period.</Empty>
      ) : (
        <>
          <div class="table-wrap">
            <table class="report-table">
              <caption class="sr-only">Kernel latency by stage</caption>
              <thead>
                <tr>
                  <th scope="col">Stage</th>
                  <th scope="col">p50</th>
                  <th scope="col">p90</th>
                  <th scope="col">p99</th>
                  <th scope="col">max</th>
                  <th scope="col">Observations</th>
                </tr>
              </thead>
              <tbody>
                {rows.map((k) => (
                  <tr key={k.metric}>
                    <th scope="row">
                      {k.title}
                      <div class="muted small mono">{k.metric}</div>
                    </th>
                    <td>
                      {fmtLatency(k.p50, k.unit)} <Delta c={change(k.p50, k.previous?.p50)} />
                    </td>
                    <td>{fmtLatency(k.p90, k.unit)}</td>
                    <td>
                      {fmtLatency(k.p99, k.unit)} <Delta c={change(k.p99, k.previous?.p99)} />
                    </td>
                    <td>{fmtLatency(k.max, k.unit)}</td>
                    <td>{fmtNum(k.count)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
          {rows
            .filter((k) => (k.series ?? []).length > 0)
            .map((k) => (
              <div class="report-chart-block" key={k.metric}>
                <h3>{k.title} over the period</h3>
                <ReportChart data={alignSeries(k.series, ['p50', 'p99'])} labels={['p50', 'p99']} fmt={(v) => fmtLatency(v, k.unit)} title={`${k.title} latency`} from={from} to={to} />
              </div>
            ))}
        </>
      )}
    </Section>
  );
}

const sum = (xs: Num[]): Num => (xs.some((x) => x !== null && x !== undefined) ? xs.reduce<number>((a, x) => a + (x ?? 0), 0) : null);

function ReliabilitySection({ r }: { r: Report }) {
  const rel = r.reliability;
  const resets = rel?.resets ?? [];
  const drops = rel?.drops ?? [];
  const rt = rel?.retransmits ?? null;
  const prev = rel?.previous ?? null;
  return (
    <Section id="reliability" title="Reliability">
      <dl class="headline">
        <div>
          <dt>Resets</dt>
          <dd>
            {fmtNum(sum(resets.map((x) => x.count)))} <Delta c={change(sum(resets.map((x) => x.count)), prev?.resets)} />
          </dd>
        </div>
        <div>
          <dt>Retransmits per 1,000 segments</dt>
          <dd>
            {fmtNum(rt?.per_1000_segments)} <span class="muted small">({fmtNum(rt?.per_second)}/s)</span>
          </dd>
        </div>
        <div>
          <dt>Retransmitted segments</dt>
          <dd>
            {fmtNum(rt?.segments)} <Delta c={change(rt?.segments, prev?.retransmits)} />
          </dd>
        </div>
        <div>
          <dt>RTOs</dt>
          <dd>
            {fmtNum(rt?.rtos)} <span class="muted small">({fmtNum(rt?.rtos_per_second)}/s)</span>
          </dd>
        </div>
        <div>
          <dt>Drops</dt>
          <dd>
            {fmtNum(sum(drops.map((x) => x.count)))} <Delta c={change(sum(drops.map((x) => x.count)), prev?.drops)} />
          </dd>
        </div>
      </dl>
      <div class="report-two">
        <ReasonTable caption="Resets by reason" rows={resets.map((x) => ({ key: x.metric, reason: `${x.reason} (${x.direction})`, count: x.count, per_hour: x.per_hour }))} />
        <ReasonTable caption="Drops by reason" rows={drops.map((x) => ({ key: x.metric, reason: x.reason, count: x.count, per_hour: x.per_hour }))} />
      </div>
    </Section>
  );
}

// PingTable is the frame of the per-target and per-node ping tables, which
// show the same columns after their first.
function PingTable({ caption, first, children }: { caption: string; first: string; children: ComponentChildren }) {
  return (
    <div class="table-wrap">
      <table class="report-table">
        <caption>{caption}</caption>
        <thead>
          <tr>
            {[first, 'p50', 'p90', 'p99', 'max', 'Loss (lost / sent)', 'Host delay p50 / p99'].map((c) => (
              <th key={c} scope="col">
                {c}
              </th>
            ))}
          </tr>
        </thead>
        <tbody>{children}</tbody>
      </table>
    </div>
  );
}

function ReasonTable({ caption, rows }: { caption: string; rows: { key: string; reason: string; count: Num; per_hour: Num }[] }) {
  return (
    <div class="table-wrap">
      <table class="report-table">
        <caption>{caption}</caption>
        <thead>
          <tr>
            <th scope="col">Reason</th>
            <th scope="col">Count</th>
            <th scope="col">Per hour</th>
          </tr>
        </thead>
        <tbody>
          {rows.length === 0 ? (
            <tr>
              <td colSpan={3} class="muted">
                None in this period.
              </td>
            </tr>
          ) : (
            rows.map((x) => (
              <tr key={x.key}>
                <th scope="row">{x.reason}</th>
                <td>{fmtNum(x.count)}</td>
                <td>{fmtNum(x.per_hour)}</td>
              </tr>
            ))
          )}
        </tbody>
      </table>
    </div>
  );
}

function AvailabilitySection({ r }: { r: Report }) {
  const rows = r.availability ?? [];
  return (
    <Section id="availability" title="Availability">
      {rows.length === 0 ? (
        <Empty>No state was recorded in this period.</Empty>
      ) : (
        <>
          <p class="legend small" aria-hidden="true">
            <span class="sw sw-ok" /> OK <span class="sw sw-warn" /> WARN <span class="sw sw-crit" /> CRIT <span class="sw sw-none" /> no data
          </p>
          <table class="report-table availability">
            <caption class="sr-only">Share of the period each root was OK, WARN, CRIT or without data, per node</caption>
            <thead>
              <tr>
                <th scope="col">Node</th>
                <th scope="col">Root</th>
                <th scope="col">OK</th>
                <th scope="col">WARN</th>
                <th scope="col">CRIT</th>
                <th scope="col">No data</th>
                <th scope="col" class="bar-col">
                  <span class="sr-only">Bar</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {rows.map((a) => {
                const b = availabilityBar(a);
                return (
                  <tr key={`${a.node}/${a.root}`}>
                    <th scope="row">{a.node}</th>
                    <td>{a.root}</td>
                    <td>{fmtShare(a.ok)}</td>
                    <td>{fmtShare(a.warn)}</td>
                    <td>{fmtShare(a.crit)}</td>
                    <td>{fmtShare(a.no_data)}</td>
                    <td class="bar-col">
                      <div class="avail-bar" aria-hidden="true">
                        {(['ok', 'warn', 'crit', 'no_data'] as const).map((k) => (b[k] > 0 ? <span key={k} class={`seg seg-${k}`} style={{ width: `${b[k]}%` }} /> : null))}
                      </div>
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </>
      )}
    </Section>
  );
}

function IncidentsSection({ r }: { r: Report }) {
  const rows = r.incidents ?? [];
  return (
    <Section id="incidents" title="Incidents">
      {rows.length === 0 ? (
        <Empty>No root was WARN or CRIT in this period.</Empty>
      ) : (
        <div class="table-wrap">
          <table class="report-table">
            <caption class="sr-only">Every span in the period where a root was WARN or CRIT</caption>
            <thead>
              <tr>
                <th scope="col">Start</th>
                <th scope="col">Length</th>
                <th scope="col">Node</th>
                <th scope="col">Root</th>
                <th scope="col">State</th>
                <th scope="col">Worst value</th>
                <th scope="col">Explained by</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((i) => (
                <tr key={`${i.node}/${i.root}/${i.start}`} data-state={i.state}>
                  <td>
                    <a href={i.tree_url} onClick={linkClick} title="The metric tree at that time" aria-label={`${fmtUtc(i.start)}: the tree of ${i.node} at that time`}>
                      {fmtUtc(i.start)}
                    </a>
                  </td>
                  <td>{i.end ? fmtDuration(i.seconds) : `${fmtDuration(i.seconds)} (ongoing)`}</td>
                  <td>{i.node}</td>
                  <td>{i.root}</td>
                  <td>
                    <span class={`badge badge-sm st-${i.state === 'crit' ? 'crit' : 'warn'}`}>{i.state.toUpperCase()}</span>
                  </td>
                  <td>{fmtNum(i.worst_value)}</td>
                  <td class="mono">{i.child ?? '—'}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </Section>
  );
}

function ObjectivesSection({ r }: { r: Report }) {
  const rows = r.objectives ?? [];
  return (
    <Section id="objectives" title="Objectives">
      {rows.length === 0 ? (
        <Empty>This report has no objectives; save it with some to see their attainment.</Empty>
      ) : (
        <table class="report-table">
          <caption class="sr-only">Attainment of each objective over the period</caption>
          <thead>
            <tr>
              <th scope="col">Objective</th>
              <th scope="col">Attainment</th>
              <th scope="col">Hours missed</th>
            </tr>
          </thead>
          <tbody>
            {rows.map((o) => (
              <tr key={o.name}>
                <th scope="row">{o.name}</th>
                <td>
                  {fmtShare(o.attainment)} <span class="muted small">of {fmtNum(o.hours)} h</span>
                </td>
                <td>
                  {o.missed.length === 0 ? 'none' : `${o.missed.length}: `}
                  {o.missed.slice(0, 20).map(fmtUtc).join(', ')}
                  {o.missed.length > 20 && ` and ${o.missed.length - 20} more`}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </Section>
  );
}
