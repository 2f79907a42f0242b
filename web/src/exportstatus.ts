// The export page's judgements on GET /api/v1/export/status: whether each
// kind of export overflowed its caps, each push receiver's health, and the
// scrape config an operator pastes into Prometheus. Pure, so they are
// tested without a page.
import type { ExportKindStatus, ExportReceiverStatus } from './api';
import { formatWindow } from './format';

export const EXPORT_METRICS_PATH = '/api/v1/export/metrics';

/**
 * A receiver whose latest attempt failed is "failing" once its last success
 * is older than this (or it never had one): a push or two that failed and
 * were retried are not worth an operator's alarm, minutes without a delivery
 * are. Two minutes is eight of the default --export.push-interval (15s).
 */
export const FAILING_AFTER_MS = 2 * 60_000;

/** How a push receiver stands, from its pusher's report. */
export type ReceiverHealth =
  /** Delivered, and the latest attempt did not fail. */
  | { state: 'ok' }
  /** Nothing pushed yet, and nothing failed: a receiver just configured, or a collector that does not lead the pushing. */
  | { state: 'waiting' }
  /** The latest attempt failed, but a push got through recently: it is being retried. */
  | { state: 'retrying'; since: string }
  /** The latest attempt failed and nothing got through for FAILING_AFTER_MS, or ever; since: the last success (absent: never). */
  | { state: 'failing'; since?: string };

const ms = (iso: string | undefined) => {
  if (!iso) return NaN;
  return new Date(iso).getTime();
};

export function receiverHealth(r: ExportReceiverStatus, now: number): ReceiverHealth {
  const success = ms(r.last_success);
  if (!r.last_error) return Number.isNaN(success) ? { state: 'waiting' } : { state: 'ok' };
  if (Number.isNaN(success)) return { state: 'failing' };
  if (now - success > FAILING_AFTER_MS) return { state: 'failing', since: r.last_success };
  return { state: 'retrying', since: r.last_success! };
}

/** The state colour (state.ts's names) of a receiver's health. */
export const HEALTH_STATE: Record<ReceiverHealth['state'], string> = { ok: 'ok', waiting: 'unknown', retrying: 'warn', failing: 'crit' };
export const HEALTH_TEXT: Record<ReceiverHealth['state'], string> = { ok: 'Delivering', waiting: 'No push yet', retrying: 'Retrying', failing: 'Failing' };

/** The kinds whose newest export put series past a cap, worst first. */
export function overflowing(kinds: ExportKindStatus[]): ExportKindStatus[] {
  return kinds.filter((k) => k.overflowed > 0).sort((a, b) => b.overflowed - a.overflowed || a.kind.localeCompare(b.kind));
}

/** The scrape, then the receivers' kinds by name (the collector sorts them by name, scrape among them). */
export function orderKinds(kinds: ExportKindStatus[]): ExportKindStatus[] {
  return [...kinds].sort((a, b) => (a.kind === 'scrape' ? -1 : b.kind === 'scrape' ? 1 : a.kind.localeCompare(b.kind)));
}

/**
 * A scrape interval comfortably under the counter hold (the collector
 * delays a new counter's first increase by it, so Prometheus must have
 * scraped the counter's start before then): half of it, 5s to 60s; 30s
 * when there is no hold.
 */
export function scrapeInterval(counterHoldSeconds: number): number {
  if (!(counterHoldSeconds > 0)) return 30;
  return Math.min(60, Math.max(5, Math.floor(counterHoldSeconds / 2)));
}

/** The Prometheus scrape_config for the collector at origin (e.g. https://nbs.example:7700). */
export function scrapeConfig(origin: string, counterHoldSeconds: number): string {
  const u = new URL(origin);
  const scheme = u.protocol.replace(/:$/, '');
  const interval = scrapeInterval(counterHoldSeconds);
  const hold = counterHoldSeconds > 0 ? `# shorter than the counter hold (${formatWindow(counterHoldSeconds)})` : '# any: the counter hold is off';
  // Short lines: the snippet is read on a phone too.
  return [
    'scrape_configs:',
    '  - job_name: nbs',
    `    ${hold}`,
    `    scrape_interval: ${interval}s`,
    `    scheme: ${scheme}`,
    `    metrics_path: ${EXPORT_METRICS_PATH}`,
    '    authorization:',
    '      type: Bearer',
    '      # staff: every node, customer: own',
    '      credentials: <NBS token>',
    '      # or credentials_file: <path>',
    '    static_configs:',
    `      - targets: ['${u.host}']`,
    '',
  ].join('\n');
}
