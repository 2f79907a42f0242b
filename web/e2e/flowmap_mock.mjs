// A stand-in for the collector's flow API, serving the built UI (dist/)
// beside GET /api/v1/flows and /flows/edge answered from a synthetic map.
// For the render benchmark (flowmap_bench.mjs) and for trying the page's
// checks (flowmap.mjs) without a collector; the real test is
// flowmap_test.go against the real collector. It measures the page, not the
// API: the API's own figures are flowstore's benchmark.
//
//   node e2e/flowmap_mock.mjs 7790 5000 50000   # port, owners, edges
import { readFileSync, existsSync, statSync } from 'node:fs';
import { createServer } from 'node:http';
import { extname, join, resolve } from 'node:path';

const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css', '.svg': 'image/svg+xml', '.png': 'image/png', '.ico': 'image/x-icon' };

const owner = (node, id, name, namespace) => ({ key: `${node}|${id}`, node, id, kind: id.split(':')[0], name, workload: name.replace(/-[^-/]+$/, ''), namespace });
const ownerEnd = (o, address, port) => ({ owner: o.key, address, label: o.name, outside: false, ...(port ? { port } : {}) });
const addressEnd = (address, port) => ({ owner: null, address, label: port ? `${address}:${port}` : address, outside: true, ...(port ? { port } : {}) });
const noReasons = () => ({ client_sent: {}, client_received: {}, server_sent: {}, server_received: {} });
const edge = (key, client, server, extra = {}) => ({
  key, client, server, seen_by: ['client', 'server'], opened: 10, failed: 0, closed: 10, retransmits: 0,
  resets: noReasons(), drops: { client: {}, server: {} }, bytes_client_to_server: 1000, bytes_server_to_client: 5000,
  rtt_p50_ms: 0.2, rtt_p99_ms: 1.5, state: 'ok', explain: '', ...extra,
});

/**
 * The map: three named edges first (a CRIT between two pods, a WARN, an
 * outside peer), then synthetic ones among nOwners owners, worst first; the
 * same arguments give the same map.
 */
export function synthMap(nOwners, nEdges) {
  const cart = owner('shop-a', 'pod:shop.cart-1', 'shop/cart-1', 'shop');
  const db = owner('shop-b', 'pod:shop.db-0', 'shop/db-0', 'shop');
  const owners = [cart, db];
  for (let i = 0; owners.length < nOwners; i++) owners.push(owner(`n${Math.floor(i / 50)}`, `pod:ns${i % 20}.app-${i}`, `ns${i % 20}/app-${i}`, `ns${i % 20}`));
  const edges = [
    edge('cart-db', ownerEnd(cart, '10.60.0.11'), ownerEnd(db, '10.60.0.21', 5432), {
      state: 'crit', explain: '40 resets sent by the server (no_socket) in 5 min', opened: 30,
      resets: { client_sent: {}, client_received: { no_socket: 40 }, server_sent: { no_socket: 40 }, server_received: {} },
    }),
    edge('cart-cache', ownerEnd(cart, '10.60.0.11'), ownerEnd(db, '10.60.0.21', 6379), {
      state: 'warn', explain: '2 drops at the client (netfilter) in 5 min', drops: { client: { netfilter: 2 }, server: {} },
    }),
    edge('cart-out', ownerEnd(cart, '10.60.0.11'), addressEnd('203.0.113.9', 443), { opened: 50 }),
  ];
  let seed = 12345;
  const rnd = (n) => {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    return seed % n;
  };
  for (let i = edges.length; i < nEdges; i++) {
    const ci = 2 + rnd(nOwners - 2);
    const si = 2 + ((ci - 2 + 1 + rnd(nOwners - 3)) % (nOwners - 2));
    const server = i % 40 === 39 ? addressEnd(`203.0.113.${i % 250}`, 443) : ownerEnd(owners[si], `10.${si >> 8}.${si & 255}.1`, 8080);
    const state = i % 97 === 0 ? 'crit' : i % 13 === 0 ? 'warn' : 'ok';
    edges.push(
      edge(`e${i}`, ownerEnd(owners[ci], `10.1.${i & 255}.2`), server, {
        state,
        explain: state === 'crit' ? `${12 + (i % 7)} resets sent by the server (no_socket) in 5 min` : state === 'warn' ? `${1 + (i % 3)} retransmits per 100 segments in 5 min` : '',
        opened: 1 + (i % 50),
        rtt_p99_ms: i % 11 === 0 ? null : 0.5 + (i % 30) / 10,
      }),
    );
  }
  const rank = { crit: 0, warn: 1, ok: 2 };
  const order = new Map(edges.map((e, i) => [e.key, i]));
  edges.sort((a, b) => rank[a.state] - rank[b.state] || order.get(a.key) - order.get(b.key));
  return { owners: new Map(owners.map((o) => [o.key, o])), edges };
}

