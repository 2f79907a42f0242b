import { act } from 'preact/test-utils';
import { beforeEach, describe, expect, it, vi } from 'vitest';
import type { Role } from '../access';
import type { ExportKindStatus, ExportReceiverStatus, ExportStatus } from '../api';
import { App } from '../app';
import { FAILING_AFTER_MS, receiverHealth, scrapeConfig, scrapeInterval } from '../exportstatus';
import { $, $$, byText, click, fakeApi, hasText, mount, mountAs, stubClipboard, waitFor, whoami } from '../testutil';
import { EXPORT_REFRESH_MS, ExportPage } from './Export';

const ago = (ms: number) => new Date(Date.now() - ms).toISOString();

const settings = { window_seconds: 300, counter_hold_seconds: 60, max_series_per_node: 500, max_series_per_family: 200_000 };
const scrape = (extra: Partial<ExportKindStatus> = {}): ExportKindStatus => ({
  kind: 'scrape',
  at: ago(5_000),
  nodes: 12,
  series: 4321,
  overflowed: 0,
  overflowed_total: 0,
  took_ms: 38.5,
  exports: 240,
  ...extra,
});
const receiver = (extra: Partial<ExportReceiverStatus> = {}): ExportReceiverStatus => ({
  name: 'mimir',
  type: 'remote_write',
  url: 'https://mimir.example/api/v1/push',
  queue_bytes: 2048,
  queue_oldest: ago(10_000),
  last_success: ago(15_000),
  samples_sent: 123_456,
  samples_dropped: 0,
  ...extra,
});
const status = (extra: Partial<ExportStatus> = {}): ExportStatus => ({ ...settings, exports: [], receivers: [], ...extra });

function open(st: ExportStatus | (() => ExportStatus)) {
  const calls = fakeApi({ 'GET /api/v1/export/status': () => [200, typeof st === 'function' ? st() : st] });
  history.replaceState(null, '', '/export');
  const el = mountAs('viewer', <ExportPage />);
  return { el, calls };
}

beforeEach(() => history.replaceState(null, '', '/'));

