import { act } from 'preact/test-utils';
import { beforeEach, describe, expect, it, vi } from 'vitest';
import type { FlowEdgeDetail } from '../api';
import { addressEnd, edge, graph, owner, ownerEnd, synthetic } from '../flowfixture';
import { GRAPH_MAX_EDGES } from '../flows';
import { $, $$, click, fakeApi, mountAt, press, type, waitFor } from '../testutil';
import { FlowMapPage } from './FlowMap';

beforeEach(() => history.replaceState(null, '', '/flows'));

const cart = owner('n1', 'pod:shop.cart-1', 'shop/cart-1', 'shop');
const db = owner('n2', 'pod:shop.db-0', 'shop/db-0', 'shop');
const critEdge = edge('cart-db', ownerEnd(cart, '10.0.0.1'), ownerEnd(db, '10.0.0.2', 5432), {
  state: 'crit',
  explain: '12 resets sent by the server (no_socket) in 5 min',
  resets: { client_sent: {}, client_received: { no_socket: 12 }, server_sent: { no_socket: 12 }, server_received: {} },
  drops: { client: {}, server: { netfilter: 3 } },
});
const warnEdge = edge('cart-out', ownerEnd(cart, '10.0.0.1'), addressEnd('10.9.9.9', 443), { state: 'warn', explain: '2 drops at the client (netfilter) in 5 min', opened: 99 });
const okEdge = edge('db-out', ownerEnd(db, '10.0.0.2'), { owner: null, address: '', label: 'outside', outside: true, port: 53 });
const answer = graph([cart, db], [critEdge, warnEdge, okEdge], {
  total_edges: 1234,
  next_cursor: 'page2',
  other: { edges_folded: 40, opened: 400, failed: 1, retransmits: 5, resets: 2, drops: 0, bytes: 123456, nodes_capped: 2, holders_left_out: 1500 },
});

// An SVG element has no click(): a click as the browser dispatches it.
const clickSvg = (el: Element) => act(() => void el.dispatchEvent(new MouseEvent('click', { bubbles: true, cancelable: true })));

const page = (role: 'admin' | 'customer', path: string) => mountAt(role, path, (p) => <FlowMapPage params={p} />);

