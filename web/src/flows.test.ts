import { describe, expect, it } from 'vitest';
import { addressEnd, edge, owner, ownerEnd, synthetic } from './flowfixture';
import {
  FLOW_MAX_PAGE,
  FLOW_PAGE,
  GRAPH_MAX_EDGES,
  edgeResets,
  endName,
  endTreeHref,
  flowFiltersFrom,
  flowParams,
  flowsHref,
  flowsQuery,
  layoutGraph,
  ownerIndex,
  serverName,
  sortEdges,
} from './flows';
import { parseRoute } from './route';

const cart = owner('n1', 'pod:shop.cart-1', 'shop/cart-1', 'shop');
const db = owner('n2', 'pod:shop.db-0', 'shop/db-0', 'shop');
const api = owner('n3', 'pod:web.api-1', 'web/api-1', 'web');
const owners = ownerIndex([cart, db, api]);

describe('flow URL state', () => {
  it.each([
    ['', ''],
    ['owner=cart&namespace=shop&label=customer%3Dacme&label=rack%3Dr1&sort=traffic', ''],
    ['range=6h&at=2026-11-29T10%3A00%3A00.000Z&view=table&tsort=rtt&tdir=asc&edge=k1', ''],
    ['from=2026-11-29T09%3A00%3A00.000Z&to=2026-11-29T10%3A00%3A00.000Z&cursor=abc&limit=2000', ''],
    ['tenant=acme', ''],
    ['vertex=n1%7Cpod%3Ashop.cart-1&owner=cart', ''],
  ])('round-trips %s', (search, _) => {
    const f = flowFiltersFrom(new URLSearchParams(search));
    const sorted = (p: URLSearchParams) => [...p].map(([k, v]) => `${k}=${v}`).sort();
    expect(sorted(flowParams(f))).toEqual(sorted(new URLSearchParams(search)));
    expect(flowFiltersFrom(flowParams(f))).toEqual(f);
  });

  it('reads bad values as the defaults, and caps the page', () => {
    const f = flowFiltersFrom(new URLSearchParams('sort=bogus&limit=-3&view=pie&tsort=nope&label=novalue&at=never&range=x'));
    expect(f).toMatchObject({ sort: 'worst', limit: FLOW_PAGE, view: 'graph', tsort: null, labels: [], at: null });
    expect(f.range).toMatchObject({ kind: 'relative', last: '1h' });
    expect(flowFiltersFrom(new URLSearchParams('limit=999999')).limit).toBe(FLOW_MAX_PAGE);
  });

  it('asks the collector for the window, the filters and the page', () => {
    const f = flowFiltersFrom(new URLSearchParams('owner=%20cart%20&namespace=shop&label=a%3Db&tenant=acme&sort=traffic&range=6h&at=1764400000000&cursor=c2'));
    const q = flowsQuery(f, true);
    expect(Object.fromEntries(q)).toEqual({ window: '6h', at: '2025-11-29T07:06:40.000Z', tenant: 'acme', label: 'a=b', namespace: 'shop', owner: 'cart', sort: 'traffic', limit: String(FLOW_PAGE), cursor: 'c2' });
    // A customer never sends a tenant: the collector scopes it (and refuses one).
    expect(flowsQuery(f, false).has('tenant')).toBe(false);
    const abs = flowsQuery(flowFiltersFrom(new URLSearchParams('from=2026-11-29T09:00:00Z&to=2026-11-29T10:00:00Z&at=2026-11-29T08:00:00Z')), false);
    expect(abs.get('from')).toBe('2026-11-29T09:00:00.000Z');
    expect(abs.get('to')).toBe('2026-11-29T10:00:00.000Z');
    expect(abs.has('window') || abs.has('at')).toBe(false);
    expect(flowsQuery(flowFiltersFrom(new URLSearchParams('range=90m')), false).get('window')).toBe('90m');
    // A vertex clicked is asked for exactly, as its key or address.
    expect(flowsQuery(flowFiltersFrom(new URLSearchParams('vertex=n1%7Cpod%3Ashop.cart-1')), false).get('vertex')).toBe('n1|pod:shop.cart-1');
    expect(flowsQuery(flowFiltersFrom(new URLSearchParams('')), false).has('vertex')).toBe(false);
  });
});

