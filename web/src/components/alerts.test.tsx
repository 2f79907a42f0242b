import { beforeEach, describe, expect, it, vi } from 'vitest';

// happy-dom has no canvas: a stand-in uPlot for the alert page's chart.
vi.mock('uplot', () => ({
  default: class {
    setSize() {}
    setData() {}
    destroy() {}
  },
}));
import { alertTreeHref, alertValue, alertWindow, formatSpan, holdText, mapRuleErrors, matchNodes, NODE_SUGGESTIONS, quorumText, ruleInput, emptyDraft, sortOpen, splitProblems, draftFromRule } from '../alerts';
import type { AlertRuleInput } from '../api';
import { App } from '../app';
import { alert, evaluator, rule } from '../fixtures';
import { parseRoute } from '../route';
import { act } from 'preact/test-utils';
import { $, $$, byText, click, fakeApi, hasText, mount, mountAs, press, type, waitFor } from '../testutil';
import { AlertDetailPage, AlertsPage } from './Alerts';

beforeEach(() => history.replaceState(null, '', '/'));

// What collector/alert/rule.go Validate answers, joined by "; ".
const SERVER_400 =
  'bad request: invalid alert rule: name "1 bad; name" must be 1-128 letters, digits or \'_\', not starting with a digit (it becomes the alertname label), e.g. TcpResetStorm; ' +
  'metric "Tcp Reset" must be a metric id like tcp_reset/sent/no_socket or a pattern where * matches one path segment ("*" = every root); ' +
  'give for_intervals or for_seconds, not both; severity "Critical" must be a lower-case word such as critical, warning or info; ' +
  'selector label "Customer" is not a valid label key (lower-case letters, digits, \'_\'); label "node" is set by the alert itself; choose another name; ' +
  'runbook_url "wiki" must be an absolute http(s) URL; a group rule needs min_nodes (e.g. 3) or min_percent (e.g. 20); group_by names "rack" twice; group_by label "node" is set by the alert itself; choose another; something new';

/** A tree link at the explaining metric with the breach window. */
const WINDOWED = /^\/nodes\/lab-b\?metric=tcp_reset%2Fsent%2Fno_socket&from=[^&]+&to=[^&]+$/;

