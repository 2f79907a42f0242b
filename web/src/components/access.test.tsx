import { beforeEach, describe, expect, it } from 'vitest';
import type { AuditRecord, Role, Token } from '../access';
import type { Fleet, FleetNode } from '../api';
import { App } from '../app';
import { alert, evaluator, node, resetTree, rule } from '../fixtures';
import { $, $$, byText, click, fakeApi, hasText, mount, mountAs, mountAt, stubClipboard, type, waitFor, whoami } from '../testutil';
import { AuditPage } from './Audit';
import { TokensPage } from './Tokens';
import { Shell } from './Shell';
import { act } from 'preact/test-utils';

// The fleet page (GET /fleet), empty or of named OK nodes.
const emptyFleet: Fleet = { time: new Date().toISOString(), total: 0, matched: 0, offset: 0, limit: 100, counts: { ok: 0, warn: 0, crit: 0, unknown: 0 }, nodes: [] };
const fleetRow = (name: string): FleetNode => ({ name, labels: {}, tenant: '', state: 'ok', since: null, connected: true, stale: false, last_report: new Date().toISOString(), interval_ms: 10000, roots: [] });

const UNAUTHORIZED: [number, unknown] = [401, { error: { code: 'unauthorized', message: 'sign in: send Authorization: Bearer <token>, or log in: unauthenticated' } }];

beforeEach(() => history.replaceState(null, '', '/'));