function page(map, q) {
  const limit = Math.min(5000, Math.max(1, Number(q.get('limit') ?? 500) || 500));
  const from = Number(q.get('cursor') ?? 0) || 0;
  // vertex=, as the collector: an end is this owner's key, or this address without an owner.
  const v = q.get('vertex');
  const all = v ? map.edges.filter((e) => [e.client, e.server].some((x) => (x.owner ? x.owner === v : x.address === v))) : map.edges;
  const edges = all.slice(from, from + limit);
  const keys = new Set(edges.flatMap((e) => [e.client.owner, e.server.owner]).filter(Boolean));
  const to = new Date();
  return {
    from: new Date(to.getTime() - 3600e3).toISOString(),
    to: to.toISOString(),
    resolution: 'minute',
    owners: [...keys].map((k) => map.owners.get(k)),
    edges,
    other: { edges_folded: 120, opened: 900, failed: 3, retransmits: 12, resets: 4, drops: 1, bytes: 1234567, nodes_capped: 3, holders_left_out: 0 },
    total_edges: all.length,
    next_cursor: from + limit < all.length ? String(from + limit) : null,
  };
}

function detail(map, key) {
  const e = map.edges.find((x) => x.key === key);
  if (!e) return null;
  const ends = [e.client, e.server].filter((x) => x.owner).map((x) => map.owners.get(x.owner));
  const now = Math.floor(Date.now() / 60000) * 60000;
  const series = Array.from({ length: 60 }, (_, i) => ({ t: new Date(now - (60 - i) * 60000).toISOString(), opened: i % 5, failed: 0, resets: e.state === 'crit' ? 40 : 0, drops: 0, retransmits: i % 3, rtt_p99_ms: 1 + (i % 7) / 10 }));
  const at = encodeURIComponent(new Date(now).toISOString());
  const link = (end, x) => x.owner && { end, node: map.owners.get(x.owner).node, path: `/nodes/${map.owners.get(x.owner).node}?at=${at}`, metrics: e.state === 'crit' ? [end === 'server' ? 'tcp_reset/sent/no_socket' : 'tcp_reset/received/no_socket'] : ['latency'] };
  return {
    from: new Date(now - 3600e3).toISOString(), to: new Date(now).toISOString(), resolution: 'minute', edge: e, owners: ends, series,
    links: {
      tree: [link('client', e.client), link('server', e.server)].filter(Boolean),
      evidence: e.server.owner ? [{ end: 'server', node: map.owners.get(e.server.owner).node, path: `/api/v1/nodes/${map.owners.get(e.server.owner).node}/events?metric=tcp_reset` }] : [],
    },
  };
}

/** Starts the stand-in on port (0: any); resolves to its base URL and a close. */
export function startMock({ port = 0, owners = 5000, edges = 50000, dist = resolve('dist') } = {}) {
  const map = synthMap(owners, edges);
  const json = (res, code, body) => {
    res.writeHead(code, { 'Content-Type': 'application/json' });
    res.end(JSON.stringify(body));
  };
  const server = createServer((req, res) => {
    const u = new URL(req.url, 'http://mock');
    if (u.pathname === '/api/v1/whoami') {
      if (req.headers['x-mock-role'] === 'customer') return json(res, 200, { name: 'acme-viewer', role: 'customer', via: 'session', mode: 'token', selector: { customer: 'acme' } });
      return json(res, 404, { error: { code: 'not_found', message: 'no API route GET /api/v1/whoami' } });
    }
    if (u.pathname === '/api/v1/flows') return json(res, 200, page(map, u.searchParams));
    if (u.pathname === '/api/v1/flows/edge') {
      const d = detail(map, u.searchParams.get('key'));
      return d ? json(res, 200, d) : json(res, 404, { error: { code: 'not_found', message: 'no such edge in this window' } });
    }
    if (u.pathname.startsWith('/api/')) return json(res, 404, { error: { code: 'not_found', message: `no API route GET ${u.pathname}` } });
    let f = join(dist, u.pathname);
    if (!f.startsWith(dist) || !existsSync(f) || statSync(f).isDirectory()) f = join(dist, 'index.html');
    res.writeHead(200, { 'Content-Type': TYPES[extname(f)] ?? 'application/octet-stream' });
    res.end(readFileSync(f));
  });
  return new Promise((ok) => server.listen(port, '127.0.0.1', () => ok({ base: `http://127.0.0.1:${server.address().port}`, close: () => server.close() })));
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const [port, owners, edges] = process.argv.slice(2).map(Number);
  const m = await startMock({ port: port || 7790, owners: owners || 5000, edges: edges || 50000 });
  console.log(`flow map stand-in at ${m.base}/flows`);
}