describe('alert logic', () => {
  it('routes the alert pages', () => {
    expect(parseRoute('/alerts', '?state=resolved').page).toBe('alerts');
    expect(parseRoute('/alerts/', '').page).toBe('alerts');
    expect(parseRoute('/alerts/rules', '?edit=3')).toMatchObject({ page: 'alertRules' });
    expect(parseRoute('/alerts/42', '')).toMatchObject({ page: 'alert', id: 42 });
    expect(parseRoute('/alerts/0', '').page).toBe('notfound');
    expect(parseRoute('/alerts/x', '').page).toBe('notfound');
  });

  it('orders open alerts firing first, then by severity, newest first', () => {
    const now = Date.now();
    const at = (ms: number) => new Date(now - ms).toISOString();
    const list = [
      alert(1, { state: 'pending', since: at(1000) }),
      alert(2, { severity: 'warning', since: at(1000) }),
      alert(3, { since: at(60_000) }),
      alert(4, { since: at(5_000) }),
    ];
    expect(sortOpen(list).map((a) => a.id)).toEqual([4, 3, 2, 1]);
    // Among equally bad ones, those nobody is on come first: 4 is acknowledged, 3 silenced until later.
    const acked = [alert(3, { since: at(60_000), silenced_until: new Date(now + 60_000).toISOString() }), alert(4, { since: at(5_000), acknowledged_at: at(1000) }), alert(5, { since: at(90_000) })];
    expect(sortOpen(acked, now).map((a) => a.id)).toEqual([5, 4, 3]);
    // A silence that ended no longer counts.
    expect(sortOpen([alert(6, { since: at(60_000), silenced_until: at(1000) }), alert(7, { since: at(5_000), acknowledged_at: at(1000) })], now).map((a) => a.id)).toEqual([6, 7]);
  });

  it('links to the tree at the explaining metric over the breach window, or the fleet for a group', () => {
    const since = '2026-11-27T05:00:00Z';
    // Open for 2 min: padded by 5 min before, and ending now, never after it (the tree of a time not yet come).
    const open = alert(1, { since, ends_at: null });
    expect(alertTreeHref(open, Date.parse('2026-11-27T05:02:00Z'))).toBe(
      '/nodes/lab-b?metric=tcp_reset%2Fsent%2Fno_socket&from=2026-11-27T04%3A55%3A00Z&to=2026-11-27T05%3A02%3A00Z',
    );
    // Resolved a minute ago: its 5 min after the resolve are not there yet.
    const just = alert(1, { since, ends_at: '2026-11-27T05:02:00Z' });
    expect(alertWindow(just, Date.parse('2026-11-27T05:03:00.400Z'))).toEqual({ from: Date.parse('2026-11-27T04:55:00Z'), to: Date.parse('2026-11-27T05:03:01Z') });
    // Resolved after 4 h: padded by a quarter of it, whatever the time now.
    const done = alert(1, { since, ends_at: '2026-11-27T09:00:00Z', child: '' });
    expect(alertTreeHref(done, Date.parse('2026-11-28T00:00:00Z'))).toBe('/nodes/lab-b?metric=tcp_reset&from=2026-11-27T04%3A00%3A00Z&to=2026-11-27T10%3A00%3A00Z');
    expect(alertWindow(done)).toEqual({ from: Date.parse('2026-11-27T04:00:00Z'), to: Date.parse('2026-11-27T10:00:00Z') });
    // A silent node's alert has no metric: the node over the window.
    expect(alertTreeHref(alert(3, { since, ends_at: '2026-11-27T05:04:00Z', child: '', metric: '', root: '' }))).toMatch(/^\/nodes\/lab-b\?from=.*&to=/);
    expect(alertTreeHref(alert(2, { kind: 'group', node: undefined, child: undefined, group: { customer: 'acme' } }))).toBe('/?l.customer=acme');
  });

  it('reads the value against the threshold, with the unit from the summary', () => {
    expect(alertValue(alert(1))).toEqual({ value: '23.5 resets/s', threshold: 'warn 1, crit 10 resets/s' });
    // Collectors now state thresholds in the unit, baselines with their median: taken as they are.
    const ms = { summary: 'ping/gw is CRIT on lab-b: ping/gw/kernel_rtt at 59.8 ms', child: 'ping/gw/kernel_rtt', value: 59.8 };
    const baseline = 'warn 3x median 1.2 ms = 3.6 ms, crit 10x median 1.2 ms = 12 ms';
    expect(alertValue(alert(1, { ...ms, annotations: { threshold: baseline } }))).toEqual({ value: '59.8 ms', threshold: baseline });
    expect(alertValue(alert(1, { ...ms, annotations: { threshold: 'warn 3x median, crit 10x median' } })).threshold).toBe('warn 3x median, crit 10x median');
    expect(alertValue(alert(1, { annotations: { threshold: 'warn 1 resets/s, crit 10 resets/s' } })).threshold).toBe('warn 1 resets/s, crit 10 resets/s');
    // A silent node: how long, no threshold.
    expect(alertValue(alert(1, { rule: 'NBSNodeSilent', child: '', metric: '', root: '', value: 180, annotations: { value: '3m0s' } }))).toEqual({ value: '3m0s', threshold: '' });
    expect(alertValue(alert(1, { summary: 'agent is WARN on n: agent/cpu at 3' }))).toEqual({ value: '23.5', threshold: 'warn 1, crit 10' });
    expect(alertValue(alert(1, { state: 'pending' }))).toEqual({ value: '—', threshold: '' });
    expect(alertValue(alert(2, { kind: 'group', node: undefined, value: 60, annotations: { value: '3' } }))).toEqual({ value: '3 nodes (60%)', threshold: '' });
  });

  it('formats spans, holds and quorums', () => {
    expect(formatSpan(45_000)).toBe('45 s');
    expect(formatSpan(200_000)).toBe('3 min 20 s');
    expect(formatSpan(7_500_000)).toBe('2 h 5 min');
    expect(holdText({ for_intervals: 2 })).toBe('2 intervals');
    expect(holdText({ for_seconds: 90 })).toBe('1 min 30 s');
    expect(quorumText({ kind: 'group', min_percent: 20 })).toBe('≥ 20%');
    expect(quorumText({ kind: 'group', min_nodes: 3 })).toBe('≥ 3 nodes');
    expect(quorumText({ kind: 'node' })).toBe('');
  });

  it('splits problems without breaking quoted input', () => {
    expect(splitProblems('name "a; b" is bad; metric "x" too')).toEqual(['name "a; b" is bad', 'metric "x" too']);
    expect(splitProblems('name "say \\"hi; there\\"" is bad; ok')).toEqual(['name "say \\"hi; there\\"" is bad', 'ok']);
  });

  it('maps every problem of a 400 to its field, the rest to the top', () => {
    const e = mapRuleErrors(SERVER_400);
    expect(e.name).toMatch(/^name "1 bad; name" must be/);
    expect(e.metric).toMatch(/^metric "Tcp Reset"/);
    expect(e.hold).toMatch(/not both/);
    expect(e.severity).toMatch(/lower-case word/);
    expect(e.selector).toMatch(/Customer/);
    expect(e.labels).toBe('label "node" is set by the alert itself; choose another name');
    expect(e.runbook).toMatch(/absolute/);
    expect(e.min).toMatch(/needs min_nodes/);
    expect(e.group_by).toBe('group_by names "rack" twice; group_by label "node" is set by the alert itself; choose another');
    expect(e.form).toBe('something new');
    expect(mapRuleErrors('bad request: invalid alert rule: min_nodes, min_percent and group_by belong to group rules (kind group)')).toEqual({
      kind: 'min_nodes, min_percent and group_by belong to group rules (kind group)',
    });
    expect(mapRuleErrors('bad request: request body: json: unknown field "x"')).toEqual({ form: 'request body: json: unknown field "x"' });
  });

  it('builds the request from a draft, checking only what cannot be sent', () => {
    const d = { ...emptyDraft(), name: ' Storm ', selector: 'customer=acme, rack = r1', labels: 'team=net' };
    expect(ruleInput(d).input).toEqual({
      name: 'Storm',
      kind: 'node',
      metric: '*',
      state: 'crit',
      for_intervals: 2,
      for_seconds: 0,
      severity: 'critical',
      selector: { customer: 'acme', rack: 'r1' },
      min_nodes: 0,
      min_percent: 0,
      group_by: [],
      labels: { team: 'net' },
      runbook_url: '',
      enabled: true,
    });
    expect(ruleInput({ ...d, hold: '1.5' }).errors.hold).toMatch(/whole number/);
    expect(ruleInput({ ...d, selector: 'customer' }).errors.selector).toMatch(/not label=value/);
    const g = ruleInput({ ...d, kind: 'group', holdUnit: 'seconds', hold: '60', min: '20', minUnit: 'percent', groupBy: 'customer, rack' }).input!;
    expect(g).toMatchObject({ kind: 'group', for_intervals: 0, for_seconds: 60, min_percent: 20, min_nodes: 0, group_by: ['customer', 'rack'] });
    expect(ruleInput({ ...d, kind: 'group', min: '2.5' }).errors.min).toMatch(/whole number/);
    // A stored rule round-trips through the form.
    const r = rule(5, 'Quorum', { kind: 'group', min_percent: 25, group_by: ['customer'], for_seconds: 30, for_intervals: undefined, selector: { tier: 'edge' } });
    expect(ruleInput(draftFromRule(r)).input).toMatchObject({ kind: 'group', min_percent: 25, group_by: ['customer'], for_seconds: 30, selector: { tier: 'edge' } });
    // The default silent rule stays silent through the form, sent with metric * and no state of its own.
    const silent = rule(2, 'NBSNodeSilent', { kind: 'silent', metric: '*', state: 'unknown', for_seconds: 180, for_intervals: undefined, builtin: true });
    expect(ruleInput({ ...draftFromRule(silent), metric: 'leftover', state: 'crit' }).input).toMatchObject({ kind: 'silent', metric: '*', state: 'unknown', for_seconds: 180, for_intervals: 0 });
  });
});