describe('login', () => {
  it('signs in with a login link, drops the token from the address, and goes where the user was going', async () => {
    history.replaceState(null, '', '/login?next=%2Falerts#token=nbs_good');
    const calls = fakeApi({
      'POST /api/v1/login': (_u, init) => (JSON.parse(String(init?.body)).token === 'nbs_good' ? [200, whoami('operator', { name: 'alice' })] : UNAUTHORIZED),
      'GET /api/v1/alerts': () => [200, { evaluator, alerts: [alert(9)] }],
      'GET /api/v1/nodes': () => [200, { nodes: [] }],
      'GET /api/v1/fleet': () => [200, emptyFleet],
      'GET /api/v1/alert-rules': () => [200, { rules: [] }],
    });
    const el = mount(<App />);
    // Gone from the address bar before the collector has even answered.
    expect(location.hash).toBe('');
    expect(location.href).not.toContain('nbs_good');
    await waitFor(() => expect(location.pathname).toBe('/alerts'));
    await waitFor(() => expect($(el, 'h1').textContent).toBe('Alerts'));
    expect(location.href).not.toContain('nbs_good');
    expect(calls.filter((c) => c.method === 'POST' && c.url.pathname === '/api/v1/login')).toHaveLength(1);
    // The login answer is the session: no whoami needed.
    expect(calls.some((c) => c.url.pathname === '/api/v1/whoami')).toBe(false);
    expect($(el, '.who').textContent).toContain('alice');
    expect($(el, '.who-role').textContent).toBe('operator');
  });

  it('explains a bad token and lets the user paste another', async () => {
    history.replaceState(null, '', '/login#token=nbs_revoked');
    fakeApi({
      'POST /api/v1/login': (_u, init) => (JSON.parse(String(init?.body)).token === 'nbs_good' ? [200, whoami('viewer')] : UNAUTHORIZED),
      'GET /api/v1/nodes': () => [200, { nodes: [node('lab-a', 'ok')] }],
      'GET /api/v1/fleet': () => [200, { ...emptyFleet, total: 1, matched: 1, counts: { ...emptyFleet.counts, ok: 1 }, nodes: [fleetRow('lab-a')] }],
      'GET /api/v1/alerts': () => [200, { evaluator, alerts: [] }],
    });
    const el = mount(<App />);
    expect(location.hash).toBe('');
    await waitFor(() => expect($(el, '[role=alert]').textContent).toContain('This token is not valid or has expired'));
    expect(location.pathname).toBe('/login');
    expect($(el, '#login-token').getAttribute('aria-invalid')).toBe('true');
    click(byText(el, 'button', 'Sign in'));
    expect($(el, '[role=alert]').textContent).toContain('Paste a token first');
    type($(el, '#login-token') as HTMLInputElement, ' nbs_good ');
    click(byText(el, 'button', 'Sign in'));
    await waitFor(() => expect(location.pathname).toBe('/'));
    await waitFor(() => $(el, '.tile[data-node="lab-a"]'));
  });

  it('takes a login link pasted into a tab that is already on the login page', async () => {
    history.replaceState(null, '', '/login');
    fakeApi({
      'POST /api/v1/login': () => [200, whoami('viewer')],
      'GET /api/v1/nodes': () => [200, { nodes: [] }],
      'GET /api/v1/fleet': () => [200, emptyFleet],
      'GET /api/v1/alerts': () => [200, { evaluator, alerts: [] }],
    });
    const el = mount(<App />);
    await waitFor(() => $(el, '#login-token'));
    expect(document.activeElement).toBe($(el, '#login-token'));
    history.replaceState(null, '', '/login#token=nbs_pasted');
    window.dispatchEvent(new HashChangeEvent('hashchange'));
    expect(location.hash).toBe('');
    await waitFor(() => expect(location.pathname).toBe('/'));
    await waitFor(() => expect($(el, '.who-role').textContent).toBe('viewer'));
  });

  it('sends a 401 anywhere to the login page and comes back after signing in', async () => {
    history.replaceState(null, '', '/nodes/lab-b?metric=tcp_reset');
    let signedIn = false;
    fakeApi({
      'GET /api/v1/whoami': () => (signedIn ? [200, whoami('viewer')] : UNAUTHORIZED),
      'POST /api/v1/login': () => {
        signedIn = true;
        return [200, whoami('viewer')];
      },
      'GET /api/v1/nodes/lab-b': () => [200, node('lab-b', 'ok')],
      'GET /api/v1/nodes/lab-b/tree': () => [200, { node: 'lab-b', roots: resetTree(), window_s: 60 }],
      'GET /api/v1/alerts': () => [200, { evaluator, alerts: [] }],
    });
    const el = mount(<App />);
    await waitFor(() => expect(location.pathname).toBe('/login'));
    expect(new URLSearchParams(location.search).get('next')).toBe('/nodes/lab-b?metric=tcp_reset');
    await waitFor(() => expect(el.textContent).toContain('Sign in to continue to /nodes/lab-b?metric=tcp_reset'));
    expect(el.querySelector('.session-ended')).toBeNull(); // nobody was signed in: nothing ended
    type($(el, '#login-token') as HTMLInputElement, 'nbs_good');
    click(byText(el, 'button', 'Sign in'));
    await waitFor(() => expect(location.pathname + location.search).toBe('/nodes/lab-b?metric=tcp_reset'));
    await waitFor(() => $(el, '[role=treeitem][data-id="tcp_reset"]'));

    // The session ends while the page is open: the next answer is a 401.
    signedIn = false;
    history.replaceState(null, '', '/');
    fakeApi({ 'GET /api/v1/nodes': () => UNAUTHORIZED, 'GET /api/v1/fleet': () => UNAUTHORIZED, 'GET /api/v1/alerts': () => UNAUTHORIZED });
    const el2 = mount(<App />);
    await waitFor(() => expect(location.pathname).toBe('/login'));
    expect(el2.querySelector('#login-token')).not.toBeNull();
    // It says why: the session ended, not only "continue to".
    expect(new URLSearchParams(location.search).get('reason')).toBe('ended');
    await waitFor(() => expect($(el2, '.session-ended').textContent).toContain('Your session ended'));
  });

  it('logs out: the collector ends the session, the UI goes to the login page', async () => {
    const calls = fakeApi({
      'GET /api/v1/whoami': () => [200, whoami('admin', { name: 'root' })],
      'POST /api/v1/logout': () => [204, undefined],
      'GET /api/v1/nodes': () => [200, { nodes: [] }],
      'GET /api/v1/fleet': () => [200, emptyFleet],
      'GET /api/v1/alerts': () => [200, { evaluator, alerts: [] }],
    });
    const el = mount(<App />);
    await waitFor(() => expect($(el, '.who').textContent).toContain('root'));
    click(byText(el, 'button', 'Log out'));
    await waitFor(() => expect(location.pathname).toBe('/login'));
    await waitFor(() => $(el, '#login-token'));
    const out = calls.find((c) => c.url.pathname === '/api/v1/logout');
    expect(out?.method).toBe('POST');
    expect(out?.body).toBeUndefined();
    expect(el.querySelector('.who')).toBeNull();
    expect($(el, '.session-ended').textContent).toBe('You signed out.');
  });

  it('offers no logout where the collector asks nobody to sign in', async () => {
    fakeApi({ 'GET /api/v1/nodes': () => [200, { nodes: [] }], 'GET /api/v1/fleet': () => [200, emptyFleet], 'GET /api/v1/alerts': () => [200, { evaluator, alerts: [] }] });
    const el = mount(<App />); // no /whoami route: a collector without access control
    await waitFor(() => expect($(el, '.who').textContent).toContain('anonymous'));
    expect(hasText(el, 'button', 'Log out')).toBe(false);
    expect(hasText(el, 'a', 'Tokens')).toBe(true);
  });
});

