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
  chartStart,
  dataStart,
  pointsStart,
  rootHeadline,
  definitionReportUrl,
  fmtDuration,
  fmtErrorBound,
  fmtLatency,
  fmtMs,
  fmtNum,
  fmtShare,
  fmtUtc,
  fmtValue,
  hasData,
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
  timelineShare,
} from '../report';
import type { Num, PingNode, PingTarget, Report, ReportDefinition } from '../reporttypes';
import { linkClick, navigate } from '../route';
import { ErrorBox, Loading, TableWrap } from './common';
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
      {report.data && url && csvUrl && <ReportView r={report.data} jsonUrl={url} csvUrl={csvUrl} staff={me?.role !== 'customer'} />}
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
      <label class="field-inline" for="report-save-name">
        <span>Save as</span>
        <input id="report-save-name" type="text" aria-label="Save as" value={name} maxLength={200} onInput={(e) => setName((e.currentTarget as HTMLInputElement).value)} />
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

/**
 * A section of the report. One with data starts a printed page of its own;
 * one without is a heading and a line saying so, printed together with the
 * others like it (no page that says only "no data").
 */
function Section({ id, title, empty, children }: { id: string; title: string; empty?: ComponentChildren; children?: ComponentChildren }) {
  return (
    <section class={`report-section${empty ? ' report-section-empty' : ''}`} aria-labelledby={`rs-${id}`} data-section={id}>
      <h2 id={`rs-${id}`}>{title}</h2>
      {empty ? <p class="muted">{empty}</p> : children}
    </section>
  );
}

/** Which sections have data, in the report's order. */
function sectionsOf(r: Report, staff: boolean): { id: string; has: boolean }[] {
  const ping = (r.ping?.targets ?? []).length > 0;
  const kernel = (r.kernel_latency ?? []).length > 0;
  const rel = r.reliability;
  const reliability =
    (rel?.resets ?? []).length > 0 || (rel?.drops ?? []).length > 0 || [rel?.retransmits?.segments, rel?.retransmits?.rtos].some((v) => v !== null && v !== undefined);
  const availability = (r.availability_timeline ?? []).length > 0 || (r.availability ?? []).some((a) => (a.no_data ?? 1) < 1);
  const incidents = (r.incidents ?? []).length > 0;
  const objectives = (r.objectives ?? []).length > 0;
  return [
    { id: 'ping', has: ping },
    { id: 'kernel', has: kernel },
    { id: 'reliability', has: reliability },
    { id: 'availability', has: availability },
    { id: 'incidents', has: incidents },
    // A customer cannot add objectives: without any, the section is not theirs to see.
    ...(objectives || staff ? [{ id: 'objectives', has: objectives }] : []),
  ];
}