describe('matchNodes', () => {
  const names = ['db-1', 'db-10', 'edge-db', 'Web-DB-2', 'web-1'];
  it.each([
    ['names starting with the text first, then containing it, ignoring case', 'db', 10, ['db-1', 'db-10', 'edge-db', 'Web-DB-2']],
    ['at most the limit, starting ones kept first', 'db', 2, ['db-1', 'db-10']],
    ['nothing typed: the first names', '  ', 2, ['db-1', 'db-10']],
    ['no match: none', 'zzz', 10, []],
  ])('%s', (_, typed, limit, want) => {
    expect(matchNodes(names, typed as string, limit as number)).toEqual(want);
  });
  it('suggests a dozen by default', () => {
    expect(matchNodes(Array.from({ length: 3000 }, (_, i) => `n${i}`), 'n')).toHaveLength(NODE_SUGGESTIONS);
  });
});

describe('AlertsPage', () => {
  const open = [alert(7, { state: 'pending', value: null }), alert(9), alert(8, { node: 'lab-a', severity: 'warning', child: 'latency/rto', root: 'latency', metric: 'latency' })];
  const resolved = [alert(3, { state: 'resolved' })];
  const api = () =>
    fakeApi({
      'GET /api/v1/alerts': (u) => {
        const st = u.searchParams.get('state');
        const node = u.searchParams.get('node');
        const pick = st === 'resolved' ? resolved : st === 'open' ? open : [...open, ...resolved].filter((a) => a.state === st);
        return [200, { evaluator, alerts: pick.filter((a) => !node || a.node === node) }];
      },
      'GET /api/v1/nodes': () => [200, { nodes: [] }],
      'GET /api/v1/alert-rules': () => [200, { rules: [rule(1, 'NBSRootCritical', { builtin: true })] }],
    });

  it('shows firing then pending alerts, linked to the tree, then the history', async () => {
    const calls = api();
    const el = mountAs('operator', <AlertsPage params={new URLSearchParams()} />);
    await waitFor(() => expect($$(el, '.open-alerts tbody tr')).toHaveLength(3));
    expect($$(el, '.open-alerts tbody tr').map((r) => r.dataset.alertId)).toEqual(['9', '8', '7']);
    const row = $(el, '.open-alerts tr[data-alert-id="9"]');
    expect(row.textContent).toContain('critical');
    expect(row.textContent).toContain('firing');
    expect(row.textContent).toContain('NBSRootCritical');
    expect(row.textContent).toContain('tcp_reset');
    expect(row.textContent).toContain('23.5 resets/s vs warn 1, crit 10 resets/s');
    expect(row.textContent).toContain('ago');
    expect($(row, '.alert-metric a').getAttribute('href')).toMatch(WINDOWED);
    expect($(row, 'a.alert-rule').getAttribute('href')).toBe('/alerts/9');
    expect($(el, '.open-alerts tr[data-alert-id="7"]').textContent).toContain('pending');
    await waitFor(() => expect($$(el, '.history tbody tr')).toHaveLength(1));
    expect($(el, '.history tbody tr').textContent).toContain('1 min'); // lasted
    expect(el.textContent).toContain('2 firing · 1 pending');
    expect(el.textContent).toContain('Evaluated by collector-1');
    const states = calls.filter((c) => c.url.pathname === '/api/v1/alerts').map((c) => c.url.searchParams.get('state'));
    expect(states).toEqual(expect.arrayContaining(['open', 'resolved']));
  });

  it('takes its filters from the URL and writes them back', async () => {
    const calls = api();
    const el = mountAs('operator', <AlertsPage params={new URLSearchParams('node=lab-a')} />);
    await waitFor(() => expect($$(el, '.open-alerts tbody tr').map((r) => r.dataset.alertId)).toEqual(['8']));
    expect(calls.filter((c) => c.url.pathname === '/api/v1/alerts').every((c) => c.url.searchParams.get('node') === 'lab-a')).toBe(true);
    expect(el.textContent).toContain('No resolved alert matches these filters.');
    type(byText(el, 'label', /^State/).querySelector('select')!, 'resolved');
    expect(new URLSearchParams(location.search).get('state')).toBe('resolved');
    expect(new URLSearchParams(location.search).get('node')).toBe('lab-a');

    const el2 = mountAs('operator', <AlertsPage params={new URLSearchParams('state=resolved')} />);
    await waitFor(() => expect($$(el2, '.history tbody tr')).toHaveLength(1));
    expect(el2.querySelector('.open-alerts')).toBeNull();
    expect(el2.textContent).not.toContain('Firing and pending');
  });

  it('filters by node through a search box that suggests a few names, never every node of the fleet', async () => {
    const fleet = Array.from({ length: 3000 }, (_, i) => ({ name: `node-${String(i).padStart(4, '0')}`, roots: [] }));
    const calls = fakeApi({
      'GET /api/v1/alerts': (u) => [200, { evaluator, alerts: open.filter((a) => !u.searchParams.get('node') || a.node === u.searchParams.get('node')) }],
      'GET /api/v1/nodes': () => [200, { nodes: [...fleet, { name: 'lab-a', roots: [] }, { name: 'lab-b', roots: [] }] }],
      'GET /api/v1/alert-rules': () => [200, { rules: [] }],
    });
    const el = mountAs('operator', <AlertsPage params={new URLSearchParams()} />);
    await waitFor(() => expect($$(el, '.open-alerts tbody tr')).toHaveLength(3));
    const box = el.querySelector<HTMLInputElement>('input[aria-label="Node"]')!;
    expect(box.getAttribute('role')).toBe('combobox');
    expect(el.querySelectorAll('.node-filter option, [role="option"]')).toHaveLength(0);
    // Every node is asked only once someone uses the filter.
    expect(calls.some((c) => c.url.pathname === '/api/v1/nodes')).toBe(false);
    act(() => {
      box.dispatchEvent(new FocusEvent('focus'));
    });
    await waitFor(() => expect(calls.some((c) => c.url.pathname === '/api/v1/nodes')).toBe(true));
    type(box, 'node-29');
    await waitFor(() => expect($$(el, '[role="option"]').map((o) => o.dataset.node)).toEqual(Array.from({ length: 12 }, (_, i) => `node-29${String(i).padStart(2, '0')}`)));
    expect(box.getAttribute('aria-expanded')).toBe('true');
    type(box, 'LAB');
    await waitFor(() => expect($$(el, '[role="option"]').map((o) => o.dataset.node)).toEqual(['lab-a', 'lab-b']));
    press(box, 'ArrowDown');
    expect(box.getAttribute('aria-activedescendant')).toBe('alerts-node-option-0');
    press(box, 'Enter');
    expect(new URLSearchParams(location.search).get('node')).toBe('lab-a');
    expect(box.value).toBe('lab-a');
    expect($$(el, '[role="option"]')).toHaveLength(0);
    // A click on a suggestion picks it as well; emptying the box clears the filter.
    type(box, 'lab-');
    await waitFor(() => expect($$(el, '[role="option"]')).toHaveLength(2));
    act(() => {
      $(el, '[data-node="lab-b"]').dispatchEvent(new MouseEvent('mousedown', { bubbles: true, cancelable: true }));
    });
    expect(new URLSearchParams(location.search).get('node')).toBe('lab-b');
    type(box, '');
    expect(new URLSearchParams(location.search).get('node')).toBeNull();
  });

  it('says when nothing is firing and when nobody evaluates', async () => {
    fakeApi({
      'GET /api/v1/alerts': () => [200, { evaluator: { ...evaluator, heartbeat: new Date(Date.now() - 120_000).toISOString() }, alerts: [] }],
    });
    const el = mountAs('operator', <AlertsPage params={new URLSearchParams()} />);
    await waitFor(() => expect(el.textContent).toContain('Nothing is firing or pending.'));
    expect(el.textContent).toContain('No alert has resolved yet.');
    expect(el.textContent).toMatch(/last checked in 2 min ago/);
  });

  it('explains a collector without alerts', async () => {
    fakeApi({});
    const el = mountAs('operator', <AlertsPage params={new URLSearchParams()} />);
    await waitFor(() => expect(el.textContent).toContain('has no alerts API'));
  });
});