describe('what each role is shown', () => {
  const metric = 'tcp_reset/sent/no_socket';
  const th = { warn: 1, crit: 10, comparison: 'above', hold_intervals: 1 };
  function nodeApi(role: Role) {
    return fakeApi({
      'GET /api/v1/whoami': () => [200, whoami(role)],
      'GET /api/v1/nodes/lab-b': () => [200, node('lab-b', 'crit', { customer: 'acme' })],
      'GET /api/v1/nodes/lab-b/tree': () => [200, { node: 'lab-b', roots: resetTree(), window_s: 60 }],
      'GET /api/v1/nodes/lab-b/thresholds': () => [200, { thresholds: [{ metric, threshold: th, source: 'node', override_id: 4 }] }],
      'GET /api/v1/thresholds': () => [200, { overrides: [{ id: 4, scope: { kind: 'node', node: 'lab-b' }, metric, threshold: th, disabled: false }] }],
      'GET /api/v1/alerts': () => [200, { evaluator, alerts: [alert(9)] }],
    });
  }
  // [role, change threshold, remove override, go live, audit link, tokens link, rules link in the alerts popover]
  const table: [Role, boolean, boolean, boolean, boolean, boolean, boolean][] = [
    ['customer', false, false, false, false, false, false],
    ['viewer', false, false, false, true, false, true],
    ['operator', true, true, true, true, false, true],
    ['admin', true, true, true, true, true, true],
  ];
  it.each(table)('%s: threshold editor %s, remove %s, live %s, audit %s, tokens %s, rules %s', async (role, change, remove, live, audit, tokens, rules) => {
    history.replaceState(null, '', `/nodes/lab-b?metric=${encodeURIComponent(metric)}`);
    const calls = nodeApi(role);
    const el = mount(<App />);
    await waitFor(() => expect($(el, '[data-testid=threshold-source]').textContent).toBe('node'));
    await waitFor(() => $(el, '.alerts summary'));
    expect(hasText(el, 'button', 'Change threshold…')).toBe(change);
    expect(el.querySelector('button[aria-label^="Remove the override"]') !== null).toBe(remove);
    expect(hasText(el, 'button', /Go live/)).toBe(live);
    expect(hasText(el, 'a', 'Audit log')).toBe(audit);
    expect(hasText(el, 'a', 'Tokens')).toBe(tokens);
    expect(hasText(el, '.alerts-pop a', 'Alert rules')).toBe(rules);
    expect(hasText(el, '.alerts-pop a', 'All alerts and history')).toBe(true);
    // A customer is not even asked about what does not exist for it.
    expect(calls.some((c) => c.url.pathname === '/api/v1/thresholds')).toBe(role !== 'customer');
    expect($(el, '.who-role').textContent).toBe(role);
    if (role === 'customer') expect($(el, '.who-scope').textContent).toBe('customer=acme');
    else expect(el.querySelector('.who-scope')).toBeNull();
  });

  it.each([
    ['customer', false],
    ['viewer', false],
    ['operator', false],
    ['admin', true],
  ] as [Role, boolean][])('%s: delete node %s', async (role, offered) => {
    history.replaceState(null, '', `/nodes/lab-b?metric=${encodeURIComponent(metric)}`);
    nodeApi(role);
    const el = mount(<App />);
    await waitFor(() => expect($(el, '[data-testid=threshold-source]').textContent).toBe('node'));
    expect(hasText(el, 'button', 'Delete node…')).toBe(offered);
  });

  it('deletes a node only once the admin has typed its name, then shows the fleet', async () => {
    history.replaceState(null, '', `/nodes/lab-b?metric=${encodeURIComponent(metric)}`);
    const calls = fakeApi({
      'GET /api/v1/whoami': () => [200, whoami('admin')],
      'GET /api/v1/nodes/lab-b': () => [200, node('lab-b', 'crit', { customer: 'acme' })],
      'GET /api/v1/nodes/lab-b/tree': () => [200, { node: 'lab-b', roots: resetTree(), window_s: 60 }],
      'GET /api/v1/nodes/lab-b/thresholds': () => [200, { thresholds: [] }],
      'GET /api/v1/thresholds': () => [200, { overrides: [] }],
      'GET /api/v1/alerts': () => [200, { evaluator, alerts: [] }],
      'GET /api/v1/nodes': () => [200, { nodes: [] }],
      'GET /api/v1/fleet': () => [200, emptyFleet],
      'DELETE /api/v1/nodes/lab-b': () => [204, null],
    });
    const el = mount(<App />);
    await waitFor(() => byText(el, 'button', 'Delete node…'));
    click(byText(el, 'button', 'Delete node…'));
    const del = byText(el, 'button', 'Delete lab-b') as HTMLButtonElement;
    expect(del.disabled).toBe(true);
    type($(el, '#node-delete-name') as HTMLInputElement, 'lab-');
    expect(del.disabled).toBe(true);
    expect(calls.some((c) => c.method === 'DELETE')).toBe(false);
    type($(el, '#node-delete-name') as HTMLInputElement, 'lab-b');
    expect(del.disabled).toBe(false);
    click(del);
    await waitFor(() => expect(location.pathname).toBe('/'));
    expect(calls.filter((c) => c.method === 'DELETE' && c.url.pathname === '/api/v1/nodes/lab-b')).toHaveLength(1);
  });

  it('says, while live, which triggered source the agent detached over its budget', async () => {
    history.replaceState(null, '', `/nodes/lab-b?metric=${encodeURIComponent(metric)}&live=1`);
    const note = 'detached: over budget, 3.2% of a CPU vs 1% (this source 3.1%)';
    const calls = fakeApi({
      'GET /api/v1/whoami': () => [200, whoami('operator')],
      'GET /api/v1/nodes/lab-b': () => [200, node('lab-b', 'crit', { customer: 'acme' })],
      'GET /api/v1/nodes/lab-b/tree': () => [200, { node: 'lab-b', roots: resetTree(), window_s: 60 }],
      'GET /api/v1/nodes/lab-b/thresholds': () => [200, { thresholds: [{ metric, threshold: th, source: 'node', override_id: 4 }] }],
      'GET /api/v1/thresholds': () => [200, { overrides: [] }],
      'GET /api/v1/alerts': () => [200, { evaluator, alerts: [] }],
      'POST /api/v1/nodes/lab-b/expand': () => [
        202,
        {
          node: 'lab-b',
          until: '2030-01-01T00:00:00Z',
          budget_percent: 0,
          triggered: [
            { metric: 'agent/triggered/latency_qdisc', attached: true, note: 'attached: an operator expanded the node', at: '2030-01-01T00:00:00Z' },
            { metric: 'agent/triggered/latency_rx', attached: false, note, at: '2030-01-01T00:00:00Z' },
          ],
        },
      ],
    });
    const el = mount(<App />);
    await waitFor(() => expect($(el, '.live-detached').textContent).toBe(`latency_rx ${note}`));
    expect(calls.some((c) => c.method === 'POST' && c.url.pathname.endsWith('/expand'))).toBe(true);
  });

  it('ignores live=1 in the URL for a role that may not expand', async () => {
    history.replaceState(null, '', `/nodes/lab-b?metric=${encodeURIComponent(metric)}&live=1`);
    const calls = nodeApi('viewer');
    const el = mount(<App />);
    await waitFor(() => $(el, '[data-testid=threshold-source]'));
    expect(calls.some((c) => c.url.pathname.endsWith('/expand'))).toBe(false);
  });

  const rulesApi = (role: Role) =>
    fakeApi({
      'GET /api/v1/whoami': () => [200, whoami(role)],
      'GET /api/v1/alert-rules': () => [200, { rules: [rule(1, 'NBSRootCritical', { builtin: true }), rule(2, 'AcmeQuorum')] }],
      'GET /api/v1/alerts': () => [200, { evaluator, alerts: [alert(9)] }],
      'GET /api/v1/alerts/9': () => [200, { ...alert(9), deliveries: [] }],
      'GET /api/v1/nodes': () => [200, { nodes: [] }],
      'GET /api/v1/fleet': () => [200, emptyFleet],
    });

  it('shows a viewer the rules read only, even from an edit link', async () => {
    rulesApi('viewer');
    history.replaceState(null, '', '/alerts/rules?edit=2');
    const el = mount(<App />);
    await waitFor(() => expect($$(el, '.rules-table tbody tr')).toHaveLength(2));
    expect(el.querySelector('form.rule-form')).toBeNull();
    expect(hasText(el, 'button', 'New rule…')).toBe(false);
    expect(el.querySelector('.rules-table input[type=checkbox]')).toBeNull();
    expect(hasText(el, '.rules-table a, .rules-table button', /Edit|Delete/)).toBe(false);
    expect($(el, 'tr[data-rule="AcmeQuorum"]').textContent).toContain('on');
    expect(el.textContent).toContain('changing alert rules needs the operator role');
  });

  it('shows a customer no rules, no audit log and no tokens: to it they do not exist', async () => {
    const calls = rulesApi('customer');
    for (const path of ['/alerts/rules', '/audit', '/tokens']) {
      history.replaceState(null, '', path);
      const el = mount(<App />);
      await waitFor(() => expect($(el, 'h1').textContent).toBe('Not found'));
    }
    history.replaceState(null, '', '/alerts');
    const el = mount(<App />);
    await waitFor(() => $(el, '.open-alerts'));
    expect(el.querySelector('nav.tabs')).toBeNull();
    history.replaceState(null, '', '/alerts/9');
    const el2 = mount(<App />);
    await waitFor(() => $(el2, '.alert-page h1'));
    expect(el2.querySelector('dd a[href^="/alerts/rules"]')).toBeNull();
    expect(calls.some((c) => c.url.pathname.startsWith('/api/v1/alert-rules'))).toBe(false);
  });

  it('tells an operator that tokens are for admins', async () => {
    rulesApi('operator');
    history.replaceState(null, '', '/tokens');
    const el = mount(<App />);
    await waitFor(() => expect(el.textContent).toContain('Tokens are managed by admins'));
    expect(hasText(el, 'button', 'New token…')).toBe(false);
  });
});