export function ReportView({ r, jsonUrl, csvUrl, staff = true }: { r: Report; jsonUrl: string; csvUrl: string; staff?: boolean }) {
  const from = Date.parse(r.period.from);
  const to = Date.parse(r.period.to);
  const nodes = r.scope?.nodes ?? [];
  const start = dataStart(r);
  // The charts start with the bucket the data starts in, which may begin before it.
  const first = pointsStart(r);
  const chartFrom = chartStart(from, to, start === null ? null : Math.min(start, first ?? start));
  const secs = sectionsOf(r, staff);
  const render = (id: string, has: boolean) => {
    switch (id) {
      case 'ping':
        return <PingSection key={id} r={r} from={chartFrom} to={to} has={has} />;
      case 'kernel':
        return <KernelSection key={id} r={r} from={chartFrom} to={to} has={has} />;
      case 'reliability':
        return <ReliabilitySection key={id} r={r} has={has} />;
      case 'availability':
        return <AvailabilitySection key={id} r={r} has={has} />;
      case 'incidents':
        return <IncidentsSection key={id} r={r} has={has} />;
      default:
        return <ObjectivesSection key={id} r={r} has={has} staff={staff} />;
    }
  };
  return (
    <article class="report" aria-label="Report">
      <div class="report-meta">
        <p>
          Nodes <strong>{selectorString(r.scope?.selector) || 'all'}</strong> ({nodes.length === 1 ? '1 node' : `${nodes.length} nodes`}) · {fmtUtc(r.period.from)} – {fmtUtc(r.period.to)} · compared with{' '}
          {fmtUtc(r.period.previous_from)} – {fmtUtc(r.period.previous_to)}
        </p>
        {start === null ? (
          <p class="notice">No data at all in this period: the nodes in scope reported nothing.</p>
        ) : (
          chartFrom > from && (
            <p class="notice">
              Data starts at {fmtUtc(start)}, {fmtDuration((start - from) / 1000)} into the period: the charts start there, and what comes before is counted as no data.
            </p>
          )
        )}
        <p class="muted small">
          Percentiles come from merged histogram buckets and are within {fmtErrorBound(r.error_bound)} of the exact value. Periods without data are drawn as gaps and
          counted as “no data”, never as zero or OK; a point with no data on either side is drawn as a dot. Generated {fmtUtc(r.generated_at)}.
        </p>
        <p class="downloads no-print">
          Download: <a href={csvUrl} download>CSV</a> · <a href={jsonUrl} download>JSON</a>
        </p>
        {nodes.length > 0 && (
          <details class="scope-nodes no-print">
            <summary>The {nodes.length === 1 ? 'node' : `${nodes.length} nodes`} in scope</summary>
            <p class="small">{nodes.join(', ')}</p>
          </details>
        )}
      </div>
      <SummarySection r={r} secs={secs} />
      {secs.filter((s) => s.has).map((s) => render(s.id, true))}
      {secs.filter((s) => !s.has).map((s) => render(s.id, false))}
    </article>
  );
}