describe('the export page', () => {
  it('says so when nothing has scraped this collector and no receiver is configured', async () => {
    const { el } = open(status());
    await waitFor(() => $(el, '.export-no-scrape'));
    expect($(el, '.export-no-scrape').textContent).toBe('No scrape yet on this collector.');
    expect($(el, '.export-no-receivers').textContent).toBe('No push receivers configured (--export.receivers-file).');
    expect(el.querySelector('.export-table')).toBeNull();
    expect(el.querySelector('.receivers-table')).toBeNull();
    expect(el.querySelector('.export-overflow')).toBeNull();
    // The way to start scraping is there even before the first scrape.
    expect($(el, '[data-scrape-url]').textContent).toBe(`${location.origin}/api/v1/export/metrics`);
    expect($(el, '.export-config').textContent).toContain('metrics_path: /api/v1/export/metrics');
    expect($(el, '[data-setting=window]').textContent).toContain('5 min');
    expect($(el, '[data-setting=counter-hold]').textContent).toContain('60 s');
    expect($(el, '[data-setting=max-series-per-node]').textContent).toContain('500');
    expect($(el, '[data-setting=max-series-per-family]').textContent).toContain('200,000');
  });

  it('shows a healthy export: the scrape and a receiver with their series, the receiver delivering', async () => {
    const { el } = open(status({ exports: [scrape({ overflowed_total: 0 }), { ...scrape(), kind: 'mimir', series: 4000, exports: 20 }], receivers: [receiver()] }));
    await waitFor(() => $(el, '.export-table'));
    // The scrape first, then the receivers' kinds.
    expect($$(el, '.export-table tbody tr').map((r) => r.dataset.kind)).toEqual(['scrape', 'mimir']);
    const row = $(el, 'tr[data-kind=scrape]');
    expect($(row, '[data-series]').textContent).toBe('4,321');
    expect($(row, '[data-overflowed]').textContent).toBe('none');
    expect(row.textContent).toContain('38.5 ms');
    expect(el.querySelector('.export-overflow')).toBeNull();
    expect(el.querySelector('.export-no-scrape')).toBeNull();
    const r = $(el, 'tr[data-receiver=mimir]');
    expect(r.dataset.health).toBe('ok');
    expect($(r, '.badge').textContent).toBe('Delivering');
    expect(r.textContent).toContain('2 KiB');
    expect(r.textContent).toContain('123,456 sent');
    expect(r.textContent).toContain('0 dropped');
    expect(r.textContent).toContain('remote write');
    expect(r.querySelector('.export-failing')).toBeNull();
  });

  it('warns when an export overflowed, naming the flags that raise the caps and their values', async () => {
    const { el } = open(status({ max_series_per_node: 50, exports: [scrape({ overflowed: 120, overflowed_total: 3400 }), { ...scrape(), kind: 'mimir', overflowed: 0, overflowed_total: 7 }] }));
    await waitFor(() => $(el, '.export-overflow'));
    const notice = $(el, '.export-overflow').textContent!;
    expect(notice).toContain('Scrape 120 of 4,321 series');
    expect(notice).not.toContain('mimir');
    expect(notice).toContain('--export.max-series-per-node (now 50)');
    expect(notice).toContain('--export.max-series-per-family (now 200,000)');
    expect(notice).toContain('_overflow');
    const row = $(el, 'tr[data-kind=scrape]');
    expect(row.classList.contains('export-over')).toBe(true);
    expect($(row, '[data-overflowed] .badge').textContent).toBe('120 over a cap');
    expect($(row, '[data-overflowed]').textContent).toContain('3,400 since start');
    // A kind past a cap earlier but not now: no warning, its total kept in sight.
    const m = $(el, 'tr[data-kind=mimir]');
    expect(m.classList.contains('export-over')).toBe(false);
    expect($(m, '[data-overflowed]').textContent).toBe('none7 since start');
  });

  it('shows a failing receiver: its error verbatim and since when nothing got through', async () => {
    const err = 'POST https://vm.example/api/v1/write: 503 Service Unavailable: "upstream <down>"';
    const lastOk = ago(FAILING_AFTER_MS + 10 * 60_000);
    const { el } = open(
      status({
        exports: [scrape()],
        receivers: [
          receiver({ name: 'vm', url: 'https://vm.example/api/v1/write', last_error: err, last_success: lastOk, queue_bytes: 5 * 2 ** 20, queue_oldest: ago(11 * 60_000), samples_dropped: 42 }),
          receiver({ name: 'otel', type: 'otlp', url: 'http://otel:4318', last_error: 'dial tcp 10.0.0.9:4318: connect: connection refused', last_success: undefined }),
          receiver({ name: 'blip', last_error: 'context deadline exceeded', last_success: ago(20_000) }),
          receiver({ name: 'new', last_success: undefined, queue_oldest: undefined, queue_bytes: 0 }),
        ],
      }),
    );
    await waitFor(() => $(el, '.receivers-table'));
    const vm = $(el, 'tr[data-receiver=vm]');
    expect(vm.dataset.health).toBe('failing');
    expect($(vm, '.badge').textContent).toBe('Failing');
    expect($(vm, '.export-error').textContent).toBe(err);
    expect($(vm, '.export-failing').textContent).toMatch(/^Failing since .*\(12 min ago\): nothing delivered after it\.$/);
    expect($(vm, '.export-failing time').getAttribute('datetime')).toBe(lastOk);
    expect(vm.textContent).toContain('5 MiB');
    expect(vm.textContent).toContain('oldest 11 min ago');
    expect($(vm, '.field-error.small').textContent).toBe('42 dropped');
    const otel = $(el, 'tr[data-receiver=otel]');
    expect(otel.dataset.health).toBe('failing');
    expect(otel.textContent).toContain('OTLP');
    expect($(otel, '.export-failing').textContent).toBe('Failing: nothing delivered yet; the oldest waiting export is from 10s ago.');
    expect($(otel, '[data-label="Last success"]').textContent).toBe('never');
    // One failed push after a recent success is a retry, not a failure.
    const blip = $(el, 'tr[data-receiver=blip]');
    expect(blip.dataset.health).toBe('retrying');
    expect(blip.querySelector('.export-failing')).toBeNull();
    expect($(blip, '.export-error').textContent).toBe('context deadline exceeded');
    expect($(el, 'tr[data-receiver=new]').dataset.health).toBe('waiting');
    expect($(el, 'tr[data-receiver=new] .badge').textContent).toBe('No push yet');
  });

  it('copies the scrape URL and the scrape config', async () => {
    const writeText = stubClipboard();
    const { el } = open(status());
    await waitFor(() => $(el, '.export-config'));
    click(byText(el, 'button', 'Copy URL'));
    await waitFor(() => expect(writeText).toHaveBeenCalledWith(`${location.origin}/api/v1/export/metrics`));
    await waitFor(() => expect($(el, '.export-section [role=status]').textContent).toBe('Scrape URL copied.'));
    click(byText(el, 'button', 'Copy scrape config'));
    await waitFor(() => expect(writeText).toHaveBeenLastCalledWith($(el, '.export-config').textContent));
    expect(writeText.mock.lastCall?.[0]).toContain(`targets: ['${location.host}']`);
  });

  it('keeps the last status when a refresh fails, and shows an error when there is none', async () => {
    let fail = false;
    fakeApi({ 'GET /api/v1/export/status': () => (fail ? [500, { error: { code: 'internal', message: 'read the fleet: boom' } }] : [200, status({ exports: [scrape()] })]) });
    vi.useFakeTimers({ shouldAdvanceTime: true });
    const el = mountAs('viewer', <ExportPage />);
    await waitFor(() => $(el, '.export-table'));
    fail = true;
    await act(async () => {
      vi.advanceTimersByTime(EXPORT_REFRESH_MS);
    });
    await waitFor(() => expect($(el, '.stale-notice').textContent).toContain('read the fleet: boom'));
    expect($(el, 'tr[data-kind=scrape]')).toBeTruthy();

    const el2 = mountAs('viewer', <ExportPage />);
    await waitFor(() => expect($(el2, '.error-box').textContent).toContain("Cannot load the export's status"));
  });

  it('refreshes every 15 s', async () => {
    let n = 0;
    vi.useFakeTimers({ shouldAdvanceTime: true });
    const calls = fakeApi({ 'GET /api/v1/export/status': () => [200, status({ exports: [scrape({ series: ++n })] })] });
    const el = mountAs('viewer', <ExportPage />);
    await waitFor(() => expect($(el, '[data-series]').textContent).toBe('1'));
    await act(async () => {
      vi.advanceTimersByTime(EXPORT_REFRESH_MS - 1000);
    });
    expect(calls).toHaveLength(1);
    await act(async () => {
      vi.advanceTimersByTime(1000);
    });
    await waitFor(() => expect($(el, '[data-series]').textContent).toBe('2'));
    expect(calls).toHaveLength(2);
  });
});