describe('AuditPage', () => {
  const at = (msAgo: number) => new Date(Date.now() - msAgo).toISOString();
  const entries: AuditRecord[] = [
    {
      id: 3,
      at: at(60_000),
      actor: 'alice',
      actor_kind: 'session',
      token_id: 2,
      role: 'operator',
      action: 'update',
      object_kind: 'threshold',
      object_id: '4',
      old: { id: 4, metric: 'tcp_reset/sent/no_socket', scope: { kind: 'node', node: 'lab-b' }, threshold: { warn: 1, crit: 10 } },
      new: { id: 4, metric: 'tcp_reset/sent/no_socket', scope: { kind: 'node', node: 'lab-b' }, threshold: { warn: 1234, crit: 10 } },
      remote_addr: '10.0.0.9:51000',
    },
    { id: 2, at: at(120_000), actor: 'root', actor_kind: 'session', role: 'admin', action: 'create', object_kind: 'token', object_id: '7', old: null, new: { name: 'acme-portal', role: 'customer' }, remote_addr: '' },
    { id: 1, at: at(180_000), actor: 'alice', actor_kind: 'token', role: 'operator', action: 'delete', object_kind: 'alert_rule', object_id: '5', old: { name: 'Old' }, new: null, remote_addr: '' },
  ];

  it('lists who changed what, with the change as before → after', async () => {
    const calls = fakeApi({ 'GET /api/v1/audit': () => [200, { entries }] });
    const el = mountAs('viewer', <AuditPage params={new URLSearchParams()} />);
    await waitFor(() => expect($$(el, '.audit-table tbody tr')).toHaveLength(3));
    const upd = $(el, 'tr[data-audit-id="3"]');
    expect(upd.dataset.kind).toBe('threshold');
    expect(upd.textContent).toContain('alice');
    expect(upd.textContent).toContain('operator');
    expect(upd.textContent).toContain('10.0.0.9:51000');
    expect($$(upd, '.diff li').map((li) => li.textContent)).toEqual(['threshold.warn: was 1 → , now 1234']);
    expect($(upd, 'del').textContent).toContain('1');
    expect($(upd, 'ins').textContent).toContain('1234');
    expect($(upd, '.audit-full summary').textContent).toContain('5 unchanged');
    expect($(upd, '.audit-full').textContent).toContain('tcp_reset/sent/no_socket');
    const created = $(el, 'tr[data-audit-id="2"]');
    expect($$(created, '.diff li').map((li) => li.textContent)).toEqual(['name: set to "acme-portal"', 'role: set to "customer"']);
    expect($(created, '.audit-json').textContent).toContain('—'); // nothing before
    const deleted = $(el, 'tr[data-audit-id="1"]');
    expect($$(deleted, '.diff-removed')).toHaveLength(1);
    expect(calls[0].url.searchParams.get('limit')).toBe('100');
    expect(calls[0].url.searchParams.has('object_kind')).toBe(false);
  });

  it('keeps its filters in the URL and sends them to the collector', async () => {
    const calls = fakeApi({ 'GET /api/v1/audit': () => [200, { entries }] });
    history.replaceState(null, '', '/audit');
    const el = mount(<App />); // no whoami: a collector without access control, where all may read
    await waitFor(() => $(el, '.audit-table'));
    type($(el, 'select[aria-label="Object"]') as HTMLSelectElement, 'threshold');
    expect(location.search).toBe('?kind=threshold');
    type($(el, 'select[aria-label="Since"]') as HTMLSelectElement, '24h');
    expect(new URLSearchParams(location.search).get('since')).toBe('24h');
    await waitFor(() => {
      const q = calls.filter((c) => c.url.pathname === '/api/v1/audit').pop()!.url.searchParams;
      expect(q.get('object_kind')).toBe('threshold');
      expect(Math.abs(Number(q.get('since')) - (Date.now() - 86_400_000))).toBeLessThan(60_000);
    });
    click(byText(el, 'tr[data-audit-id="3"] a', '4'));
    expect(new URLSearchParams(location.search).get('id')).toBe('4');
    await waitFor(() => expect(calls.filter((c) => c.url.pathname === '/api/v1/audit').pop()!.url.searchParams.get('object_id')).toBe('4'));
    click(byText(el, 'button', 'Clear filters'));
    expect(location.search).toBe('');
  });

  it('says when nothing matches and shows the collector error', async () => {
    fakeApi({ 'GET /api/v1/audit': () => [200, { entries: [] }] });
    const el = mountAs('admin', <AuditPage params={new URLSearchParams('kind=node')} />);
    await waitFor(() => expect(el.textContent).toContain('No change matches these filters.'));
    fakeApi({ 'GET /api/v1/audit': () => [400, { error: { code: 'bad_request', message: 'bad request: since: "x" is neither RFC 3339' } }] });
    const el2 = mountAs('admin', <AuditPage params={new URLSearchParams()} />);
    await waitFor(() => expect($(el2, '[role=alert]').textContent).toContain('is neither RFC 3339'));
  });
});