/** Summary: the period against the previous one, the first printed page. */
function SummarySection({ r, secs }: { r: Report; secs: { id: string; has: boolean }[] }) {
  const targets = [...(r.ping?.targets ?? [])].sort((a, b) => (b.p99_ms ?? -1) - (a.p99_ms ?? -1));
  const shown = targets.slice(0, 8);
  const rel = r.reliability;
  const resets = sum((rel?.resets ?? []).map((x) => x.count));
  const drops = sum((rel?.drops ?? []).map((x) => x.count));
  const from = Date.parse(r.period.from);
  const to = Date.parse(r.period.to);
  const avail = (r.availability_timeline ?? []).map((a) => ({ root: a.root, s: timelineShare(a, from, to) }));
  const incidents = r.incidents ?? [];
  const crit = incidents.filter((i) => i.state === 'crit').length;
  const empty = secs.filter((s) => !s.has).map((s) => TITLES[s.id]);
  return (
    <section class="report-section report-summary" aria-labelledby="rs-summary" data-section="summary">
      <h2 id="rs-summary">Summary</h2>
      <p class="muted small">
        This period against the previous period of the same length ({fmtUtc(r.period.previous_from)} – {fmtUtc(r.period.previous_to)}).
      </p>
      <TableWrap>
        <table class="report-table summary-table">
          <caption class="sr-only">Headline numbers of this period and their change against the previous period</caption>
          <thead>
            <tr>
              <th scope="col">Measure</th>
              <th scope="col">This period</th>
              <th scope="col">Previous period</th>
              <th scope="col">Change</th>
            </tr>
          </thead>
          <tbody>
            {shown.map((t) => (
              <>
                <tr key={`${t.target}/p99`}>
                  <th scope="row">Ping p99 to {t.target}</th>
                  <td>{fmtMs(t.p99_ms)}</td>
                  <td>{fmtMs(t.previous?.p99_ms)}</td>
                  <td>
                    <Delta c={change(t.p99_ms, t.previous?.p99_ms)} />
                  </td>
                </tr>
                <tr key={`${t.target}/loss`}>
                  <th scope="row">Ping loss to {t.target}</th>
                  <td>{fmtShare(t.loss)}</td>
                  <td>{fmtShare(t.previous?.loss)}</td>
                  <td>
                    <Delta c={change(t.loss, t.previous?.loss, 'share')} />
                  </td>
                </tr>
              </>
            ))}
            <tr>
              <th scope="row">TCP resets</th>
              <td>{fmtNum(resets)}</td>
              <td>{fmtNum(rel?.previous?.resets)}</td>
              <td>
                <Delta c={change(resets, rel?.previous?.resets)} />
              </td>
            </tr>
            <tr>
              <th scope="row">Retransmitted segments</th>
              <td>{fmtNum(rel?.retransmits?.segments)}</td>
              <td>{fmtNum(rel?.previous?.retransmits)}</td>
              <td>
                <Delta c={change(rel?.retransmits?.segments, rel?.previous?.retransmits)} />
              </td>
            </tr>
            <tr>
              <th scope="row">Drops</th>
              <td>{fmtNum(drops)}</td>
              <td>{fmtNum(rel?.previous?.drops)}</td>
              <td>
                <Delta c={change(drops, rel?.previous?.drops)} />
              </td>
            </tr>
          </tbody>
        </table>
      </TableWrap>
      {targets.length > shown.length && <p class="muted small">The {shown.length} ping targets with the highest p99 of {targets.length}; every target is under Ping delay.</p>}
      <dl class="headline">
        <div>
          <dt>Incidents</dt>
          <dd>
            {fmtNum(incidents.length)} <span class="muted small">({crit} CRIT)</span>
          </dd>
        </div>
        {avail.map((a) => {
          // OK of the time the root reported; the period's time without data said apart, only when there was some.
          const h = rootHeadline(a.s);
          return (
            <div key={a.root} data-root={a.root}>
              <dt>{a.root} OK</dt>
              <dd>
                <span class="headline-ok">{fmtShare(h.ok)}</span>
                {h.noData !== null && <span class="muted small headline-nodata">{h.ok === null ? 'nothing reported in the period' : `of the time it reported; ${fmtShare(h.noData)} of the period without data`}</span>}
              </dd>
            </div>
          );
        })}
      </dl>
      {empty.length > 0 && <p class="muted small">No data in this period for: {empty.join(', ')} (listed at the end).</p>}
    </section>
  );
}

const TITLES: Record<string, string> = {
  ping: 'Ping delay',
  kernel: 'Kernel latency',
  reliability: 'Reliability',
  availability: 'Availability',
  incidents: 'Incidents',
  objectives: 'Objectives',
};

function PingSection({ r, from, to, has }: { r: Report; from: number; to: number; has: boolean }) {
  const targets = r.ping?.targets ?? [];
  const perNode = r.ping?.per_node ?? [];
  const series = r.ping?.series ?? [];
  if (!has) return <Section id="ping" title={TITLES.ping} empty="No ping targets in this period." />;
  const charts = series.map((s) => ({ s, data: alignSeries(s.points, ['p50_ms', 'p99_ms']), t: targets.find((t) => t.target === s.target) }));
  const blank = charts.filter((c) => !hasData(c.data));
  return (
    <Section id="ping" title={TITLES.ping}>
      <PingTable caption="Per target" first="Target">
        {targets.map((t) => (
          <PingTargetRows key={t.target} t={t} />
        ))}
      </PingTable>
      {perNode.length > 0 && (
        <PingTable caption="Per node, over every target it pings" first="Node">
          {perNode.map((n) => (
            <PingNodeRow key={n.node} n={n} />
          ))}
        </PingTable>
      )}
      {charts
        .filter((c) => hasData(c.data))
        .map(({ s, data, t }) => (
          <div class="report-chart-block" key={s.target}>
            <h3>Delay to {s.target} over the period</h3>
            <ReportChart data={data} labels={['p50', 'p99']} fmt={(v) => fmtMs(v)} title={`Ping delay to ${s.target}`} from={from} to={to} baseline={{ label: 'median of the period', value: t?.p50_ms }} />
          </div>
        ))}
      {blank.length > 0 && <p class="muted small">No delay was measured over time to {blank.map((c) => c.s.target).join(', ')}.</p>}
    </Section>
  );
}

