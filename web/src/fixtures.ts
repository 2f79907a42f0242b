// Realistic API bodies, shaped like the collector's answers.
import type { NodeSummary, TreeNode } from './api';

const th = { warn: 1, crit: 10, comparison: 'above', hold_intervals: 1 };

export function leaf(id: string, state = 'ok', value = 0): TreeNode {
  return { id, title: id.split('/').pop()!, unit: 'resets/s', kind: 'rate', description: `About ${id}.`, value, count: value * 2, state, own_state: state, threshold: th, children: [] };
}

export function branch(id: string, children: TreeNode[], own = 'ok'): TreeNode {
  const sev: Record<string, number> = { ok: 0, unknown: 1, warn: 2, crit: 3 };
  const state = children.reduce((w, c) => (sev[c.state] > sev[w] ? c.state : w), own);
  const value = children.reduce((s, c) => s + (c.value ?? 0), 0);
  return { ...leaf(id, state, value), own_state: own, threshold: null, children };
}

/** tcp_reset with sent/no_socket CRIT, received/syn_sent WARN. */
export function resetTree(): TreeNode[] {
  return [
    branch('tcp_reset', [
      branch('tcp_reset/received', [leaf('tcp_reset/received/established'), leaf('tcp_reset/received/syn_sent', 'warn', 5)]),
      branch('tcp_reset/sent', [leaf('tcp_reset/sent/no_socket', 'crit', 20), leaf('tcp_reset/sent/tcp_state')]),
    ]),
    branch('latency', [leaf('latency/rto')]),
  ];
}

export function node(name: string, state: string, labels: Record<string, string> = {}, extra: Partial<NodeSummary> = {}): NodeSummary {
  return {
    name,
    labels,
    state,
    connected: true,
    stale: false,
    last_report: new Date().toISOString(),
    interval_ms: 10000,
    agent_version: 'test',
    kernel_release: '6.18',
    capabilities: [],
    roots: [{ ...leaf('tcp_reset', state, state === 'ok' ? 0 : 12), title: 'TCP resets', children: null }],
    ...extra,
  };
}