describe('AlertDetailPage', () => {
  it('shows the alert and its delivery log', async () => {
    const deliveries = [
      { id: 1, target: 'alertmanager', url: 'http://am:9093/api/v2/alerts', event: 'firing', status: 'delivered', attempts: 1, created_at: new Date().toISOString(), delivered_at: new Date().toISOString() },
      { id: 2, target: 'webhook', url: 'https://hooks.example/nbs', event: 'firing', status: 'pending', attempts: 3, last_error: 'POST https://hooks.example/nbs: 503 Service Unavailable', created_at: new Date().toISOString(), delivered_at: null },
      { id: 3, target: 'webhook', url: 'https://hooks.example/nbs', event: 'resolved', status: 'failed', attempts: 40, last_error: 'gave up after a day', created_at: new Date().toISOString(), delivered_at: null },
    ];
    fakeApi({ 'GET /api/v1/alerts/9': () => [200, { ...alert(9), deliveries }] });
    const el = mountAs('operator', <AlertDetailPage id={9} />);
    await waitFor(() => expect($$(el, 'table.deliveries tbody tr')).toHaveLength(3));
    expect($(el, 'h1').textContent).toContain('NBSRootCritical');
    expect($(el, 'h1').textContent).toContain('lab-b');
    expect(el.textContent).toContain('tcp_reset is CRIT on lab-b');
    expect(byText(el, 'a.btn', /in the tree/).getAttribute('href')).toMatch(WINDOWED);
    const [am, hook, failed] = $$(el, 'table.deliveries tbody tr');
    expect(am.textContent).toContain('alertmanager');
    expect(am.textContent).toContain('http://am:9093/api/v2/alerts');
    expect(am.textContent).toContain('delivered');
    expect(hook.textContent).toContain('retrying');
    expect(hook.textContent).toContain('503 Service Unavailable');
    expect(failed.textContent).toContain('resolved');
    expect(failed.textContent).toContain('failed, given up');
    expect(el.textContent).toContain('warn 1, crit 10');
    expect(byText(el, 'dd a', 'NBSRootCritical').getAttribute('href')).toBe('/alerts/rules?edit=1');
  });

  it('charts the explaining metric over the breach window, and lets an operator acknowledge and silence it', async () => {
    const a = alert(9, { since: new Date(Date.now() - 120_000).toISOString() });
    let current = { ...a, delivery: 'delivered', deliveries: [] as unknown[] };
    const calls = fakeApi({
      'GET /api/v1/alerts/9': () => [200, current],
      'GET /api/v1/nodes/lab-b/series': (u) => [200, { node: 'lab-b', metric: u.searchParams.get('metric'), unit: 'resets/s', kind: 'rate', from: u.searchParams.get('from'), to: u.searchParams.get('to'), step: '5s', points: [] }],
      'GET /api/v1/nodes/lab-b/thresholds': () => [200, { thresholds: [] }],
      'POST /api/v1/alerts/9/acknowledge': () => {
        current = { ...current, acknowledged_at: new Date().toISOString(), acknowledged_by: 'alice' };
        return [200, current];
      },
      'POST /api/v1/alerts/9/silence': () => {
        current = { ...current, silenced_until: new Date(Date.now() + 3_600_000).toISOString() };
        return [200, current];
      },
    });
    const el = mountAs('operator', <AlertDetailPage id={9} />);
    await waitFor(() => expect(calls.some((c) => c.url.pathname === '/api/v1/nodes/lab-b/series')).toBe(true));
    const series = calls.find((c) => c.url.pathname === '/api/v1/nodes/lab-b/series')!.url.searchParams;
    expect(series.get('metric')).toBe('tcp_reset/sent/no_socket');
    // From before the breach (5 min of context) to after now.
    expect(Number(series.get('from'))).toBeLessThanOrEqual(Date.parse(a.since) - 5 * 60_000);
    expect(Number(series.get('to'))).toBeGreaterThan(Date.now());
    await waitFor(() => expect(el.querySelector('.alert-chart figure.chart')).not.toBeNull());

    type($(el, '.alert-comment input') as HTMLInputElement, 'on it');
    click(byText(el, 'button', 'Acknowledge'));
    await waitFor(() => expect(hasText(el, '.tag-ack', 'acknowledged')).toBe(true));
    expect(calls.find((c) => c.method === 'POST' && c.url.pathname.endsWith('/acknowledge'))!.body).toEqual({ comment: 'on it' });
    type($(el, '.alert-actions-panel select') as HTMLSelectElement, String(4 * 3600));
    click(byText(el, 'button', 'Silence'));
    await waitFor(() => expect(hasText(el, '.tag-silenced', /silenced until/)).toBe(true));
    expect(calls.find((c) => c.method === 'POST' && c.url.pathname.endsWith('/silence'))!.body).toEqual({ duration_seconds: 4 * 3600, comment: 'on it' });
    expect(byText(el, 'button', 'End silence')).toBeTruthy();
  });

  it('tells a customer whether the alert was delivered, without the log or the actions', async () => {
    fakeApi({
      'GET /api/v1/alerts/9': () => [200, { ...alert(9), delivery: 'delivered', deliveries: [] }],
      'GET /api/v1/nodes/lab-b/series': () => [200, { node: 'lab-b', metric: 'tcp_reset/sent/no_socket', unit: 'resets/s', kind: 'rate', from: new Date().toISOString(), to: new Date().toISOString(), step: '5s', points: [] }],
      'GET /api/v1/nodes/lab-b/thresholds': () => [200, { thresholds: [] }],
    });
    const el = mountAs('customer', <AlertDetailPage id={9} />);
    await waitFor(() => expect($(el, '.delivery-status').getAttribute('data-delivery')).toBe('delivered'));
    expect(el.textContent).toContain('The on-call receivers have been notified.');
    expect(el.textContent).not.toContain('no receiver configured');
    expect(el.textContent).not.toContain('Delivery log');
    expect(el.querySelector('.alert-actions-panel')).toBeNull();
  });

  it('explains an empty log and an unknown alert', async () => {
    fakeApi({ 'GET /api/v1/alerts/7': () => [200, { ...alert(7, { state: 'pending' }), deliveries: [] }] });
    const el = mountAs('operator', <AlertDetailPage id={7} />);
    await waitFor(() => expect(el.textContent).toContain('Nothing is sent while an alert is pending'));
    fakeApi({ 'GET /api/v1/alerts/5': () => [404, { error: { code: 'not_found', message: 'alert 5: not found' } }] });
    const el2 = mountAs('operator', <AlertDetailPage id={5} />);
    await waitFor(() => expect($(el2, '[role=alert]').textContent).toContain('Alert 5 does not exist'));
  });
});

