// Flow map answers for tests and the render benchmark: edges as GET /flows
// sends them, and a synthetic map of any size (deterministic: the same
// arguments give the same map).
import type { FlowEdge, FlowEnd, FlowGraph, FlowOwner } from './api';

export function owner(node: string, id: string, name: string, namespace = ''): FlowOwner {
  return { key: `${node}|${id}`, node, id, kind: id.split(':')[0] || 'unknown', name, workload: name.replace(/-[^-/]+$/, ''), namespace };
}

export function ownerEnd(o: FlowOwner, address: string, port?: number): FlowEnd {
  return { owner: o.key, address, label: port ? `${o.name}` : o.name, outside: false, ...(port ? { port } : {}) };
}

/** An end that is only an address: outside the tenant (or its owner unknown). */
export function addressEnd(address: string, port?: number, outside = true): FlowEnd {
  return { owner: null, address, label: port ? `${address}:${port}` : address, outside, ...(port ? { port } : {}) };
}

export function edge(key: string, client: FlowEnd, server: FlowEnd, extra: Partial<FlowEdge> = {}): FlowEdge {
  return {
    key,
    client,
    server,
    seen_by: ['client', 'server'],
    opened: 10,
    failed: 0,
    closed: 10,
    retransmits: 0,
    resets: { client_sent: {}, client_received: {}, server_sent: {}, server_received: {} },
    drops: { client: {}, server: {} },
    bytes_client_to_server: 1000,
    bytes_server_to_client: 5000,
    rtt_p50_ms: 0.2,
    rtt_p99_ms: 1.5,
    state: 'ok',
    explain: '',
    ...extra,
  };
}

export function graph(owners: FlowOwner[], edges: FlowEdge[], extra: Partial<FlowGraph> = {}): FlowGraph {
  return {
    from: '2026-11-29T11:00:00Z',
    to: '2026-11-29T12:00:00Z',
    resolution: 'minute',
    owners,
    edges,
    other: { edges_folded: 0, opened: 0, failed: 0, retransmits: 0, resets: 0, drops: 0, bytes: 0, nodes_capped: 0, holders_left_out: 0 },
    total_edges: edges.length,
    next_cursor: null,
    ...extra,
  };
}

/**
 * A synthetic map: nOwners owners on nodes of 50, in 20 namespaces, and
 * nEdges edges among them (every 40th to an outside address), every 97th
 * CRIT and every 13th WARN, worst first as the collector sorts them.
 */
export function synthetic(nOwners: number, nEdges: number): FlowGraph {
  const owners: FlowOwner[] = [];
  for (let i = 0; i < nOwners; i++) owners.push(owner(`n${Math.floor(i / 50)}`, `pod:ns${i % 20}.app${i}`, `ns${i % 20}/app-${i}`, `ns${i % 20}`));
  const edges: FlowEdge[] = [];
  // A fixed LCG: the same map every time.
  let seed = 12345;
  const rnd = (n: number) => {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    return seed % n;
  };
  for (let i = 0; i < nEdges; i++) {
    const c = owners[rnd(nOwners)];
    const sIdx = (owners.indexOf(c) + 1 + rnd(Math.max(1, nOwners - 1))) % nOwners;
    const s = owners[sIdx];
    const server = i % 40 === 39 ? addressEnd(`203.0.113.${i % 250}`, 443) : ownerEnd(s, `10.${sIdx >> 8}.${sIdx & 255}.1`, 8080);
    const state = i % 97 === 0 ? 'crit' : i % 13 === 0 ? 'warn' : 'ok';
    edges.push(
      edge(`e${i}`, ownerEnd(c, `10.1.${i & 255}.2`), server, {
        state,
        explain: state === 'crit' ? `${12 + (i % 7)} resets sent by the server (no_socket) in 5 min` : state === 'warn' ? `${1 + (i % 3)} drops at the client (netfilter)` : '',
        resets: { client_sent: {}, client_received: state === 'crit' ? { no_socket: 12 } : {}, server_sent: state === 'crit' ? { no_socket: 12 } : {}, server_received: {} },
        opened: 1 + (i % 50),
      }),
    );
  }
  const rank = { crit: 0, warn: 1, ok: 2 } as Record<string, number>;
  edges.sort((a, b) => rank[a.state] - rank[b.state] || Number(a.key.slice(1)) - Number(b.key.slice(1)));
  const used = new Set(edges.flatMap((e) => [e.client.owner, e.server.owner]).filter(Boolean));
  return graph(owners.filter((o) => used.has(o.key)), edges, { total_edges: nEdges });
}
