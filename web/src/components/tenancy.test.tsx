import { beforeEach, describe, expect, it } from 'vitest';
import type { Role } from '../access';
import type { BootstrapToken, FleetNode, NodeIdentity, NodeSummary } from '../api';
import { node, resetTree } from '../fixtures';
import { $, $$, byText, click, fakeApi, hasText, mountAs, mountAt, stubClipboard, type, waitFor } from '../testutil';
import { FleetPage } from './Fleet';
import { NodePage } from './NodePage';
import { TokensPage } from './Tokens';

const identity = (name: string, bound: Record<string, string>, extra: Partial<NodeIdentity> = {}): NodeIdentity => ({
  node: name,
  state: 'enrolled',
  has_data: true,
  connected: true,
  tenant: bound.customer ?? '',
  bound_labels: bound,
  bound_by: 'bootstrap:acme-eu',
  ...extra,
});

beforeEach(() => history.replaceState(null, '', '/nodes/lab-b'));

/** The collector's answers for lab-b: acme's, its agent claiming globex. */
function nodeApi(summary: NodeSummary) {
  let current = summary;
  const calls = fakeApi({
    'GET /api/v1/nodes/lab-b': () => [200, current],
    'GET /api/v1/nodes/lab-b/tree': () => [200, { node: 'lab-b', roots: resetTree(), window_s: 60 }],
    'GET /api/v1/node-identities': () => [200, { mode: 'enroll', nodes: [identity('lab-a', { customer: 'globex' }), identity('lab-b', { customer: 'acme', region: 'eu' })] }],
    'PUT /api/v1/nodes/lab-b/labels': (_u, init) => {
      const { labels } = JSON.parse(String(init?.body));
      if (labels.region === 'bad value') return [400, { error: { code: 'bad_request', message: 'invalid labels: label value "bad value" of region: invalid' } }];
      current = { ...current, labels, tenant: labels.customer ?? '', claimed_labels: undefined };
      return [200, { node: 'lab-b', bound_labels: labels, tenant: labels.customer ?? '' }];
    },
  });
  return calls;
}

const claiming = () => node('lab-b', 'crit', { customer: 'acme', region: 'eu' }, { claimed_labels: { customer: 'globex' } });
const page = (role: Role) => mountAs(role, <NodePage node="lab-b" params={new URLSearchParams()} />);

/** An admin on lab-b's page (its agent claiming globex), the tenancy editor open. */
async function openEditor() {
  const calls = nodeApi(claiming());
  const el = page('admin');
  await waitFor(() => byText(el, 'button', 'Tenant & labels…'));
  click(byText(el, 'button', 'Tenant & labels…'));
  await waitFor(() => $(el, '#node-tenant'));
  return { calls, el };
}