describe('alert rules editor', () => {
  const builtin = rule(1, 'NBSRootCritical', { builtin: true });
  const group = rule(2, 'AcmeQuorum', { kind: 'group', metric: 'tcp_reset', state: 'warn', for_intervals: undefined, for_seconds: 60, selector: { customer: 'acme' }, min_percent: 20, group_by: ['rack'], severity: 'warning', enabled: false });

  function rulesApi() {
    let rules = [builtin, group];
    let next = 3;
    const calls = fakeApi({
      'GET /api/v1/alert-rules': () => [200, { rules }],
      'POST /api/v1/alert-rules': (_u, init) => {
        const body = JSON.parse(String(init?.body)) as AlertRuleInput;
        if (rules.some((r) => r.name === body.name)) return [409, { error: { code: 'conflict', message: `an alert rule named "${body.name}" exists already: conflict` } }];
        if (!/^[A-Za-z_]\w*$/.test(body.name) || body.metric.includes(' '))
          return [
            400,
            {
              error: {
                code: 'bad_request',
                message: `bad request: invalid alert rule: name "${body.name}" must be 1-128 letters, digits or '_'; metric "${body.metric}" must be a metric id like tcp_reset/sent/no_socket`,
              },
            },
          ];
        const r = rule(next++, body.name, { ...body });
        rules = [...rules, r];
        return [201, r];
      },
      'PUT /api/v1/alert-rules/2': (_u, init) => {
        const body = JSON.parse(String(init?.body));
        rules = rules.map((r) => (r.id === 2 ? { ...r, ...body } : r));
        return [200, rules[1]];
      },
      'PUT /api/v1/alert-rules/1': (_u, init) => {
        const body = JSON.parse(String(init?.body));
        rules = rules.map((r) => (r.id === 1 ? { ...r, ...body } : r));
        return [200, rules[0]];
      },
      'DELETE /api/v1/alert-rules/2': () => {
        rules = rules.filter((r) => r.id !== 2);
        return [204, undefined];
      },
      'GET /api/v1/alerts': () => [200, { evaluator, alerts: [] }],
    });
    return calls;
  }

  it('lists every rule with its condition', async () => {
    rulesApi();
    history.replaceState(null, '', '/alerts/rules');
    const el = mount(<App />);
    await waitFor(() => expect($$(el, '.rules-table tbody tr')).toHaveLength(2));
    const cells = (name: string) => $$($(el, `tr[data-rule="${name}"]`), 'th, td').map((c) => c.textContent?.trim());
    expect(cells('NBSRootCritical').slice(0, 10)).toEqual(['NBSRootCriticaldefault', 'node', '*', 'CRIT', '2 intervals', 'all nodes', '—', '—', 'critical', 'on']);
    expect(cells('AcmeQuorum').slice(0, 10)).toEqual(['AcmeQuorum', 'group', 'tcp_reset', 'WARN or worse', '1 min', 'customer=acme', '≥ 20%', 'rack', 'warning', 'off']);
    expect($(el, 'nav.tabs a[aria-current=page]').textContent).toBe('Rules');
    expect($(el, '.crumbs [aria-current]').textContent).toBe('Rules');
  });

  it('creates a rule, showing the 400 by field and the 409 clearly', async () => {
    const calls = rulesApi();
    history.replaceState(null, '', '/alerts/rules');
    const el = mount(<App />);
    await waitFor(() => $(el, '.rules-table'));
    click(byText(el, 'button', 'New rule…'));
    await waitFor(() => $(el, 'form.rule-form'));
    expect(location.search).toBe('?new=1');
    expect(document.activeElement).toBe($(el, '#rule-name'));

    type($(el, '#rule-name') as HTMLInputElement, '1bad');
    type($(el, '#rule-metric') as HTMLInputElement, 'tcp reset');
    click(byText(el, 'button', 'Create rule'));
    await waitFor(() => expect($(el, '#rule-name-err').textContent).toContain('must be 1-128 letters'));
    expect($(el, '#rule-metric-err').textContent).toContain('must be a metric id');
    expect($(el, '#rule-name').getAttribute('aria-invalid')).toBe('true');
    expect($(el, '#rule-name').getAttribute('aria-describedby')).toContain('rule-name-err');
    expect($(el, '.form-summary').textContent).toContain('2 fields need attention');
    await waitFor(() => expect(document.activeElement).toBe($(el, '#rule-name')));

    // Typing clears that field's message.
    type($(el, '#rule-name') as HTMLInputElement, 'NBSRootCritical');
    expect(el.querySelector('#rule-name-err')).toBeNull();
    type($(el, '#rule-metric') as HTMLInputElement, 'tcp_reset/sent/*');
    click(byText(el, 'button', 'Create rule'));
    await waitFor(() => expect($(el, '#rule-name-err').textContent).toContain('A rule named “NBSRootCritical” exists already'));
    expect($(el, '#rule-name-err a').getAttribute('href')).toBe('/alerts/rules?edit=1');
    expect($(el, '.form-summary').textContent).toContain('The name is taken');

    type($(el, '#rule-name') as HTMLInputElement, 'SentResets');
    type($(el, '#rule-severity') as HTMLInputElement, 'warning');
    type($(el, '#rule-selector') as HTMLInputElement, 'customer=acme');
    click(byText(el, 'button', 'Create rule'));
    await waitFor(() => expect($(el, '.saved').textContent).toContain('Created rule SentResets'));
    expect(el.querySelector('form.rule-form')).toBeNull();
    expect(location.search).toBe('');
    await waitFor(() => $(el, 'tr[data-rule="SentResets"]'));
    const post = calls.filter((c) => c.method === 'POST').pop();
    expect(post?.body).toEqual({
      name: 'SentResets',
      kind: 'node',
      metric: 'tcp_reset/sent/*',
      state: 'crit',
      for_intervals: 2,
      for_seconds: 0,
      severity: 'warning',
      selector: { customer: 'acme' },
      min_nodes: 0,
      min_percent: 0,
      group_by: [],
      labels: {},
      runbook_url: '',
      enabled: true,
    });
  });

  it('edits a group rule from the URL and sends only the fields the collector accepts', async () => {
    const calls = rulesApi();
    history.replaceState(null, '', '/alerts/rules?edit=2');
    const el = mount(<App />);
    await waitFor(() => $(el, 'form.rule-form'));
    expect($(el, '#rule-form-h').textContent).toBe('Edit rule AcmeQuorum');
    expect(($(el, '#rule-min') as HTMLInputElement).value).toBe('20');
    expect(($(el, '#rule-group_by') as HTMLInputElement).value).toBe('rack');
    expect(($(el, '#rule-hold') as HTMLInputElement).value).toBe('60');
    type($(el, '#rule-min') as HTMLInputElement, '3');
    type($(el, 'select[aria-label="Quorum unit"]') as HTMLSelectElement, 'nodes');
    click(byText(el, 'button', 'Save rule'));
    await waitFor(() => expect($(el, '.saved').textContent).toContain('Saved rule AcmeQuorum'));
    const put = calls.find((c) => c.method === 'PUT');
    expect(Object.keys(put!.body as object).sort()).toEqual(
      ['enabled', 'for_intervals', 'for_seconds', 'group_by', 'kind', 'labels', 'metric', 'min_nodes', 'min_percent', 'name', 'runbook_url', 'selector', 'severity', 'state'].sort(),
    );
    expect(put!.body).toMatchObject({ min_nodes: 3, min_percent: 0, for_seconds: 60, for_intervals: 0, enabled: false });

    // An edit link for a rule that is gone says so.
    history.replaceState(null, '', '/alerts/rules?edit=99');
    const el2 = mount(<App />);
    await waitFor(() => expect(el2.textContent).toContain('Rule 99 does not exist'));
  });

  it('cancels with Escape, toggles and deletes after confirming', async () => {
    const calls = rulesApi();
    history.replaceState(null, '', '/alerts/rules?new=1');
    const el = mount(<App />);
    await waitFor(() => $(el, 'form.rule-form'));
    press($(el, '#rule-name'), 'Escape');
    await waitFor(() => expect(el.querySelector('form.rule-form')).toBeNull());

    click($(el, 'input[aria-label="NBSRootCritical enabled"]'));
    await waitFor(() => expect($(el, '.saved').textContent).toContain('Disabled rule NBSRootCritical'));
    expect(calls.find((c) => c.method === 'PUT' && c.url.pathname === '/api/v1/alert-rules/1')?.body).toMatchObject({ name: 'NBSRootCritical', enabled: false, metric: '*' });

    click($(el, 'button[aria-label="Delete AcmeQuorum…"]'));
    await waitFor(() => expect(document.activeElement?.textContent).toBe('Delete AcmeQuorum'));
    press(document.activeElement!, 'Escape');
    await waitFor(() => $(el, 'button[aria-label="Delete AcmeQuorum…"]'));
    click($(el, 'button[aria-label="Delete AcmeQuorum…"]'));
    await waitFor(() => byText(el, 'button', 'Delete AcmeQuorum'));
    click(byText(el, 'button', 'Delete AcmeQuorum'));
    await waitFor(() => expect(el.querySelector('tr[data-rule="AcmeQuorum"]')).toBeNull());
    expect($(el, '.saved').textContent).toContain('Deleted rule AcmeQuorum');
  });
});