describe('TokensPage', () => {
  const tok = (id: number, name: string, extra: Partial<Token> = {}): Token => ({
    id,
    name,
    hint: 'abcd',
    role: 'viewer',
    created_by: 'cli:root',
    created_at: new Date(Date.now() - 86_400_000).toISOString(),
    expires_at: new Date(Date.now() + 30 * 86_400_000).toISOString(),
    last_used_at: null,
    state: 'live',
    ...extra,
  });

  function tokensApi() {
    let tokens = [tok(1, 'admin-1', { role: 'admin' }), tok(2, 'bob'), tok(3, 'old', { state: 'revoked', revoked_at: new Date().toISOString(), revoked_by: 'token:root' })];
    const calls = fakeApi({
      'GET /api/v1/tokens': () => [200, { tokens }],
      'POST /api/v1/tokens': (_u, init) => {
        const req = JSON.parse(String(init?.body));
        if (req.name === 'bob') return [409, { error: { code: 'conflict', message: 'a live token named "bob" exists already; revoke it first: conflict' } }];
        const info = tok(9, req.name, { role: req.role, selector: req.selector });
        tokens = [...tokens, info];
        return [201, { token: 'nbs_secretsecretsecret', info }];
      },
      'DELETE /api/v1/tokens/2': () => {
        tokens = tokens.map((t) => (t.id === 2 ? { ...t, state: 'revoked' as const } : t));
        return [200, { ...tokens[1] }];
      },
    });
    return calls;
  }

  it('lists live tokens, marks the one in use, and shows the others on request', async () => {
    tokensApi();
    const el = mountAs('admin', <TokensPage params={new URLSearchParams()} />);
    await waitFor(() => expect($$(el, '.tokens-table tbody tr').map((r) => r.dataset.token)).toEqual(['admin-1', 'bob']));
    expect($(el, 'tr[data-token="admin-1"]').textContent).toContain('you'); // whoami's token_id is 1
    expect($(el, 'tr[data-token="bob"]').textContent).toContain('…abcd');
    expect($(el, 'tr[data-token="bob"]').textContent).toContain('in 30 d');
    expect($(el, 'tr[data-token="bob"]').textContent).toContain('never');
    click(byText(el, 'button', 'Also show 1 expired or revoked'));
    expect(location.search).toBe('?all=1');
  });

  it('lists a token minted without authentication as void, with a way to revoke it', async () => {
    fakeApi({
      'GET /api/v1/tokens': () => [200, { tokens: [tok(1, 'admin-1', { role: 'admin' }), tok(4, 'rebound', { role: 'admin', created_by: 'none:anonymous', minted_without_auth: true, state: 'void' })] }],
    });
    const el = mountAs('admin', <TokensPage params={new URLSearchParams()} />);
    await waitFor(() => expect($$(el, '.tokens-table tbody tr').map((r) => r.dataset.token)).toEqual(['admin-1', 'rebound']));
    const row = $(el, 'tr[data-token="rebound"]');
    expect(row.textContent).toContain('void');
    expect(row.textContent).toContain('minted without authentication');
    expect(byText(row, 'button', 'Revoke…')).toBeTruthy();
  });

  it('creates a token and shows its secret once, with a copy button', async () => {
    const calls = tokensApi();
    const writeText = stubClipboard();
    const el = mountAt('admin', '/tokens?new=1', (p) => <TokensPage params={p} />);
    await waitFor(() => $(el, 'form.token-form'));
    expect(document.activeElement).toBe($(el, '#token-name'));
    type($(el, '#token-name') as HTMLInputElement, 'bob');
    click(byText(el, 'button', 'Create token'));
    await waitFor(() => expect($(el, '#token-name-err').textContent).toContain('exists already'));

    type($(el, '#token-name') as HTMLInputElement, 'acme-portal');
    type($(el, '#token-role') as HTMLSelectElement, 'customer');
    click(byText(el, 'button', 'Create token'));
    expect($(el, '#token-selector-err').textContent).toContain('needs the labels');
    type($(el, '#token-selector') as HTMLInputElement, 'customer=acme');
    type($(el, '#token-expires') as HTMLSelectElement, '30d');
    click(byText(el, 'button', 'Create token'));
    await waitFor(() => $(el, '.secret-box'));
    expect(calls.filter((c) => c.method === 'POST').pop()?.body).toEqual({ name: 'acme-portal', role: 'customer', selector: { customer: 'acme' }, expires_in: '30d' });
    expect(($(el, '#new-token') as HTMLInputElement).value).toBe('nbs_secretsecretsecret');
    expect($(el, '.secret-box').textContent).toContain('this is the only time the token is shown');
    expect(location.href).not.toContain('nbs_secret');
    click(byText(el, 'button', 'Copy token'));
    await waitFor(() => expect(writeText).toHaveBeenCalledWith('nbs_secretsecretsecret'));
    await waitFor(() => expect(el.textContent).toContain('Token copied.'));
    click(byText(el, 'button', /hide the token/));
    expect(el.querySelector('.secret-box')).toBeNull();
    expect(el.innerHTML).not.toContain('nbs_secret');
    await waitFor(() => $(el, 'tr[data-token="acme-portal"]'));
    expect($(el, 'tr[data-token="acme-portal"]').textContent).toContain('customer=acme');
  });

  it("takes a new token's secret off the screen when that token is revoked", async () => {
    fakeApi({
      'GET /api/v1/tokens': () => [200, { tokens: [tok(1, 'admin-1', { role: 'admin' }), tok(9, 'fresh')] }],
      'POST /api/v1/tokens': () => [201, { token: 'nbs_freshsecretfresh', info: tok(9, 'fresh') }],
      'DELETE /api/v1/tokens/9': () => [200, tok(9, 'fresh', { state: 'revoked' })],
    });
    const el = mountAt('admin', '/tokens?new=1', (p) => <TokensPage params={p} />);
    await waitFor(() => $(el, 'form.token-form'));
    type($(el, '#token-name') as HTMLInputElement, 'fresh');
    click(byText(el, 'button', 'Create token'));
    await waitFor(() => expect(($(el, '#new-token') as HTMLInputElement).value).toBe('nbs_freshsecretfresh'));
    await waitFor(() => $(el, 'tr[data-token="fresh"]'));
    click($(el, 'button[aria-label="Revoke fresh…"]'));
    click(byText(el, 'button', 'Revoke fresh'));
    await waitFor(() => expect(el.querySelector('.secret-box')).toBeNull());
    expect(el.innerHTML).not.toContain('nbs_freshsecretfresh');
  });

  it('revokes only after confirming', async () => {
    const calls = tokensApi();
    const el = mountAs('admin', <TokensPage params={new URLSearchParams()} />);
    await waitFor(() => $(el, 'tr[data-token="bob"]'));
    click($(el, 'button[aria-label="Revoke bob…"]'));
    expect(calls.some((c) => c.method === 'DELETE')).toBe(false);
    await waitFor(() => expect(document.activeElement?.textContent).toBe('Revoke bob'));
    click(byText(el, 'button', 'Revoke bob'));
    await waitFor(() => expect(el.querySelector('tr[data-token="bob"]')).toBeNull());
    expect(calls.filter((c) => c.method === 'DELETE').map((c) => c.url.pathname)).toEqual(['/api/v1/tokens/2']);
    expect($(el, '.saved').textContent).toContain('Revoked bob');
    // Revoking one's own token is said to sign one out.
    click($(el, 'button[aria-label="Revoke admin-1…"]'));
    await waitFor(() => expect(el.textContent).toContain('You are signed in with it'));
  });
});

describe('the phone menu', () => {
  it('closes on Escape, pressed at once after opening it, and gives the focus back to its button', async () => {
    fakeApi({ 'GET /api/v1/alerts': () => [200, { evaluator, alerts: [] }] });
    const el = mountAs('admin', <Shell>page</Shell>);
    const toggle = $(el, '.menu-toggle') as HTMLButtonElement;
    click(toggle);
    expect(toggle.getAttribute('aria-expanded')).toBe('true');
    const logout = $(el, '#topbar-menu .logout') as HTMLButtonElement;
    logout.focus();
    // No wait for effects: Escape comes in the same tick as the click.
    act(() => {
      logout.dispatchEvent(new KeyboardEvent('keydown', { key: 'Escape', bubbles: true }));
    });
    expect(toggle.getAttribute('aria-expanded')).toBe('false');
    expect($(el, '#topbar-menu').classList.contains('open')).toBe(false);
    expect(document.activeElement).toBe(toggle);
  });
});