describe('a node page and its tenancy', () => {
  // [role, sees the agent's claims, may edit tenant & labels]
  it.each([
    ['customer', false, false],
    ['viewer', false, false],
    ['operator', true, false],
    ['admin', true, true],
  ] as [Role, boolean, boolean][])('%s: claims %s, editor %s', async (role, claims, editor) => {
    const calls = nodeApi(claiming());
    const el = page(role);
    await waitFor(() => expect($(el, '.node-tenant').textContent).toBe('acme'));
    expect(hasText(el, '.notice-claims li', 'Ignored claim: The agent claims customer=globex; the operator bound customer=acme; its claim is ignored.')).toBe(claims);
    // Staff internals are not in the page at all for customers and viewers.
    if (!claims) expect(el.textContent).not.toContain('globex');
    expect(hasText(el, 'button', 'Tenant & labels…')).toBe(editor);
    expect(el.querySelector('.tenancy-editor')).toBeNull();
    expect(calls.some((c) => c.url.pathname === '/api/v1/node-identities')).toBe(false);
    expect(el.querySelector('[data-notice=moved]')).toBeNull();
  });

  it('shows a node that moved to another tenant as its history, never live', async () => {
    // Even were it said to be connected, a retired row is not the node's present.
    nodeApi(node('lab-b', 'ok', { customer: 'acme' }, { retired_at: '2025-03-04T10:00:00Z', connected: true, stale: true }));
    const el = page('customer');
    await waitFor(() => $(el, '[data-notice=moved]'));
    expect($(el, '[data-notice=moved]').textContent).toMatch(/^Moved\. This node moved to another tenant on 2025-03-04 \d\d:\d\d; what is shown is what it reported before\.$/);
    expect($(el, '[data-notice=moved]').getAttribute('role')).toBe('note');
    expect(el.querySelector('.conn')).toBeNull();
    expect(el.textContent).not.toMatch(/\b(connected|disconnected|stale)\b/);
    expect(hasText(el, '.tag', 'moved to another tenant')).toBe(true);
    expect(hasText(el, 'button', /Go live/)).toBe(false);
  });

  it('marks a moved-away node in the fleet in words, not as disconnected', async () => {
    const n = node('lab-b', 'ok', { customer: 'acme' }, { retired_at: '2025-03-04T10:00:00Z', connected: false, stale: true });
    const row: FleetNode = { name: n.name, labels: n.labels, tenant: n.tenant, state: 'ok', since: null, connected: false, stale: true, last_report: n.last_report, interval_ms: 10000, retired_at: n.retired_at, roots: [] };
    fakeApi({ 'GET /api/v1/fleet': () => [200, { time: new Date().toISOString(), total: 1, matched: 1, offset: 0, limit: 100, counts: { ok: 1, warn: 0, crit: 0, unknown: 0 }, nodes: [row] }] });
    const el = mountAs('customer', <FleetPage params={new URLSearchParams()} />);
    await waitFor(() => $(el, '.tile[data-node="lab-b"]'));
    const tile = $(el, '.tile[data-node="lab-b"]');
    expect($(tile, '.tile-link').getAttribute('aria-label')).toBe('lab-b: OK, moved to another tenant');
    expect($(tile, '.tag-warn').textContent).toBe('moved');
  });

  it('offers an admin no live mode, editor or deletion for a moved-away row', async () => {
    nodeApi(node('lab-b', 'ok', { customer: 'acme' }, { retired_at: '2025-03-04T10:00:00Z' }));
    const el = page('admin');
    await waitFor(() => $(el, '[data-notice=moved]'));
    expect(hasText(el, 'button', /Go live|Tenant & labels|Delete node/)).toBe(false);
  });

  it('lets an admin move the node to another tenant after confirming what happens to its history', async () => {
    const { calls, el } = await openEditor();
    expect($(el, '.bound-now').textContent).toBe('Bound now: customer=acme, region=eu (by bootstrap:acme-eu) Tenant: acme.');
    expect(($(el, '#node-tenant') as HTMLInputElement).value).toBe('acme');
    expect(($(el, '#node-bound-labels') as HTMLInputElement).value).toBe('region=eu');
    expect($(el, 'label[for=node-tenant]').textContent).toContain('label customer');
    expect(document.activeElement).toBe($(el, '#node-tenant'));

    // Nothing changed: nothing to confirm.
    click(byText(el, 'button', 'Review…'));
    expect($(el, '.tenancy-editor [role=alert]').textContent).toContain('Nothing to change');

    // The tenant key belongs in its own field.
    type($(el, '#node-bound-labels') as HTMLInputElement, 'region=eu, customer=globex');
    click(byText(el, 'button', 'Review…'));
    expect($(el, '#node-labels-others-err').textContent).toContain('Set customer in the Tenant field');
    expect($(el, '#node-bound-labels').getAttribute('aria-invalid')).toBe('true');

    // The collector's own message when it refuses.
    type($(el, '#node-bound-labels') as HTMLInputElement, 'region=bad value');
    click(byText(el, 'button', 'Review…'));
    click(byText(el, 'button', 'Bind labels'));
    await waitFor(() => expect($(el, '.tenancy-editor .error-box').textContent).toContain('invalid labels: label value "bad value" of region: invalid'));

    type($(el, '#node-tenant') as HTMLInputElement, 'globex');
    type($(el, '#node-bound-labels') as HTMLInputElement, 'region=eu');
    click(byText(el, 'button', 'Review…'));
    expect($(el, '[data-confirm=history]').textContent).toBe(
      'Its history splits: acme keeps what lab-b reported until now; globex sees only what it reports from now. Its agent reconnects under the new labels.',
    );
    expect(calls.some((c) => c.method === 'PUT' && c.body && (c.body as { labels: Record<string, string> }).labels.customer === 'globex')).toBe(false);
    await waitFor(() => expect(document.activeElement?.textContent).toBe('Move lab-b to globex'));
    click(byText(el, 'button', 'Move lab-b to globex'));
    await waitFor(() => expect(el.querySelector('.tenancy-editor')).toBeNull());
    expect(calls.filter((c) => c.method === 'PUT').pop()?.body).toEqual({ labels: { customer: 'globex', region: 'eu' } });
    expect($(el, '.saved').textContent).toContain("lab-b is now globex's (bound: customer=globex, region=eu)");
    // The page asks again and shows the node's new tenant.
    await waitFor(() => expect($(el, '.node-tenant').textContent).toBe('globex'));
    expect(el.querySelector('.notice-claims')).toBeNull();
  });

  it('unbinds every label: the node has no tenant from then on', async () => {
    const { calls, el } = await openEditor();
    type($(el, '#node-tenant') as HTMLInputElement, '');
    type($(el, '#node-bound-labels') as HTMLInputElement, '');
    click(byText(el, 'button', 'Review…'));
    expect($(el, '[data-confirm=history]').textContent).toContain('from now it has no tenant, so only staff see what it reports');
    click(byText(el, 'button', 'Move lab-b to no tenant'));
    await waitFor(() => expect(calls.filter((c) => c.method === 'PUT').pop()?.body).toEqual({ labels: {} }));
    await waitFor(() => expect($(el, '.node-tenant').textContent).toBe('none'));
  });
});