// PingTargetRows is a target's row and, opened, its nodes' rows: a count
// in the table, the names and numbers one click away.
function PingTargetRows({ t }: { t: PingTarget }) {
  const [open, setOpen] = useState(false);
  const per = t.per_node ?? [];
  const count = t.node_count ?? t.nodes.length;
  const id = `pt-${t.target.replace(/[^A-Za-z0-9_-]/g, '_')}`;
  return (
    <>
      <tr>
        <th scope="row">
          <span class="target-name">{t.target}</span>
          <div class="small">
            {per.length > 0 ? (
              <button type="button" class="btn btn-sm btn-quiet no-print" aria-expanded={open} aria-controls={id} onClick={() => setOpen(!open)}>
                {open ? '▾' : '▸'} {count === 1 ? '1 node' : `${count} nodes`}
              </button>
            ) : (
              <span class="muted">{count === 1 ? '1 node' : `${count} nodes`}</span>
            )}
            <span class="muted print-only">{count === 1 ? '1 node' : `${count} nodes`}</span>
          </div>
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
          {fmtShare(t.loss)} {t.sent != null && <span class="muted">({fmtNum(t.lost)} of {fmtNum(t.sent)})</span>} <Delta c={change(t.loss, t.previous?.loss, 'share')} />
        </td>
        <td>{fmtMs(t.host_delay_p50_ms)}</td>
        <td>{fmtMs(t.host_delay_p99_ms)}</td>
      </tr>
      {open && (
        <tr id={id} class="drill-down">
          <td colSpan={8}>
            <PingTable caption={per.length < count ? `Delay to ${t.target}: the ${per.length} nodes of ${count} with the highest p99` : `Each node's delay to ${t.target}, the highest p99 first`} first="Node">
              {per.map((n) => (
                <PingNodeRow key={n.node} n={n} />
              ))}
            </PingTable>
          </td>
        </tr>
      )}
    </>
  );
}

function PingNodeRow({ n }: { n: PingNode }) {
  return (
    <tr>
      <th scope="row">{n.node}</th>
      <td>{fmtMs(n.p50_ms)}</td>
      <td>{fmtMs(n.p90_ms)}</td>
      <td>{fmtMs(n.p99_ms)}</td>
      <td>{fmtMs(n.max_ms)}</td>
      <td>
        {fmtShare(n.loss)} {n.sent != null && <span class="muted">({fmtNum(n.lost)} of {fmtNum(n.sent)})</span>}
      </td>
      <td>{fmtMs(n.host_delay_p50_ms)}</td>
      <td>{fmtMs(n.host_delay_p99_ms)}</td>
    </tr>
  );
}

function KernelSection({ r, from, to, has }: { r: Report; from: number; to: number; has: boolean }) {
  const rows = r.kernel_latency ?? [];
  if (!has) return <Section id="kernel" title={TITLES.kernel} empty="No kernel latency was measured in this period." />;
  const charts = rows.map((k) => ({ k, data: alignSeries(k.series ?? [], ['p50', 'p99']) }));
  const blank = charts.filter((c) => !hasData(c.data));
  return (
    <Section id="kernel" title={TITLES.kernel}>
      <TableWrap>
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
      </TableWrap>
      {charts
        .filter((c) => hasData(c.data))
        .map(({ k, data }) => (
          <div class="report-chart-block" key={k.metric}>
            <h3>{k.title} over the period</h3>
            <ReportChart data={data} labels={['p50', 'p99']} fmt={(v) => fmtLatency(v, k.unit)} title={`${k.title} latency`} from={from} to={to} baseline={{ label: 'median of the period', value: k.p50 }} />
          </div>
        ))}
      {blank.length > 0 && <p class="muted small">No chart for {blank.map((c) => c.k.title).join(', ')}: no point of the period has data.</p>}
    </Section>
  );
}

