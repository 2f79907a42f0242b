import { describe, expect, it, vi } from 'vitest';

// happy-dom has no canvas: a stand-in uPlot records what each chart was given.
const plots = vi.hoisted(() => [] as { opts: { series: { label?: string; spanGaps?: boolean }[] }; data: (number | null)[][] }[]);
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

const HEADINGS = ['Ping delay', 'Kernel latency', 'Reliability', 'Availability', 'Incidents', 'Objectives'];

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
    expect(el.querySelector<HTMLAnchorElement>('a[href^="/nodes/acme-1?at="]')).not.toBeNull();
    // Customers cannot save definitions.
    expect(el.querySelector('form[aria-label="Save this report"]')).toBeNull();
    // Inline style attributes break the CSP; only the bar widths are set, through the DOM.
    expect(el.querySelectorAll('.seg-no_data').length).toBe(2);
    // Charts: ping and kernel; the ping one keeps its gaps (nulls, never joined).
    const ping = plots.find((p) => p.data[1]?.length === 6)!;
    expect(ping.data[1]).toEqual([0.4, 0.42, null, 0.41, null, 0.39]);
    expect(ping.opts.series.slice(1).every((s) => s.spanGaps === false)).toBe(true);
    expect(el.querySelectorAll('figure.report-chart').length).toBe(2);
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
