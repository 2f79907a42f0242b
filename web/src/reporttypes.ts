// The report API (issue 10) as /work/briefs/report-contract.md describes its
// JSON. Written by hand while openapi.json does not describe these routes;
// when it does, replace the bodies with aliases of the generated schemas (as
// api.ts does). Times are RFC3339 UTC, durations ms; a field with no data is
// null, never 0.
import type { Selector } from './access';

/** A count or value that may be missing: null means no data, never zero. */
export type Num = number | null;

export type ReportPeriodName = '1d' | '7d' | '30d' | 'this_week' | 'last_week' | 'this_month' | 'last_month' | 'custom';

export interface ReportPeriod {
  from: string;
  to: string;
  previous_from: string;
  previous_to: string;
}

export interface PingPrevious {
  p50_ms?: Num;
  p99_ms?: Num;
  loss?: Num;
  sent?: Num;
  lost?: Num;
}

export interface PingTarget {
  target: string;
  nodes: string[];
  /** How many nodes ping the target, and each one's numbers to it (the drill-down). */
  node_count?: number;
  per_node?: PingNode[];
  p50_ms: Num;
  p90_ms: Num;
  p99_ms: Num;
  max_ms: Num;
  sent: Num;
  lost: Num;
  loss: Num;
  host_delay_p50_ms: Num;
  host_delay_p99_ms: Num;
  previous?: PingPrevious | null;
}

export interface PingNode {
  node: string;
  p50_ms: Num;
  p99_ms: Num;
  max_ms: Num;
  sent: Num;
  lost: Num;
  loss: Num;
  p90_ms: Num;
  host_delay_p50_ms: Num;
  host_delay_p99_ms: Num;
}

export interface PingPoint {
  t: string;
  p50_ms: Num;
  p99_ms: Num;
  loss: Num;
}

export interface PingSeries {
  target: string;
  points: PingPoint[];
}

export interface KernelLatency {
  metric: string;
  title: string;
  unit: string;
  p50: Num;
  p90: Num;
  p99: Num;
  max: Num;
  count: Num;
  previous?: { p50?: Num; p99?: Num; count?: Num } | null;
  series: { t: string; p50: Num; p99: Num }[];
}

export interface ResetRow {
  metric: string;
  reason: string;
  direction: string;
  count: Num;
  per_hour: Num;
}

export interface DropRow {
  metric: string;
  reason: string;
  count: Num;
  per_hour: Num;
}

export interface Retransmits {
  segments: Num;
  per_1000_segments: Num;
  per_second: Num;
  rtos: Num;
  rtos_per_second: Num;
}

export interface Reliability {
  resets: ResetRow[];
  retransmits: Retransmits | null;
  drops: DropRow[];
  previous?: { resets?: Num; retransmits?: Num; drops?: Num } | null;
}

export interface Availability {
  node: string;
  root: string;
  ok: Num;
  warn: Num;
  crit: Num;
  no_data: Num;
}

export interface Incident {
  node: string;
  root: string;
  state: string;
  start: string;
  end: string | null;
  seconds: Num;
  /** The metric worst_value is of (the explaining child, else the root), in unit. */
  metric?: string;
  worst_value: Num;
  unit?: string;
  child: string | null;
  tree_url: string;
}

export interface AvailabilityPoint {
  t: string;
  ok: number;
  warn: number;
  crit: number;
  no_data: number;
}

/** One root's state over the nodes in scope, per day (per hour up to 2 days). */
export interface AvailabilityRoot {
  root: string;
  step_seconds: number;
  points: AvailabilityPoint[];
}

export interface ObjectiveResult {
  name: string;
  attainment: Num;
  hours: Num;
  missed: string[];
}

export interface Report {
  period: ReportPeriod;
  scope: { selector: Selector; nodes: string[] };
  error_bound: Num;
  generated_at: string;
  /** When the data of the period starts, to the minute for periods up to two days; null: none at all. Older collectors: absent. */
  data_from?: string | null;
  ping: { targets: PingTarget[]; per_node: PingNode[]; series: PingSeries[] };
  kernel_latency: KernelLatency[];
  reliability: Reliability;
  availability: Availability[];
  availability_timeline?: AvailabilityRoot[];
  incidents: Incident[];
  objectives: ObjectiveResult[];
}

export interface Objective {
  name: string;
  metric: string;
  quantile: number;
  below_ms: number;
  per: string;
}

/** A saved report definition; its stable URL in the UI is /reports/{id}. */
export interface ReportDefinition {
  id: number;
  name: string;
  selector: Selector;
  period: ReportPeriodName;
  from: string | null;
  to: string | null;
  targets: string[];
  objectives: Objective[];
  /** Who saved it; staff only (a customer's answers leave it out). */
  created_by?: string;
  created_at: string;
}

/** What POST /report-definitions and PUT /report-definitions/{id} take. */
export type ReportDefinitionInput = Omit<ReportDefinition, 'id' | 'created_by' | 'created_at'>;