const sum = (xs: Num[]): Num => (xs.some((x) => x !== null && x !== undefined) ? xs.reduce<number>((a, x) => a + (x ?? 0), 0) : null);

function ReliabilitySection({ r, has }: { r: Report; has: boolean }) {
  const rel = r.reliability;
  const resets = rel?.resets ?? [];
  const drops = rel?.drops ?? [];
  const rt = rel?.retransmits ?? null;
  const prev = rel?.previous ?? null;
  if (!has) return <Section id="reliability" title={TITLES.reliability} empty="No resets, retransmits or drops were counted in this period." />;
  return (
    <Section id="reliability" title={TITLES.reliability}>
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
            {fmtNum(rt?.per_1000_segments)} {rt?.per_second != null && <span class="muted small">({fmtNum(rt.per_second)}/s)</span>}
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
            {fmtNum(rt?.rtos)} {rt?.rtos_per_second != null && <span class="muted small">({fmtNum(rt.rtos_per_second)}/s)</span>}
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
    <TableWrap>
      <table class="report-table">
        <caption>{caption}</caption>
        <thead>
          <tr>
            {[first, 'p50', 'p90', 'p99', 'max', 'Loss (lost of sent)', 'Host delay p50', 'Host delay p99'].map((c) => (
              <th key={c} scope="col">
                {c}
              </th>
            ))}
          </tr>
        </thead>
        <tbody>{children}</tbody>
      </table>
    </TableWrap>
  );
}

function ReasonTable({ caption, rows }: { caption: string; rows: { key: string; reason: string; count: Num; per_hour: Num }[] }) {
  return (
    <TableWrap>
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
    </TableWrap>
  );
}

const STATES = ['ok', 'warn', 'crit', 'no_data'] as const;

/** A stacked bar of the four states; widths (or heights) set through the DOM, which the CSP allows. */
function StateBar({ a, vertical }: { a: { ok: Num; warn: Num; crit: Num; no_data: Num }; vertical?: boolean }) {
  const b = availabilityBar(a);
  return (
    <div class={vertical ? 'avail-col' : 'avail-bar'} aria-hidden="true">
      {STATES.map((k) => (b[k] > 0 ? <span key={k} class={`seg seg-${k}`} style={vertical ? { height: `${b[k]}%` } : { width: `${b[k]}%` }} /> : null))}
    </div>
  );
}