describe('who is offered the export page', () => {
  const api = (role: Role) =>
    fakeApi({
      'GET /api/v1/whoami': () => [200, whoami(role)],
      'GET /api/v1/export/status': () => [200, status()],
      'GET /api/v1/alerts': () => [200, { alerts: [] }],
    });
  it.each([['viewer'], ['operator'], ['admin']] as [Role][])('%s: the link in the header, and the page', async (role) => {
    api(role);
    history.replaceState(null, '', '/export');
    const el = mount(<App />);
    await waitFor(() => $(el, '.export-no-scrape'));
    expect($(el, 'h1').textContent).toBe('Prometheus export');
    expect(byText(el, '.admin-links a', 'Export').getAttribute('href')).toBe('/export');
    expect(document.title).toBe('Export · NBS');
  });
  it('customer: no link, and the page does not exist, as at the collector', async () => {
    const calls = api('customer');
    history.replaceState(null, '', '/export');
    const el = mount(<App />);
    await waitFor(() => expect($(el, 'h1').textContent).toBe('Not found'));
    expect(hasText(el, 'a', 'Export')).toBe(false);
    expect(calls.some((c) => c.url.pathname === '/api/v1/export/status')).toBe(false);
  });
});

describe('export logic', () => {
  const now = Date.parse('2026-11-29T10:00:00Z');
  const iso = (msAgo: number) => new Date(now - msAgo).toISOString();
  it.each([
    ['delivering', { last_success: iso(5_000) }, { state: 'ok' }],
    ['delivering after an earlier error was cleared', { last_success: iso(5_000), last_error: '' }, { state: 'ok' }],
    ['never pushed, nothing failed', { last_success: undefined }, { state: 'waiting' }],
    ['failed once after a recent success', { last_success: iso(30_000), last_error: 'x' }, { state: 'retrying', since: iso(30_000) }],
    ['failed right at the bound', { last_success: iso(FAILING_AFTER_MS), last_error: 'x' }, { state: 'retrying', since: iso(FAILING_AFTER_MS) }],
    ['failing past the bound', { last_success: iso(FAILING_AFTER_MS + 1), last_error: 'x' }, { state: 'failing', since: iso(FAILING_AFTER_MS + 1) }],
    ['failing, never delivered', { last_success: undefined, last_error: 'x' }, { state: 'failing' }],
  ] as [string, Partial<ExportReceiverStatus>, unknown][])('receiver health: %s', (_name, r, want) => {
    expect(receiverHealth(receiver(r), now)).toEqual(want);
  });

  it.each([
    [60, 30],
    [0, 30],
    [8, 5],
    [3600, 60],
    [90, 45],
  ])('a counter hold of %ss: scrape every %ss', (hold, want) => {
    expect(scrapeInterval(hold)).toBe(want);
  });

  it('writes a scrape config for the collector it is served from', () => {
    expect(scrapeConfig('https://nbs.example:7443', 60)).toBe(
      [
        'scrape_configs:',
        '  - job_name: nbs',
        '    # shorter than the counter hold (60 s)',
        '    scrape_interval: 30s',
        '    scheme: https',
        '    metrics_path: /api/v1/export/metrics',
        '    authorization:',
        '      type: Bearer',
        '      # staff: every node, customer: own',
        '      credentials: <NBS token>',
        '      # or credentials_file: <path>',
        '    static_configs:',
        "      - targets: ['nbs.example:7443']",
        '',
      ].join('\n'),
    );
    expect(scrapeConfig('http://10.0.0.5', 0)).toContain("scheme: http\n");
    expect(scrapeConfig('http://10.0.0.5', 0)).toContain("targets: ['10.0.0.5']");
  });
});