describe('the /flows route', () => {
  it('is a page of its own, its query its params', () => {
    const r = parseRoute('/flows/', '?owner=cart&view=table');
    expect(r.page).toBe('flows');
    expect(r.params.get('owner')).toBe('cart');
    expect(flowsHref(new URLSearchParams('edge=k 1'))).toBe('/flows?edge=k+1');
    expect(flowsHref()).toBe('/flows');
  });
});

describe('flow names', () => {
  it('names owners by name and everything else only by what the collector gave', () => {
    expect(endName(ownerEnd(cart, '10.0.0.1'), owners)).toBe('shop/cart-1');
    expect(serverName(ownerEnd(db, '10.0.0.2', 5432), owners)).toBe('shop/db-0:5432');
    expect(serverName(addressEnd('10.9.9.9', 443), owners)).toBe('10.9.9.9:443 (outside)');
    expect(serverName(addressEnd('10.9.9.9', 443, false), owners)).toBe('10.9.9.9:443');
    expect(endName({ owner: null, address: '', label: 'outside', outside: true }, owners)).toBe('outside');
    // An owner key the answer holds no owner for: its label, never a name from elsewhere.
    expect(endName({ owner: 'n9|pod:other.secret-1', address: '10.7.7.7', label: '10.7.7.7', outside: false }, owners)).toBe('10.7.7.7');
  });

  it('links an end to its node page at the metric and the map time', () => {
    const f = flowFiltersFrom(new URLSearchParams('range=6h&at=2026-11-29T10:00:00Z'));
    expect(endTreeHref({ node: 'n1', path: '/nodes/n1?at=2026-11-29T10%3A00%3A00Z' }, 'tcp_reset/sent/no_socket', f)).toBe(
      '/nodes/n1?at=2026-11-29T10%3A00%3A00Z&metric=tcp_reset%2Fsent%2Fno_socket',
    );
    expect(endTreeHref({ node: 'n 1', path: '' }, 'drops', f)).toBe('/nodes/n%201?range=6h&at=2026-11-29T10%3A00%3A00.000Z&metric=drops');
    // Never somewhere else, whatever the answer says.
    expect(endTreeHref({ node: 'n1', path: '//evil.example/nodes/x' }, undefined, f).startsWith('/nodes/n1')).toBe(true);
    expect(endTreeHref({ node: 'n1', path: 'javascript:alert(1)' }, undefined, f).startsWith('/nodes/n1')).toBe(true);
  });

  it('sorts the table by a column, stable, and keeps the collector order without one', () => {
    const a = edge('a', ownerEnd(cart, '1'), ownerEnd(db, '2', 5432), { rtt_p99_ms: 3, opened: 5 });
    const b = edge('b', ownerEnd(api, '3'), ownerEnd(db, '2', 5432), { rtt_p99_ms: null, opened: 5 });
    const c = edge('c', ownerEnd(cart, '1'), addressEnd('10.9.9.9', 443), { rtt_p99_ms: 9, opened: 7, state: 'crit', resets: { client_sent: {}, client_received: { no_socket: 4 }, server_sent: {}, server_received: {} } });
    const es = [a, b, c];
    expect(sortEdges(es, owners, null, true)).toBe(es);
    expect(sortEdges(es, owners, 'rtt', true).map((e) => e.key)).toEqual(['c', 'a', 'b']);
    expect(sortEdges(es, owners, 'opened', false).map((e) => e.key)).toEqual(['a', 'b', 'c']);
    expect(sortEdges(es, owners, 'client', false).map((e) => e.key)).toEqual(['a', 'c', 'b']);
    expect(sortEdges(es, owners, 'state', true)[0].key).toBe('c');
    expect(edgeResets(c)).toBe(4);
  });
});