describe('FlowMapPage', () => {
  it('draws each state by colour and by shape, the figure on focus, and says what the agents folded', async () => {
    const calls = fakeApi({ 'GET /api/v1/flows': () => [200, answer] });
    const el = page('admin', '/flows');
    await waitFor(() => expect($$(el, 'path.fe[data-key]')).toHaveLength(3));
    expect(Object.fromEntries(calls[0].url.searchParams)).toEqual({ window: '1h', sort: 'worst', limit: '500' });
    // Drawn worst last (on top); the keyboard goes worst first.
    expect($$(el, 'path.fe[data-key]').map((p) => p.dataset.state)).toEqual(['ok', 'warn', 'crit']);
    const paths = $$(el, 'path.fe[data-key]').sort((a, b) => Number(a.dataset.i) - Number(b.dataset.i));
    expect(paths.map((p) => p.dataset.state)).toEqual(['crit', 'warn', 'ok']);
    expect(paths.map((p) => p.getAttribute('class'))).toEqual(['fe st-crit', 'fe st-warn', 'fe st-ok']);
    // Not colour alone: CRIT carries a diamond, and every edge says its state in words.
    expect($$(el, '.fe-marks rect')).toHaveLength(1);
    expect(paths[0].getAttribute('aria-label')).toBe('shop/cart-1 → shop/db-0:5432, CRIT: 12 resets sent by the server (no_socket) in 5 min');
    expect(paths[1].getAttribute('aria-label')).toBe('shop/cart-1 → 10.9.9.9:443 (outside), WARN: 2 drops at the client (netfilter) in 5 min');
    expect(paths[2].getAttribute('aria-label')).toMatch(/^shop\/db-0 → outside:53, OK$/);
    // One tab stop; the arrows move along the edges.
    expect(paths.map((p) => p.getAttribute('tabindex'))).toEqual(['0', '-1', '-1']);
    paths[0].focus();
    await waitFor(() => expect($(el, '.flow-tip').textContent).toContain('12 resets sent by the server (no_socket) in 5 min'));
    expect($(el, '.flow-tip').textContent).toContain('CRIT');
    press(paths[0], 'ArrowRight');
    await waitFor(() => expect($(el, '.flow-tip').textContent).toContain('2 drops at the client'));
    expect(document.activeElement).toBe(paths[1]);

    expect($(el, '.count-btn.st-crit').textContent).toContain('1');
    expect($(el, '.flow-counts').textContent).toContain('3 of 1,234 edges, worst first');
    const other = $(el, '.flow-other').textContent!;
    expect(other).toContain('40 edges fell past the agents\' per-node cap on 2 nodes');
    expect(other).toContain('400 opened');
    expect(other).toContain('1,500 address holders were left out of agents');
    expect(el.textContent).toContain('1,234 edges · minute resolution');
  });

  it('opens an edge: counters at both ends, resets by reason, links into both trees and to evidence', async () => {
    const detail: FlowEdgeDetail = {
      from: answer.from,
      to: answer.to,
      resolution: 'minute',
      edge: critEdge,
      owners: [cart, db],
      series: [
        { t: '2026-11-29T11:58:00Z', opened: 3, failed: 0, resets: 12, drops: 1, retransmits: 0, rtt_p99_ms: 1.2 },
        { t: '2026-11-29T11:59:00Z', opened: 4, failed: 1, resets: 12, drops: 2, retransmits: 1, rtt_p99_ms: null },
      ],
      links: {
        tree: [
          { end: 'client', node: 'n1', path: '/nodes/n1?at=2026-11-29T12%3A00%3A00Z', metrics: ['tcp_reset/received/no_socket'] },
          { end: 'server', node: 'n2', path: '/nodes/n2?at=2026-11-29T12%3A00%3A00Z', metrics: ['tcp_reset/sent/no_socket', 'drops/netfilter'] },
        ],
        evidence: [{ end: 'server', node: 'n2', path: '/api/v1/nodes/n2/events?metric=tcp_reset&from=a&to=b' }],
      },
    };
    const calls = fakeApi({ 'GET /api/v1/flows': () => [200, answer], 'GET /api/v1/flows/edge': () => [200, detail] });
    const el = page('admin', '/flows?range=6h&at=2026-11-29T12:00:00Z');
    await waitFor(() => $(el, 'path.fe[data-key="cart-db"]'));
    act(() => {
      $(el, 'path.fe[data-key="cart-db"]').dispatchEvent(new MouseEvent('click', { bubbles: true }));
    });
    expect(new URLSearchParams(location.search).get('edge')).toBe('cart-db');
    // The page follows the URL: mounted anew at it, as App renders it.
    const el2 = page('admin', location.pathname + location.search);
    await waitFor(() => $(el2, '.flow-detail'));
    const asked = calls.find((c) => c.url.pathname === '/api/v1/flows/edge')!.url.searchParams;
    expect(Object.fromEntries(asked)).toEqual({ key: 'cart-db', window: '6h', at: '2026-11-29T12:00:00.000Z' });
    const panel = $(el2, '.flow-panel');
    expect($(panel, 'h2').textContent).toBe('shop/cart-1 → shop/db-0:5432');
    const rows = $$(panel, '.flow-ends-table tbody tr').map((r) => [...r.children].map((c) => c.textContent));
    expect(rows).toEqual([
      ['Resets sent', '0', '12 no_socket'],
      ['Resets received', '12 no_socket', '0'],
      ['Drops', '0', '3 netfilter'],
      ['Bytes sent', '1,000 B', '4.88 KiB'],
    ]);
    expect($$(panel, '.flow-sparks li')).toHaveLength(6);
    expect($$(panel, '.flow-series tbody tr')).toHaveLength(2);
    const tree = $$(panel, 'a.tree-link').map((a) => a.getAttribute('href'));
    expect(tree).toEqual([
      '/nodes/n1?at=2026-11-29T12%3A00%3A00Z&metric=tcp_reset%2Freceived%2Fno_socket',
      '/nodes/n2?at=2026-11-29T12%3A00%3A00Z&metric=tcp_reset%2Fsent%2Fno_socket',
      '/nodes/n2?at=2026-11-29T12%3A00%3A00Z&metric=drops%2Fnetfilter',
    ]);
    expect($(panel, 'a.evidence-link').getAttribute('href')).toBe('/nodes/n2?at=2026-11-29T12%3A00%3A00Z&metric=tcp_reset');
    press(document.body, 'Escape');
    expect(new URLSearchParams(location.search).has('edge')).toBe(false);
  });

  it('pages with next_cursor, back a page, and a new filter starts again', async () => {
    const calls = fakeApi({ 'GET /api/v1/flows': () => [200, answer] });
    const el = page('admin', '/flows?owner=cart');
    await waitFor(() => $(el, '.pager'));
    const [first, prev, next] = $$(el, '.pager button');
    expect(first.hasAttribute('disabled') && prev.hasAttribute('disabled')).toBe(true);
    click(next);
    expect(new URLSearchParams(location.search).get('cursor')).toBe('page2');
    expect(new URLSearchParams(location.search).get('owner')).toBe('cart');
    const el2 = page('admin', location.pathname + location.search);
    await waitFor(() => expect(calls.at(-1)!.url.searchParams.get('cursor')).toBe('page2'));
    await waitFor(() => $(el2, '.pager'));
    expect($$(el2, '.pager button')[1].hasAttribute('disabled')).toBe(false);
    expect($(el2, '.flow-counts a[download]').getAttribute('href')).toBe('/api/v1/flows?window=1h&owner=cart&sort=worst&limit=500&cursor=page2&format=csv');
    // Time travel: the window ends at the instant picked.
    const at = $(el2, 'input.flow-at') as HTMLInputElement;
    at.value = '2026-11-29T10:00';
    at.dispatchEvent(new Event('change', { bubbles: true }));
    expect(new URLSearchParams(location.search).get('at')).toBe(new Date('2026-11-29T10:00').toISOString());
    expect(new URLSearchParams(location.search).has('cursor')).toBe(false);
    const sort = $(el2, '.flow-toolbar select') as HTMLSelectElement;
    sort.value = 'traffic';
    sort.dispatchEvent(new Event('change', { bubbles: true }));
    expect(new URLSearchParams(location.search).has('cursor')).toBe(false);
    expect(new URLSearchParams(location.search).get('sort')).toBe('traffic');
  });

  it('offers staff a tenant filter and a customer none, whose answers stay addresses', async () => {
    const calls = fakeApi({ 'GET /api/v1/flows': () => [200, answer] });
    const staff = page('admin', '/flows?tenant=acme');
    await waitFor(() => $(staff, 'path.fe'));
    expect($$(staff, '.flow-toolbar label span').map((s) => s.textContent)).toContain('Tenant');
    expect(calls.at(-1)!.url.searchParams.get('tenant')).toBe('acme');

    // A customer: no tenant filter, and a tenant in the URL is never sent.
    const cust = page('customer', '/flows?tenant=globex');
    await waitFor(() => $(cust, 'path.fe'));
    expect($$(cust, '.flow-toolbar label span').map((s) => s.textContent)).not.toContain('Tenant');
    expect(calls.at(-1)!.url.searchParams.has('tenant')).toBe(false);
    // Peers outside the tenant read as the collector's address or "outside", nothing more.
    const labels = $$(cust, '.fv text').map((t) => t.textContent);
    expect(labels).toEqual(expect.arrayContaining(['shop/cart-1', 'shop/db-0', '10.9.9.9:443 (outside)', 'outside']));
    expect($$(cust, '.fv.fv-outside')).toHaveLength(2);
  });

  it('shows the same page as a sortable table, and says when the graph draws only the first edges', async () => {
    const big = synthetic(800, GRAPH_MAX_EDGES + 200);
    fakeApi({ 'GET /api/v1/flows': () => [200, big] });
    const el = page('admin', '/flows?limit=5000');
    await waitFor(() => $(el, 'path.fe'));
    expect($$(el, 'path.fe[data-key]')).toHaveLength(GRAPH_MAX_EDGES);
    expect($(el, '.graph-cap').textContent).toContain(`first ${GRAPH_MAX_EDGES.toLocaleString('en-US')} edges of this page; the table holds all 1,200`);
    click($$(el, '.view-toggle button')[1]);
    expect(new URLSearchParams(location.search).get('view')).toBe('table');
    const t = page('admin', `${location.pathname}${location.search}&tsort=opened&tdir=asc`);
    await waitFor(() => $(t, '.flow-table tbody tr'));
    // A page may hold 5,000: the table draws 500 rows at a time.
    expect($$(t, '.flow-table tbody tr')).toHaveLength(500);
    expect($(t, '.table-more').textContent).toContain('500 of this page\'s 1,200 rows shown');
    click($(t, '.table-more button'));
    click($(t, '.table-more button'));
    const rows = $$(t, '.flow-table tbody tr');
    expect(rows).toHaveLength(1200);
    expect(t.querySelector('.table-more')).toBeNull();
    const opened = rows.map((r) => Number(r.children[3].textContent!.replace(/,/g, '')));
    expect(opened).toEqual([...opened].sort((a, b) => a - b));
    expect($(t, 'th[aria-sort]').textContent).toContain('Opened');
    expect($(t, 'th[aria-sort]').getAttribute('aria-sort')).toBe('ascending');
    expect(rows[0].querySelector('.badge')!.textContent).toMatch(/OK|WARN|CRIT/);
  }, 30_000); // 1,200 edges drawn in happy-dom: seconds on a loaded machine

  it('is a list at phone width, worst first, each item opening its edge', async () => {
    vi.stubGlobal('matchMedia', (q: string) => ({ matches: q.includes('max-width'), media: q, addEventListener() {}, removeEventListener() {} }));
    fakeApi({ 'GET /api/v1/flows': () => [200, answer] });
    const el = page('customer', '/flows');
    await waitFor(() => $(el, '.flow-list'));
    expect(el.querySelector('svg[role=group]')).toBeNull();
    expect(el.querySelector('.view-toggle')).toBeNull();
    const items = $$(el, '.flow-list li');
    expect(items.map((i) => i.dataset.state)).toEqual(['crit', 'warn', 'ok']);
    expect(items[0].textContent).toContain('CRIT');
    expect(items[0].textContent).toContain('shop/cart-1 → shop/db-0:5432');
    expect(items[0].textContent).toContain('12 resets sent by the server');
    click($(items[1], 'button'));
    expect(new URLSearchParams(location.search).get('edge')).toBe('cart-out');
  });

  it('shows only the edges of an owner clicked, in the URL (a history entry); again or its × shows all; by keyboard too', async () => {
    const calls = fakeApi({ 'GET /api/v1/flows': () => [200, answer] });
    const el = page('admin', '/flows?owner=shop');
    await waitFor(() => $(el, 'path.fe'));
    // Every vertex is a toggle, one Tab stop for all of them; the outside peer with no address is none.
    const verts = $$(el, 'g.fv[role=button]');
    expect(verts.map((v) => v.dataset.vertex).sort()).toEqual(['10.9.9.9', cart.key, db.key]);
    expect(verts.map((v) => v.getAttribute('tabindex')).filter((t) => t === '0')).toHaveLength(1);
    expect(verts.every((v) => v.getAttribute('aria-pressed') === 'false')).toBe(true);
    const before = history.length;
    clickSvg($(el, `g.fv[data-vertex="${cart.key}"] text`));
    expect(new URLSearchParams(location.search).get('vertex')).toBe(cart.key);
    expect(new URLSearchParams(location.search).get('owner')).toBe('shop');
    expect(history.length).toBe(before + 1);

    // The page of that URL asks the collector for the vertex's edges, and says so.
    const el2 = page('admin', location.pathname + location.search);
    await waitFor(() => expect(calls.at(-1)!.url.searchParams.get('vertex')).toBe(cart.key));
    await waitFor(() => $(el2, 'path.fe'));
    expect(calls.at(-1)!.url.searchParams.get('owner')).toBe('shop');
    const chip = $(el2, '.flow-toolbar .vertex-filter');
    expect(chip.textContent).toContain("only shop/cart-1's edges");
    const sel = $(el2, 'g.fv.fv-sel');
    expect(sel.dataset.vertex).toBe(cart.key);
    expect(sel.getAttribute('aria-pressed')).toBe('true');
    expect(sel.getAttribute('aria-label')).toBe('Only the edges of shop/cart-1');
    // Clicking it again shows every edge; so does its ×.
    clickSvg($(sel, 'circle'));
    expect(new URLSearchParams(location.search).has('vertex')).toBe(false);
    history.replaceState(null, '', `/flows?vertex=${encodeURIComponent(cart.key)}`);
    click(chip);
    expect(new URLSearchParams(location.search).has('vertex')).toBe(false);

    // Keyboard: the arrows move along the vertices, Enter shows one's edges.
    const el3 = page('admin', '/flows');
    await waitFor(() => $(el3, 'g.fv[tabindex="0"]'));
    const first = $(el3, 'g.fv[tabindex="0"]');
    first.focus();
    press(first, 'ArrowDown');
    const second = document.activeElement as HTMLElement;
    expect(second).not.toBe(first);
    expect(second.getAttribute('role')).toBe('button');
    expect(second.getAttribute('tabindex')).toBe('0');
    expect(first.getAttribute('tabindex')).toBe('-1');
    const chosen = second.dataset.vertex!;
    press(second, 'Enter');
    expect(new URLSearchParams(location.search).get('vertex')).toBe(chosen);
    // Edges are still opened by click (not taken for a vertex's).
    clickSvg($(el3, 'path.fe[data-key="cart-db"]'));
    expect(new URLSearchParams(location.search).get('edge')).toBe('cart-db');
  });

  it('asks for an owner once typing pauses, not at every key', async () => {
    const calls = fakeApi({ 'GET /api/v1/flows': () => [200, answer] });
    const el = page('admin', '/flows');
    await waitFor(() => $(el, 'path.fe'));
    const box = $(el, '.flow-toolbar input[type=search]') as HTMLInputElement;
    for (const v of ['c', 'ca', 'car', 'cart']) type(box, v);
    expect(new URLSearchParams(location.search).has('owner')).toBe(false);
    await waitFor(() => expect(new URLSearchParams(location.search).get('owner')).toBe('cart'));
    const el2 = page('admin', location.pathname + location.search);
    await waitFor(() => $(el2, 'path.fe'));
    expect(calls.map((c) => c.url.searchParams.get('owner'))).toEqual([null, 'cart']);
    expect(($(el2, '.flow-toolbar input[type=search]') as HTMLInputElement).value).toBe('cart');
  });

  it('explains an empty map and an error', async () => {
    fakeApi({ 'GET /api/v1/flows': () => [200, graph([], [])] });
    const el = page('admin', '/flows');
    await waitFor(() => expect(el.textContent).toContain('No flow was reported in this window'));
    fakeApi({ 'GET /api/v1/flows': () => [400, { error: { code: 'bad_request', message: 'label: want key=value' } }] });
    const el2 = page('admin', '/flows?owner=x');
    await waitFor(() => expect($(el2, '[role=alert]').textContent).toContain('label: want key=value'));
  });
});