describe('tenant bootstrap tokens', () => {
  const iso = (ms: number) => new Date(Date.now() + ms).toISOString();
  const boot = (id: number, name: string, extra: Partial<BootstrapToken> = {}): BootstrapToken => ({
    id,
    name,
    labels: { customer: 'acme' },
    enrolled: 2,
    created_by: 'admin-1',
    created_at: iso(-86_400_000),
    expires_at: iso(20 * 86_400_000),
    ...extra,
  });

  function bootApi() {
    let tokens = [boot(1, 'acme-eu', { max_nodes: 10 }), boot(2, 'old', { revoked_at: iso(-3_600_000) })];
    return fakeApi({
      'GET /api/v1/tokens': () => [200, { tokens: [] }],
      'GET /api/v1/node-bootstrap-tokens': () => [200, { bootstrap_tokens: tokens }],
      'POST /api/v1/node-bootstrap-tokens': (_u, init) => {
        const req = JSON.parse(String(init?.body));
        if (!req.labels.customer) return [400, { error: { code: 'bad_request', message: 'invalid labels: they must name the tenant, e.g. customer=acme (the tenant label is --tenant.label "customer")' } }];
        const info = boot(3, req.name, { labels: req.labels, enrolled: 0 });
        tokens = [...tokens, info];
        return [201, { token: 'nbsb1_secretsecret', bootstrap_token: info }];
      },
      'DELETE /api/v1/node-bootstrap-tokens/acme-eu': () => {
        tokens = tokens.map((t) => (t.name === 'acme-eu' ? { ...t, revoked_at: iso(0) } : t));
        return [204, undefined];
      },
    });
  }

  it('is for admins only', async () => {
    const calls = bootApi();
    const el = mountAs('operator', <TokensPage params={new URLSearchParams()} />);
    await waitFor(() => $(el, '.tokens-page'));
    expect(el.textContent).not.toContain('bootstrap');
    expect(calls.some((c) => c.url.pathname === '/api/v1/node-bootstrap-tokens')).toBe(false);
  });

  it('lists the live ones with their tenant and enrollments', async () => {
    bootApi();
    const el = mountAs('admin', <TokensPage params={new URLSearchParams()} />);
    await waitFor(() => expect($$(el, '.bootstrap-table tbody tr').map((r) => r.dataset.bootstrap)).toEqual(['acme-eu']));
    const row = $(el, 'tr[data-bootstrap="acme-eu"]');
    expect(row.textContent).toContain('customer=acme');
    expect(row.textContent).toContain('2 of 10');
    expect(row.textContent).toContain('live');
    click(byText(el, 'button', 'Also show 1 expired or revoked bootstrap tokens'));
    expect(location.search).toBe('?bootall=1');
  });

  it('creates one and shows it once, with a copy button and the agent flag', async () => {
    const calls = bootApi();
    const writeText = stubClipboard();
    const el = mountAt('admin', '/tokens?new=bootstrap', (p) => <TokensPage params={p} />);
    await waitFor(() => $(el, 'form[aria-label="New bootstrap token"]'));
    expect(document.activeElement).toBe($(el, '#bootstrap-name'));
    // The API token form is not open: ?new=bootstrap is this one's.
    expect(el.querySelector('#token-name')).toBeNull();
    type($(el, '#bootstrap-name') as HTMLInputElement, 'globex-us');
    type($(el, '#bootstrap-labels') as HTMLInputElement, 'region=us');
    click(byText(el, 'button', 'Create bootstrap token'));
    await waitFor(() => expect($(el, '#bootstrap-labels-err').textContent).toContain('they must name the tenant'));
    expect($(el, '#bootstrap-labels').getAttribute('aria-invalid')).toBe('true');

    type($(el, '#bootstrap-labels') as HTMLInputElement, 'customer=globex, region=us');
    type($(el, '#bootstrap-expires') as HTMLSelectElement, '7d');
    type($(el, '#bootstrap-max') as HTMLInputElement, '5');
    click(byText(el, 'button', 'Create bootstrap token'));
    await waitFor(() => $(el, '.secret-box'));
    expect(calls.filter((c) => c.method === 'POST').pop()?.body).toEqual({ name: 'globex-us', labels: { customer: 'globex', region: 'us' }, expires_in: '7d', max_nodes: 5 });
    expect(($(el, '#new-bootstrap-token') as HTMLInputElement).value).toBe('nbsb1_secretsecret');
    expect($(el, '.secret-box').textContent).toContain('this is the only time the token is shown');
    expect($(el, '.secret-box').textContent).toContain('nbs-agent --node.bootstrap-token-file=/etc/nbs/bootstrap-token');
    expect(location.href).not.toContain('nbsb1_');
    click(byText(el, 'button', 'Copy token'));
    await waitFor(() => expect(writeText).toHaveBeenCalledWith('nbsb1_secretsecret'));
    click(byText(el, 'button', 'Copy agent flag'));
    await waitFor(() => expect(writeText).toHaveBeenCalledWith('--node.bootstrap-token-file=/etc/nbs/bootstrap-token'));
    click(byText(el, 'button', /hide the token/));
    expect(el.innerHTML).not.toContain('nbsb1_secret');
    await waitFor(() => $(el, 'tr[data-bootstrap="globex-us"]'));
  });

  it('revokes one only after confirming', async () => {
    const calls = bootApi();
    const el = mountAs('admin', <TokensPage params={new URLSearchParams()} />);
    await waitFor(() => $(el, 'tr[data-bootstrap="acme-eu"]'));
    click($(el, 'button[aria-label="Revoke bootstrap token acme-eu…"]'));
    expect(calls.some((c) => c.method === 'DELETE')).toBe(false);
    expect(el.textContent).toContain('the nodes it enrolled keep their credentials and tenant');
    await waitFor(() => expect(document.activeElement?.textContent).toBe('Revoke acme-eu'));
    click(byText(el, 'button', 'Revoke acme-eu'));
    await waitFor(() => expect(el.querySelector('tr[data-bootstrap="acme-eu"]')).toBeNull());
    expect(calls.filter((c) => c.method === 'DELETE').map((c) => c.url.pathname)).toEqual(['/api/v1/node-bootstrap-tokens/acme-eu']);
    expect($(el, '.bootstrap-section .saved').textContent).toContain('Revoked bootstrap token acme-eu');
  });
});