describe('layoutGraph', () => {
  const es = [
    edge('api-cart', ownerEnd(api, '3'), ownerEnd(cart, '1', 8080), { state: 'warn' }),
    edge('cart-db', ownerEnd(cart, '1'), ownerEnd(db, '2', 5432), { state: 'crit' }),
    edge('cart-out', ownerEnd(cart, '1'), addressEnd('10.9.9.9', 443)),
    edge('db-db', ownerEnd(db, '2'), ownerEnd(db, '2', 5432)),
  ];

  it('puts callers left of callees, peers by their address, the worst state on a vertex', () => {
    const l = layoutGraph(es, owners);
    const at = (label: string) => l.nodes.find((n) => n.label === label)!;
    expect(at('web/api-1').x).toBeLessThan(at('shop/cart-1').x);
    expect(at('shop/cart-1').x).toBeLessThan(at('shop/db-0').x);
    expect(at('10.9.9.9:443 (outside)').outside).toBe(true);
    expect(at('shop/db-0').state).toBe('crit');
    // What a click on each asks GET /flows for (vertex=): an owner's key, a peer's address.
    expect(at('shop/cart-1').vertex).toBe(cart.key);
    expect(at('10.9.9.9:443 (outside)').vertex).toBe('10.9.9.9');
    expect(at('shop/cart-1').state).toBe('crit');
    expect(at('web/api-1').state).toBe('warn');
    expect(l.edges.map((e) => e.state)).toEqual(['warn', 'crit', 'ok', 'ok']);
    // An edge along one row bows: a straight line has no height to hover or click.
    const row = l.edges.find((e) => e.key === 'api-cart')!;
    const ys = row.d.match(/-?[\d.]+/g)!.map(Number).filter((_, i) => i % 2 === 1);
    expect(new Set(ys).size).toBeGreaterThan(1);
    expect(l.nodes).toHaveLength(4);
    expect(l.omitted).toBe(0);
  });

  it('fans out edges between the same two vertices', () => {
    const two = [
      edge('pg', ownerEnd(cart, '1'), ownerEnd(db, '2', 5432), { state: 'crit' }),
      edge('redis', ownerEnd(cart, '1'), ownerEnd(db, '2', 6379), { state: 'warn' }),
      edge('mc', ownerEnd(cart, '1'), ownerEnd(db, '2', 11211)),
    ];
    const l = layoutGraph(two, owners);
    expect(l.nodes).toHaveLength(2);
    expect(new Set(l.edges.map((e) => e.d)).size).toBe(3);
    expect(new Set(l.edges.map((e) => e.my)).size).toBe(3);
  });

  it('is deterministic: the same answer, the same picture', () => {
    const g = synthetic(400, 3000);
    const o = ownerIndex(g.owners);
    const a = layoutGraph(g.edges, o);
    const b = layoutGraph(structuredClone(g.edges), ownerIndex(structuredClone(g.owners)));
    expect(b).toEqual(a);
  });

  it('is bounded: at most maxEdges drawn, every vertex inside the picture, none on another', () => {
    const g = synthetic(5000, 50000);
    const t0 = performance.now();
    const l = layoutGraph(g.edges, ownerIndex(g.owners));
    const ms = performance.now() - t0;
    expect(l.edges).toHaveLength(GRAPH_MAX_EDGES);
    expect(l.omitted).toBe(50000 - GRAPH_MAX_EDGES);
    expect(l.nodes.length).toBeLessThanOrEqual(2 * GRAPH_MAX_EDGES);
    const seen = new Set<string>();
    for (const n of l.nodes) {
      expect(n.x).toBeGreaterThan(0);
      expect(n.y).toBeGreaterThan(0);
      expect(n.x).toBeLessThan(l.width);
      expect(n.y).toBeLessThan(l.height);
      const p = `${n.x},${n.y}`;
      expect(seen.has(p)).toBe(false);
      seen.add(p);
    }
    for (const e of l.edges) expect(e.d).not.toMatch(/NaN|Infinity|undefined/);
    // A column never holds more than maxRows (40) rows.
    expect(l.height).toBeLessThanOrEqual(16 * 2 + 40 * 26);
    // Generous: it is a few tens of ms; a quadratic slip would take seconds.
    expect(ms).toBeLessThan(1500);
    expect(layoutGraph(g.edges, ownerIndex(g.owners), { maxEdges: 10 }).edges).toHaveLength(10);
    expect(layoutGraph([], owners)).toMatchObject({ nodes: [], edges: [], omitted: 0 });
  });

  it('folds long chains and cycles into the last layer', () => {
    const chain = Array.from({ length: 12 }, (_, i) => owner('n', `pod:c.p${i}`, `c/p${i}`, 'c'));
    const o = ownerIndex(chain);
    const links = chain.map((c, i) => edge(`l${i}`, ownerEnd(c, `${i}`), ownerEnd(chain[(i + 1) % chain.length], `${i + 1}`, 80)));
    const l = layoutGraph(links, o, { maxLayers: 5, colWidth: 100 });
    const xs = new Set(l.nodes.map((n) => n.x));
    expect(xs.size).toBeLessThanOrEqual(5);
    expect(l.edges).toHaveLength(12);
  });
});
