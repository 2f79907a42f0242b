// A report as the contract (issue 10) describes it: two nodes of customer
// acme, one ping target with a gap in its series, one kernel stage, resets,
// drops, availability with time without data, one incident and one objective.
import type { Report } from './reporttypes';

export function acmeReport(): Report {
  return {
    period: { from: '2026-11-18T00:00:00Z', to: '2026-11-25T00:00:00Z', previous_from: '2026-11-11T00:00:00Z', previous_to: '2026-11-18T00:00:00Z' },
    scope: { selector: { customer: 'acme' }, nodes: ['acme-1', 'acme-2'] },
    error_bound: 0.0303,
    generated_at: '2026-11-25T00:00:05Z',
    ping: {
      targets: [
        {
          target: 'peer:acme-2',
          nodes: ['acme-1'],
          node_count: 1,
          per_node: [{ node: 'acme-1', p50_ms: 0.41, p90_ms: 0.6, p99_ms: 1.2, max_ms: 3.1, sent: 86400, lost: 12, loss: 0.000139, host_delay_p50_ms: 0.02, host_delay_p99_ms: 0.3 }],
          p50_ms: 0.41,
          p90_ms: 0.6,
          p99_ms: 1.2,
          max_ms: 3.1,
          sent: 86400,
          lost: 12,
          loss: 0.000139,
          host_delay_p50_ms: 0.02,
          host_delay_p99_ms: 0.3,
          previous: { p50_ms: 0.4, p99_ms: 1.5, loss: 0.0001, sent: 86400, lost: 9 },
        },
      ],
      per_node: [{ node: 'acme-1', p50_ms: 0.41, p90_ms: 0.61, p99_ms: 1.2, max_ms: 3.1, sent: 86400, lost: 12, loss: 0.000139, host_delay_p50_ms: 0.021, host_delay_p99_ms: 0.31 }],
      series: [
        {
          target: 'peer:acme-2',
          points: [
            { t: '2026-11-18T00:00:00Z', p50_ms: 0.4, p99_ms: 1.1, loss: 0 },
            { t: '2026-11-18T01:00:00Z', p50_ms: 0.42, p99_ms: 1.3, loss: 0.001 },
            { t: '2026-11-18T02:00:00Z', p50_ms: null, p99_ms: null, loss: null },
            { t: '2026-11-18T03:00:00Z', p50_ms: 0.41, p99_ms: 1.2, loss: 0 },
            // 04:00 to 06:00 absent altogether: a gap
            { t: '2026-11-18T07:00:00Z', p50_ms: 0.39, p99_ms: 1.0, loss: 0 },
          ],
        },
      ],
    },
    kernel_latency: [
      {
        metric: 'latency/tx/sendmsg_to_qdisc',
        title: 'sendmsg → qdisc',
        unit: 'us',
        p50: 12,
        p90: 20,
        p99: 45,
        max: 300,
        count: 123456,
        previous: { p50: 12, p99: 40, count: 120000 },
        // One lone hour with data, nothing around it.
        series: [
          { t: '2026-11-18T00:00:00Z', p50: null, p99: null },
          { t: '2026-11-18T01:00:00Z', p50: 13, p99: 46 },
          { t: '2026-11-18T02:00:00Z', p50: null, p99: null },
        ],
      },
    ],
    reliability: {
      resets: [{ metric: 'tcp_reset/sent/no_socket', reason: 'no_socket', direction: 'sent', count: 40, per_hour: 1.7 }],
      retransmits: { segments: 120, per_1000_segments: 0.4, per_second: 0.001, rtos: 3, rtos_per_second: 0.00003 },
      drops: [{ metric: 'drops/netfilter_drop', reason: 'netfilter_drop', count: 200, per_hour: 8.3 }],
      previous: { resets: 31, retransmits: 100, drops: 150 },
    },
    availability: [
      { node: 'acme-1', root: 'ping', ok: 0.98, warn: 0.01, crit: 0.005, no_data: 0.005 },
      { node: 'acme-2', root: 'ping', ok: null, warn: null, crit: null, no_data: 1 },
    ],
    availability_timeline: [
      {
        root: 'ping',
        step_seconds: 86400,
        points: [
          { t: '2026-11-18T00:00:00Z', ok: 0.5, warn: 0, crit: 0, no_data: 0.5 },
          { t: '2026-11-19T00:00:00Z', ok: 0.45, warn: 0.03, crit: 0.02, no_data: 0.5 },
          { t: '2026-11-20T00:00:00Z', ok: 0.5, warn: 0, crit: 0, no_data: 0.5 },
          { t: '2026-11-21T00:00:00Z', ok: 0.5, warn: 0, crit: 0, no_data: 0.5 },
          { t: '2026-11-22T00:00:00Z', ok: 0.5, warn: 0, crit: 0, no_data: 0.5 },
          { t: '2026-11-23T00:00:00Z', ok: 0.5, warn: 0, crit: 0, no_data: 0.5 },
          { t: '2026-11-24T00:00:00Z', ok: 0.5, warn: 0, crit: 0, no_data: 0.5 },
        ],
      },
    ],
    incidents: [
      {
        node: 'acme-1',
        root: 'tcp_reset',
        state: 'crit',
        start: '2026-11-20T13:05:00Z',
        end: '2026-11-20T13:07:00Z',
        seconds: 120,
        metric: 'tcp_reset/sent/no_socket',
        worst_value: 40.5,
        unit: 'resets/s',
        child: 'tcp_reset/sent/no_socket',
        tree_url: '/nodes/acme-1?at=1795698300000&metric=tcp_reset%2Fsent%2Fno_socket',
      },
    ],
    objectives: [{ name: 'ping p99 < 5 ms per hour', attainment: 0.99, hours: 168, missed: ['2026-11-20T13:00:00Z'] }],
  };
}