function AvailabilitySection({ r, has }: { r: Report; has: boolean }) {
  const rows = r.availability ?? [];
  const timeline = r.availability_timeline ?? [];
  if (!has) return <Section id="availability" title={TITLES.availability} empty="No state was recorded in this period." />;
  const from = Date.parse(r.period.from);
  const to = Date.parse(r.period.to);
  return (
    <Section id="availability" title={TITLES.availability}>
      <p class="legend small" aria-hidden="true">
        <span class="sw sw-ok" /> OK <span class="sw sw-warn" /> WARN <span class="sw sw-crit" /> CRIT <span class="sw sw-none" /> no data
      </p>
      {timeline.length > 0 && (
        <TableWrap>
          <table class="report-table avail-timeline">
            <caption>
              Over time, {timeline[0].step_seconds >= 86400 ? 'per day' : 'per hour'}: the share of the nodes' time in each state
            </caption>
            <thead>
              <tr>
                <th scope="col">Root</th>
                <th scope="col">Whole period</th>
                <th scope="col">
                  {fmtUtc(r.period.from)} → {fmtUtc(r.period.to)}
                </th>
              </tr>
            </thead>
            <tbody>
              {timeline.map((a) => {
                const s = timelineShare(a, from, to);
                const bad = a.points.filter((p) => p.warn + p.crit > 0);
                return (
                  <tr key={a.root}>
                    <th scope="row">{a.root}</th>
                    <td class="nowrap">
                      {fmtShare(s.ok)} OK
                      {s.warn + s.crit > 0 && <div class="small">{fmtShare(s.warn + s.crit)} WARN/CRIT</div>}
                      {s.no_data > 0 && <div class="small muted">{fmtShare(s.no_data)} no data</div>}
                    </td>
                    <td>
                      <div
                        class="avail-strip"
                        role="img"
                        aria-label={`${a.root}: ${fmtShare(s.ok)} OK over the period${bad.length ? `; WARN or CRIT in ${bad.length} of ${a.points.length} ${a.step_seconds >= 86400 ? 'days' : 'hours'}, from ${fmtUtc(bad[0].t)}` : ''}`}
                      >
                        {a.points.map((p) => (
                          <span key={p.t} class="avail-step" title={`${fmtUtc(p.t)}: ${fmtShare(p.ok)} OK, ${fmtShare(p.warn)} WARN, ${fmtShare(p.crit)} CRIT, ${fmtShare(p.no_data)} no data`}>
                            <StateBar a={p} vertical />
                          </span>
                        ))}
                      </div>
                      <div class="avail-axis small muted" aria-hidden="true">
                        <span>{fmtUtc(a.points[0]?.t).slice(0, a.step_seconds >= 86400 ? 10 : 16)}</span>
                        <span>{fmtUtc(a.points[a.points.length - 1]?.t).slice(0, a.step_seconds >= 86400 ? 10 : 16)}</span>
                      </div>
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </TableWrap>
      )}
      <details class="avail-nodes no-print">
        <summary>Per node and root ({rows.length} rows)</summary>
        <TableWrap>
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
              {rows.map((a) => (
                <tr key={`${a.node}/${a.root}`}>
                  <th scope="row">{a.node}</th>
                  <td>{a.root}</td>
                  <td>{fmtShare(a.ok)}</td>
                  <td>{fmtShare(a.warn)}</td>
                  <td>{fmtShare(a.crit)}</td>
                  <td>{fmtShare(a.no_data)}</td>
                  <td class="bar-col">
                    <StateBar a={a} />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </TableWrap>
      </details>
    </Section>
  );
}

function IncidentsSection({ r, has }: { r: Report; has: boolean }) {
  const rows = r.incidents ?? [];
  if (!has) return <Section id="incidents" title={TITLES.incidents} empty="No root was WARN or CRIT in this period." />;
  return (
    <Section id="incidents" title={TITLES.incidents}>
      <TableWrap>
        <table class="report-table">
          <caption class="sr-only">Every span in the period where a root was WARN or CRIT; each start opens the node's tree at that time</caption>
          <thead>
            <tr>
              <th scope="col">Start</th>
              <th scope="col">Length</th>
              <th scope="col">Node</th>
              <th scope="col">Root</th>
              <th scope="col">State</th>
              <th scope="col">Explained by</th>
              <th scope="col">Worst value</th>
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
                <td class="mono">{i.child ?? '—'}</td>
                <td class="nowrap">
                  {fmtValue(i.worst_value, i.unit)}
                  {i.metric && i.metric !== i.child && i.metric !== i.root && <div class="muted small mono">{i.metric}</div>}
                  {i.metric === i.root && i.child === null && <div class="muted small">of {i.root}</div>}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </TableWrap>
    </Section>
  );
}

function ObjectivesSection({ r, has, staff }: { r: Report; has: boolean; staff: boolean }) {
  const rows = r.objectives ?? [];
  if (!has)
    return <Section id="objectives" title={TITLES.objectives} empty={staff ? 'This report has no objectives; save it with some to see their attainment.' : 'This report has no objectives.'} />;
  return (
    <Section id="objectives" title={TITLES.objectives}>
      <TableWrap>
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
      </TableWrap>
    </Section>
  );
}
