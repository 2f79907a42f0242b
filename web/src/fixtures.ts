// Realistic API bodies, shaped like the collector's answers.
import type { Alert, AlertRule, NodeSummary, State, Threshold, TreeNode } from './api';

const th: Threshold = { warn: 1, crit: 10, comparison: 'above', hold_intervals: 1 };

export function leaf(id: string, state: State = 'ok', value = 0): TreeNode {
  return { id, title: id.split('/').pop()!, unit: 'resets/s', kind: 'rate', description: `About ${id}.`, value, count: value * 2, state, own_state: state, threshold: th, children: [] };
}

export function branch(id: string, children: TreeNode[], own: State = 'ok'): TreeNode {
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

export function node(name: string, state: State, labels: Record<string, string> = {}, extra: Partial<NodeSummary> = {}): NodeSummary {
  return {
    name,
    labels,
    state,
    connected: true,
    clock_offset_ms: null,
    clock_skewed: false,
    stale: false,
    last_report: new Date().toISOString(),
    interval_ms: 10000,
    agent_version: 'test',
    kernel_release: '6.18',
    capabilities: [],
    roots: [{ ...leaf('tcp_reset', state, state === 'ok' ? 0 : 12), title: 'TCP resets', children: null }],
    tenant: labels.customer ?? '',
    ...extra,
  };
}

const iso = (msAgo: number) => new Date(Date.now() - msAgo).toISOString();

/** An alert as GET /api/v1/alerts serves it: NBSRootCritical firing on lab-b by default. */
export function alert(id: number, extra: Partial<Alert> = {}): Alert {
  const state = extra.state ?? 'firing';
  return {
    id,
    fingerprint: `fp${id}`,
    rule_id: 1,
    rule: 'NBSRootCritical',
    kind: 'node',
    severity: 'critical',
    state,
    node: 'lab-b',
    root: 'tcp_reset',
    metric: 'tcp_reset',
    child: 'tcp_reset/sent/no_socket',
    since: iso(90_000),
    starts_at: state === 'pending' ? null : iso(88_000),
    ends_at: state === 'resolved' ? iso(30_000) : null,
    value: state === 'pending' ? null : 23.5,
    summary: state === 'pending' ? '' : 'tcp_reset is CRIT on lab-b: tcp_reset/sent/no_socket at 23.5 resets/s',
    description: state === 'pending' ? '' : 'tcp_reset/sent/no_socket (No socket) is CRIT at 23.5 resets/s, against thresholds warn 1 resets/s and crit 10 resets/s (above).',
    tree_url: 'http://nbs.test/nodes/lab-b?metric=tcp_reset%2Fsent%2Fno_socket',
    labels: state === 'pending' ? {} : { alertname: 'NBSRootCritical', severity: 'critical', node: 'lab-b', root: 'tcp_reset', metric: 'tcp_reset/sent/no_socket', customer: 'acme' },
    annotations: state === 'pending' ? {} : { summary: 'tcp_reset is CRIT on lab-b', value: '23.5', threshold: 'warn 1, crit 10', tree_url: 'http://nbs.test/nodes/lab-b?metric=tcp_reset%2Fsent%2Fno_socket' },
    acknowledged_at: null,
    silenced_until: null,
    ...extra,
  };
}

export const evaluator = { holder: 'collector-1 pid 42 http://nbs.test', epoch: 3, since: iso(600_000), heartbeat: iso(500) };

/** An alert rule as GET /api/v1/alert-rules serves it. */
export function rule(id: number, name: string, extra: Partial<AlertRule> = {}): AlertRule {
  return {
    id,
    name,
    kind: 'node',
    metric: '*',
    state: 'crit',
    for_intervals: 2,
    severity: 'critical',
    selector: {},
    labels: {},
    enabled: true,
    builtin: false,
    created_at: iso(3_600_000),
    updated_at: iso(3_600_000),
    ...extra,
  };
}