describe('alerts at fleet scale', () => {
  // 2,999 nodes of a rack gone silent (pending) and one firing CRIT, as the
  // collector answers them: a page, the true totals, the groups worst first.
  const crit = alert(5000, { rule: 'rtt_crit', node: 'db-1' });
  const silent = (id: number) =>
    alert(id, { rule: 'node_silent', kind: 'node', state: 'pending', severity: 'warning', node: `rack-${id}`, child: '', metric: '', root: '', value: null, summary: `rack-${id} has sent no report for 3m0s` });
  const totals = { firing: 1, pending: 2999, resolved: 0, acknowledged: 0, silenced: 0 };
  const fleet = () =>
    fakeApi({
      'GET /api/v1/alerts': (u) => {
        const limit = Number(u.searchParams.get('limit') ?? 100);
        const rule = u.searchParams.get('rule');
        const st = u.searchParams.get('state');
        if (st === 'resolved') return [200, { evaluator, alerts: [], total: 0, totals, limit }];
        // The silent ones newest first: ids 4999 down to 2001.
        const all = [...(rule === 'node_silent' ? [] : [crit]), ...Array.from({ length: 2999 }, (_, i) => silent(4999 - i))].filter((a) => !rule || a.rule === rule);
        const from = Number(u.searchParams.get('cursor') ?? 0);
        const page = all.slice(from, from + limit);
        const next = from + limit < all.length ? String(from + limit) : undefined;
        const groups = u.searchParams.get('groups') === 'true'
          ? [
              { rule: 'rtt_crit', count: 1, firing: 1, pending: 0, first: crit },
              { rule: 'node_silent', count: 2999, firing: 0, pending: 2999, first: silent(4999) },
            ]
          : undefined;
        return [200, { evaluator, alerts: page, total: all.length, totals, limit, next_cursor: next, groups, groups_total: groups?.length }];
      },
      'GET /api/v1/nodes': () => [200, { nodes: [] }],
      'GET /api/v1/alert-rules': () => [200, { rules: [] }],
      'GET /api/v1/fleet': () => [200, { time: new Date().toISOString(), total: 0, matched: 0, offset: 0, limit: 100, counts: { ok: 0, warn: 0, crit: 0, unknown: 0 }, nodes: [] }],
    });

  it('shows the firing CRIT first and the silent rack as one row that opens a page at a time', async () => {
    const calls = fleet();
    const el = mountAs('operator', <AlertsPage params={new URLSearchParams()} />);
    await waitFor(() => $(el, '.open-alerts tr.alert-group-row'));
    const rows = $$(el, '.open-alerts tbody > tr');
    expect(rows[0].dataset.alertId).toBe('5000');
    expect(rows[0].textContent).toContain('firing');
    expect(rows).toHaveLength(2);
    const group = $(el, 'tr.alert-group-row[data-rule="node_silent"]');
    expect(group.textContent).toContain('node_silent — 2,999 nodes · 2,999 pending');
    expect(el.textContent).toContain('1 firing · 2,999 pending');
    expect($(el, '#open-alerts-h').textContent).toContain('(3,000)');
    const open = calls.find((c) => c.url.pathname === '/api/v1/alerts' && c.url.searchParams.get('state') === 'open')!;
    expect(open.url.searchParams.get('groups')).toBe('true');
    expect(Number(open.url.searchParams.get('limit'))).toBeLessThanOrEqual(100);

    click($(group, 'button.group-toggle'));
    expect($(group, 'button.group-toggle').getAttribute('aria-expanded')).toBe('true');
    await waitFor(() => expect($$(el, 'tr.in-group')).toHaveLength(100));
    expect($(el, '.alert-group .alerts-more').textContent).toContain('Showing 100 of 2,999 alerts of node_silent');
    click(byText(el, 'button', 'Show 100 more'));
    await waitFor(() => expect($$(el, 'tr.in-group')).toHaveLength(200));
    const ids = $$(el, 'tr.in-group').map((r) => Number(r.dataset.alertId));
    expect(new Set(ids).size).toBe(200);
    expect(ids[0]).toBe(4999);
    expect(ids[199]).toBe(4800);
    expect(calls.some((c) => c.url.searchParams.get('rule') === 'node_silent' && c.url.searchParams.get('cursor') === '100')).toBe(true);
  });

  it('counts firing alerts in the header from the totals, not from the alerts it lists', async () => {
    fleet();
    const el = mount(<App />);
    // The header asks for the first 50 only; the count is the total.
    await waitFor(() => expect($(el, '.alerts summary .count').textContent).toBe('1'));
    expect($(el, '.alerts summary').getAttribute('aria-label')).toBe('Alerts: 1 firing, 2999 pending');
    const pop = $(el, '.alerts');
    click($(pop, 'summary'));
    expect($$(pop, 'li')).toHaveLength(50);
    expect($$(pop, 'li')[0].textContent).toContain('rtt_crit');
    expect(pop.textContent).toContain('Showing the first 50 of 3,000 open alerts (1 firing), worst first.');
  });
});

