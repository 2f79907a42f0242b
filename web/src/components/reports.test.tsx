import { describe, expect, it, vi } from 'vitest';

// happy-dom has no canvas: a stand-in uPlot records what each chart was given.
const plots = vi.hoisted(
  () => [] as { opts: { series: { label?: string; spanGaps?: boolean; dash?: number[]; points?: { filter?: () => number[] | null } }[] }; data: (number | null)[][] }[],
);
vi.mock('uplot', () => ({
  default: class {
    constructor(opts: never, data: never) {
      plots.push({ opts, data });
    }
    setSize() {}
    destroy() {}
  },
}));
import { acmeReport } from '../reportfixture';
import { click, fakeApi, mountAs, type, waitFor } from '../testutil';
import { ReportsPage } from './Reports';

const HEADINGS = ['Summary', 'Ping delay', 'Kernel latency', 'Reliability', 'Availability', 'Incidents', 'Objectives'];

describe('ReportsPage', () => {
  it("runs a customer's report within its scope and shows every section", async () => {
    const calls = fakeApi({
      'GET /api/v1/report-definitions': () => [200, { definitions: [] }],
      'GET /api/v1/reports': () => [200, acmeReport()],
    });
    const el = mountAs('customer', <ReportsPage params={new URLSearchParams('selector=customer%3Dglobex&period=1d')} />);
    await waitFor(() => expect(el.querySelectorAll('h2').length).toBe(HEADINGS.length));
    expect([...el.querySelectorAll('h2')].map((h) => h.textContent)).toEqual(HEADINGS);
    const req = calls.find((c) => c.url.pathname === '/api/v1/reports')!;
    // The customer's own label wins over what the URL asked for.
    expect(req.url.searchParams.get('selector')).toBe('customer=acme');
    expect(Number(req.url.searchParams.get('to')) - Number(req.url.searchParams.get('from'))).toBe(86_400_000);
    const text = el.textContent ?? '';
    expect(text).toContain('±3.0%');
    expect(text).toContain('410 µs');
    expect(text).toContain('−20%'); // p99 1.2 ms against 1.5 ms before
    expect(text).toContain('tcp_reset/sent/no_socket');
    const csv = el.querySelector<HTMLAnchorElement>('a[href*="format=csv"]')!;
    expect(new URL(csv.href, 'http://x').searchParams.get('selector')).toBe('customer=acme');
    expect(el.querySelector('a[href*="format=json"]')).not.toBeNull();
    // An incident opens the tree at its time, on the metric that explains it.
    const link = el.querySelector<HTMLAnchorElement>('a[href^="/nodes/acme-1?at="]')!;
    expect(new URL(link.href, 'http://x').searchParams.get('metric')).toBe('tcp_reset/sent/no_socket');
    // The worst value carries its unit.
    expect(text).toContain('40.5 resets/s');
    // Customers cannot save definitions.
    expect(el.querySelector('form[aria-label="Save this report"]')).toBeNull();
    // Inline style attributes break the CSP; only the bar widths are set, through the DOM.
    // The per-node rows (in a closed <details>) and the timeline's 7 days.
    expect(el.querySelectorAll('.availability .seg-no_data').length).toBe(2);
    expect(el.querySelectorAll('.avail-strip .avail-step').length).toBe(7);
    expect(el.querySelector('.avail-strip')?.getAttribute('aria-label')).toMatch(/WARN or CRIT in 1 of 7 days, from 2026-11-19/);
    // Charts: ping and kernel; the ping one keeps its gaps (nulls, never joined).
    const ping = plots.find((p) => p.data[1]?.length === 6)!;
    expect(ping.data[1]).toEqual([0.4, 0.42, null, 0.41, null, 0.39]);
    expect(ping.opts.series.slice(1, 3).every((s) => s.spanGaps === false)).toBe(true);
    // The baseline: the period's median, dashed, across the chart.
    expect(ping.opts.series[3]).toMatchObject({ label: 'median of the period' });
    expect(ping.opts.series[3].dash).toBeTruthy();
    expect(ping.data[3]).toEqual([0.41, 0.41, 0.41, 0.41, 0.41, 0.41]);
    // The kernel stage's one hour with data has nothing around it: a dot.
    const kernel = plots.find((p) => p.data[1]?.length === 3)!;
    expect(kernel.opts.series[1].points?.filter?.()).toEqual([1]);
    expect(el.querySelectorAll('figure.report-chart').length).toBe(2);
    // Legends are the page's own, so they print.
    const legend = el.querySelector('figure.report-chart .chart-legend')?.textContent ?? '';
    expect(legend).toMatch(/p50.*p99.*median of the period: 410 µs/);
    // Every column has data: the per-node p90 and host delay too.
    const perNode = [...el.querySelectorAll('table')].find((t) => t.querySelector('caption')?.textContent?.startsWith('Per node'))!;
    expect(perNode.textContent).toContain('610 µs');
    expect(perNode.textContent).toContain('21 µs');
    expect(perNode.textContent).not.toContain('—');
    // A target shows a node count, and its nodes one click away.
    const more = [...el.querySelectorAll('button')].find((b) => b.textContent?.includes('1 node'))!;
    expect(more.getAttribute('aria-expanded')).toBe('false');
    expect(more.closest('th')?.textContent).not.toContain('acme-1');
    click(more);
    await waitFor(() => expect(el.querySelector('tr.drill-down')?.textContent).toContain('acme-1'));
    expect(more.getAttribute('aria-expanded')).toBe('true');
    // The summary compares with the previous period.
    const summary = el.querySelector('[data-section=summary]')!;
    expect(summary.textContent).toContain('Ping p99 to peer:acme-2');
    expect(summary.textContent).toContain('+29%'); // resets 40 against 31
  });

  it("collapses what has no data and starts a young fleet's charts at its data", async () => {
    const r = acmeReport();
    r.objectives = [];
    r.kernel_latency = [];
    r.incidents = [];
    // Data only in the last of the 7 days.
    r.ping.series[0].points = [
      { t: '2026-11-24T12:00:00Z', p50_ms: 0.4, p99_ms: 1.1, loss: 0 },
      { t: '2026-11-24T13:00:00Z', p50_ms: 0.42, p99_ms: 1.3, loss: 0 },
    ];
    r.availability_timeline = [];
    fakeApi({
      'GET /api/v1/report-definitions': () => [200, { definitions: [] }],
      'GET /api/v1/reports': () => [200, r],
    });
    plots.length = 0;
    const el = mountAs('customer', <ReportsPage params={new URLSearchParams('period=7d')} />);
    await waitFor(() => expect(el.querySelector('[data-section=summary]')).not.toBeNull());
    // Sections with data first, the empty ones after, collapsed to a line;
    // a customer without objectives has no Objectives section at all.
    expect([...el.querySelectorAll('h2')].map((h) => h.textContent)).toEqual(['Summary', 'Ping delay', 'Reliability', 'Availability', 'Kernel latency', 'Incidents']);
    expect(el.querySelectorAll('.report-section-empty').length).toBe(2);
    expect(el.querySelector('[data-section=summary]')?.textContent).toContain('No data in this period for: Kernel latency, Incidents');
    expect(el.textContent).toMatch(/Data starts at 2026-11-24 12:00 UTC, 6 d 12 h into the period/);
    expect(el.querySelectorAll('figure.report-chart').length).toBe(1);
  });

  it('refuses a bad custom period without asking the collector', async () => {
    const calls = fakeApi({ 'GET /api/v1/report-definitions': () => [200, { definitions: [] }] });
    const el = mountAs('operator', <ReportsPage params={new URLSearchParams('period=custom&from=2026-11-05&to=2026-11-01')} />);
    await waitFor(() => expect(el.querySelector('[role=alert]')?.textContent).toMatch(/before the first/));
    expect(calls.some((c) => c.url.pathname === '/api/v1/reports')).toBe(false);
  });

  it('lets an operator save the report as a definition', async () => {
    const calls = fakeApi({
      'GET /api/v1/report-definitions': () => [200, { definitions: [] }],
      'GET /api/v1/reports': () => [200, acmeReport()],
      'POST /api/v1/report-definitions': (_u, init) => [201, { id: 7, created_by: 'operator-1', created_at: '2026-11-25T00:00:00Z', ...JSON.parse(String(init?.body)) }],
    });
    const el = mountAs('operator', <ReportsPage params={new URLSearchParams('selector=customer%3Dacme&period=30d&targets=peer%3Aacme-2')} />);
    const form = await waitFor(() => el.querySelector<HTMLFormElement>('form[aria-label="Save this report"]')!);
    type(form.querySelector('input')!, 'acme monthly');
    type(form.querySelector<HTMLInputElement>('input[type=number]')!, '5');
    click(form.querySelector('button[type=submit]')!);
    await waitFor(() => expect(location.pathname).toBe('/reports/7'));
    expect(calls.find((c) => c.method === 'POST')?.body).toEqual({
      name: 'acme monthly',
      selector: { customer: 'acme' },
      period: '30d',
      from: null,
      to: null,
      targets: ['peer:acme-2'],
      objectives: [{ name: 'ping p99 < 5 ms per hour', metric: 'ping', quantile: 0.99, below_ms: 5, per: 'hour' }],
    });
  });

  it('runs a saved definition through its stable id', async () => {
    const calls = fakeApi({
      'GET /api/v1/report-definitions': () => [200, { definitions: [{ id: 3, name: 'acme weekly' }] }],
      'GET /api/v1/report-definitions/3': () => [200, { id: 3, name: 'acme weekly', selector: { customer: 'acme' }, period: '7d', targets: [], objectives: [] }],
      'GET /api/v1/reports': () => [200, acmeReport()],
    });
    const el = mountAs('customer', <ReportsPage id={3} params={new URLSearchParams()} />);
    await waitFor(() => expect(el.querySelector('h1')?.textContent).toBe('acme weekly'));
    await waitFor(() => expect(el.querySelectorAll('h2').length).toBe(HEADINGS.length));
    expect(calls.find((c) => c.url.pathname === '/api/v1/reports')?.url.search).toBe('?definition=3&format=json');
    // A customer is not asked to save objectives it cannot save.
    expect(el.textContent).not.toMatch(/save it with/i);
    // Customers may run saved reports but not delete them.
    expect([...el.querySelectorAll('button')].some((b) => /delete/i.test(b.textContent ?? ''))).toBe(false);
  });

  it('lists every saved definition, following the pages to the last', async () => {
    const pages: Record<string, unknown> = {
      '': { definitions: [{ id: 1, name: 'acme daily' }, { id: 2, name: 'acme weekly' }], next_cursor: 'p2' },
      p2: { definitions: [{ id: 3, name: 'globex monthly' }], next_cursor: 'p3' },
      p3: { definitions: [{ id: 4, name: 'zeta yearly' }] },
    };
    const calls = fakeApi({
      'GET /api/v1/report-definitions': (u) => [200, pages[u.searchParams.get('cursor') ?? '']],
      'GET /api/v1/reports': () => [200, acmeReport()],
    });
    const el = mountAs('operator', <ReportsPage params={new URLSearchParams('period=1d')} />);
    await waitFor(() =>
      expect([...el.querySelectorAll('.saved-reports a')].map((a) => a.textContent)).toEqual(['acme daily', 'acme weekly', 'globex monthly', 'zeta yearly']),
    );
    const listed = calls.filter((c) => c.url.pathname === '/api/v1/report-definitions').map((c) => c.url.searchParams.get('cursor'));
    expect(listed).toEqual([null, 'p2', 'p3']);
  });

  it('lets an operator delete a saved definition', async () => {
    const calls = fakeApi({
      'GET /api/v1/report-definitions': () => [200, { definitions: [] }],
      'GET /api/v1/report-definitions/3': () => [200, { id: 3, name: 'acme weekly', selector: { customer: 'acme' }, period: '7d', targets: [], objectives: [] }],
      'GET /api/v1/reports': () => [200, acmeReport()],
      'DELETE /api/v1/report-definitions/3': () => [204, undefined],
    });
    vi.stubGlobal('confirm', () => true);
    const el = mountAs('operator', <ReportsPage id={3} params={new URLSearchParams()} />);
    const btn = await waitFor(() => [...el.querySelectorAll('button')].find((b) => /delete this saved report/i.test(b.textContent ?? ''))!);
    click(btn);
    await waitFor(() => expect(location.pathname).toBe('/reports'));
    expect(calls.some((c) => c.method === 'DELETE' && c.url.pathname === '/api/v1/report-definitions/3')).toBe(true);
  });
});
