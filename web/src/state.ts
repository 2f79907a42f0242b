// Metric and node states: their order of severity and how they read.
import type { State } from './api';

export const STATES: State[] = ['crit', 'warn', 'unknown', 'ok'];

const severity: Record<string, number> = { ok: 0, unknown: 1, warn: 2, crit: 3 };

export function normState(s: string | null | undefined): State {
  const v = (s ?? '').toLowerCase();
  return v === 'ok' || v === 'warn' || v === 'crit' ? v : 'unknown';
}

export function sev(s: string | null | undefined): number {
  return severity[normState(s)];
}

export function worse(a: string, b: string): State {
  return sev(a) >= sev(b) ? normState(a) : normState(b);
}

/** Whether a state calls for attention (a branch to open). */
export function raised(s: string | null | undefined): boolean {
  const v = normState(s);
  return v === 'warn' || v === 'crit';
}

export const stateLabel: Record<State, string> = { ok: 'OK', warn: 'WARN', crit: 'CRIT', unknown: 'UNKNOWN' };