describe('alerts indicator', () => {
  it('links to the alerts page and each alert', async () => {
    fakeApi({
      'GET /api/v1/alerts': () => [200, { evaluator, alerts: [alert(9)] }],
      'GET /api/v1/nodes': () => [200, { nodes: [] }],
      'GET /api/v1/fleet': () => [200, { time: new Date().toISOString(), total: 0, matched: 0, offset: 0, limit: 100, counts: { ok: 0, warn: 0, crit: 0, unknown: 0 }, nodes: [] }],
    });
    const el = mount(<App />);
    await waitFor(() => expect($(el, '.alerts summary').textContent).toContain('1'));
    const pop = $(el, '.alerts');
    click($(pop, 'summary'));
    expect(byText(pop, 'a', 'All alerts and history').getAttribute('href')).toBe('/alerts');
    expect(byText(pop, 'a', 'NBSRootCritical').getAttribute('href')).toBe('/alerts/9');
    expect(byText(pop, 'a', /lab-b/).getAttribute('href')).toMatch(WINDOWED);
    click(byText(pop, 'a', 'All alerts and history'));
    await waitFor(() => expect($(el, 'h1').textContent).toBe('Alerts'));
    expect(location.pathname).toBe('/alerts');
    expect((pop as HTMLDetailsElement).open).toBe(false);
  });
});
