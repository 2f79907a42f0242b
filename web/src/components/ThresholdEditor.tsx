import { useEffect, useState } from 'preact/hooks';
import { ApiError, type Effective, type Override, type OverrideInput, type Scope, type Threshold, api } from '../api';
import { useCan } from '../auth';
import { formatAgo, thresholdLong } from '../format';
import { TableHead } from './common';
import { FormActions, fieldErrors } from './form';

type Field = 'scope' | 'selector' | 'comparison' | 'warn' | 'crit' | 'hold' | 'baseline' | 'form';
export type FieldErrors = Partial<Record<Field, string>>;

export interface Draft {
  scope: Scope['kind'];
  selector: string;
  disabled: boolean;
  comparison: string;
  warn: string;
  crit: string;
  hold: string;
  baseline: string;
}

export function draftFrom(t: Threshold | null | undefined, scope: Scope['kind'], selector: string): Draft {
  return {
    scope,
    selector,
    disabled: false,
    comparison: t?.comparison === 'below' ? 'below' : 'above',
    warn: t ? String(t.warn) : '',
    crit: t ? String(t.crit) : '',
    hold: String(t?.hold_intervals ?? 1),
    baseline: String(t?.baseline_intervals ?? 0),
  };
}

export function parseSelector(s: string): Record<string, string> | string {
  const out: Record<string, string> = {};
  const parts = s.split(',').map((p) => p.trim()).filter(Boolean);
  if (parts.length === 0) return 'Name at least one label, e.g. customer=acme.';
  for (const p of parts) {
    const eq = p.indexOf('=');
    if (eq <= 0 || eq === p.length - 1) return `“${p}” is not label=value.`;
    out[p.slice(0, eq).trim()] = p.slice(eq + 1).trim();
  }
  return out;
}

export function formatScope(s: Scope): string {
  if (s.kind === 'node') return `node ${s.node ?? ''}`;
  if (s.kind === 'selector') return `nodes with ${Object.entries(s.selector ?? {}).map(([k, v]) => `${k}=${v}`).join(', ')}`;
  return 'all nodes';
}

/** Validates a draft as the collector would, so the user learns before sending; returns the request or errors. */
export function buildRequest(d: Draft, metric: string, node: string): { req?: OverrideInput; errors: FieldErrors } {
  const errors: FieldErrors = {};
  const scope: Scope = { kind: d.scope };
  if (d.scope === 'node') scope.node = node;
  if (d.scope === 'selector') {
    const sel = parseSelector(d.selector);
    if (typeof sel === 'string') errors.selector = sel;
    else scope.selector = sel;
  }
  if (d.disabled) return Object.keys(errors).length ? { errors } : { req: { scope, metric, disabled: true }, errors };
  const num = (s: string, f: Field, what: string) => {
    if (s.trim() === '') {
      errors[f] = `Enter the ${what}.`;
      return NaN;
    }
    const v = Number(s);
    if (!Number.isFinite(v)) errors[f] = `${what[0].toUpperCase()}${what.slice(1)} must be a number.`;
    return v;
  };
  const int = (s: string, f: Field, what: string, max: number) => {
    const v = Number(s.trim() === '' ? '0' : s);
    if (!Number.isInteger(v) || v < 0 || v > max) errors[f] = `${what} must be a whole number from 0 to ${max}.`;
    return v;
  };
  const warn = num(d.warn, 'warn', 'warn level');
  const crit = num(d.crit, 'crit', 'crit level');
  const hold = int(d.hold, 'hold', 'Hold', 1000);
  const baseline = int(d.baseline, 'baseline', 'Baseline', 10000);
  if (!errors.warn && !errors.crit) {
    if (d.comparison === 'above' && warn > crit) errors.warn = `Warn (${warn}) must not be above crit (${crit}) when the comparison is “above”.`;
    if (d.comparison === 'below' && warn < crit) errors.warn = `Warn (${warn}) must not be below crit (${crit}) when the comparison is “below”.`;
    if (baseline > 0 && (warn <= 0 || crit <= 0)) errors.baseline = 'With a baseline, warn and crit are multiples of it and must be above 0.';
  }
  if (Object.keys(errors).length) return { errors };
  const threshold: Threshold = { warn, crit, comparison: d.comparison === 'below' ? 'below' : 'above', hold_intervals: hold };
  if (baseline > 0) threshold.baseline_intervals = baseline;
  return { req: { scope, metric, threshold }, errors };
}

/** Which form field a part of a collector message is about. */
function fieldOf(part: string): Field {
  const p = part.toLowerCase();
  if (/^scope selector needs/.test(p)) return 'selector';
  if (/^scope/.test(p)) return 'scope';
  if (/selector|label/.test(p)) return 'selector';
  if (/baseline/.test(p)) return 'baseline';
  if (/\bhold/.test(p)) return 'hold';
  if (/comparison/.test(p) && !/\b(warn|crit)\b/.test(p)) return 'comparison';
  if (/\bwarn\b/.test(p)) return 'warn';
  if (/\bcrit\b/.test(p)) return 'crit';
  return 'form';
}

/** Puts each part of a collector 400 message next to the field it is about. */
export function mapServerError(message: string): FieldErrors {
  const out: FieldErrors = {};
  const body = message.replace(/^((bad request|invalid override):\s*)+/i, '');
  for (const part of body.split(/;\s+/)) {
    const f = fieldOf(part);
    out[f] = out[f] ? `${out[f]}; ${part}` : part;
  }
  return out;
}

interface Props {
  node: string;
  labels: Record<string, string>;
  metric: string;
  unit: string;
  fallback: Threshold | null; // the tree's threshold, shown when the thresholds API is absent
  onSaved: () => void;
}

/**
 * Effective threshold and its source, the overrides of this metric, and a
 * form to change them — the form and the remove buttons only for a role that
 * may change thresholds, the fleet-wide overrides only for one that may read
 * them (a customer sees its node's effective threshold, nothing else).
 */
export function ThresholdEditor({ node, labels, metric, unit, fallback, onSaved }: Props) {
  const can = useCan();
  const [overrides, setOverrides] = useState<Override[] | null>(null);
  const [effective, setEffective] = useState<Effective | null | undefined>(undefined);
  const [absent, setAbsent] = useState(false);
  const [loadErr, setLoadErr] = useState<ApiError | null>(null);
  const [version, setVersion] = useState(0);
  const defaultSelector = Object.entries(labels).slice(0, 1).map(([k, v]) => `${k}=${v}`).join(',');
  const [draft, setDraft] = useState<Draft>(() => draftFrom(fallback, 'node', defaultSelector));
  const [errors, setErrors] = useState<FieldErrors>({});
  const [busy, setBusy] = useState(false);
  const [saved, setSaved] = useState('');
  const [editing, setEditing] = useState(false);

  useEffect(() => {
    const ctl = new AbortController();
    Promise.all([can.readOverrides ? api.overrides(ctl.signal) : Promise.resolve([] as Override[]), api.effective(node, ctl.signal)])
      .then(([os, eff]) => {
        setOverrides(os);
        setEffective(eff.find((e) => e.metric === metric) ?? null);
        setLoadErr(null);
      })
      .catch((err) => {
        if (ctl.signal.aborted) return;
        if (err instanceof ApiError && err.notFound && /route/i.test(err.message)) setAbsent(true);
        // A reader without the overrides still has the tree's threshold to show.
        else if (!can.readOverrides) setAbsent(true);
        else setLoadErr(err instanceof ApiError ? err : new ApiError(0, 'client', String(err)));
      });
    return () => ctl.abort();
  }, [node, metric, version, can.readOverrides]);

  useEffect(() => {
    setEditing(false);
    setErrors({});
    setSaved('');
  }, [node, metric]);

  const current = effective === undefined ? fallback : effective?.threshold ?? null;
  const mine = (overrides ?? []).filter((o) => o.metric === metric);

  const startEdit = () => {
    setDraft(draftFrom(current ?? fallback, 'node', defaultSelector));
    setErrors({});
    setSaved('');
    setEditing(true);
  };
  const set = (k: keyof Draft, v: string | boolean) => {
    setDraft((d) => ({ ...d, [k]: v }));
    setErrors((e) => ({ ...e, [k === 'scope' ? 'scope' : k]: undefined, form: undefined }));
  };

  const submit = async (e: Event) => {
    e.preventDefault();
    const { req, errors: errs } = buildRequest(draft, metric, node);
    setErrors(errs);
    if (!req) return;
    setBusy(true);
    try {
      const o = await api.putOverride(req);
      setSaved(`Saved for ${formatScope(o.scope ?? req.scope)}. The agent applies it from its next report.`);
      setEditing(false);
      setVersion((v) => v + 1);
      onSaved();
    } catch (err) {
      if (err instanceof ApiError && err.status === 400) setErrors(mapServerError(err.message));
      else if (err instanceof ApiError && (err.status === 401 || err.status === 403)) setErrors({ form: `You are not allowed to change thresholds: ${err.message}` });
      else setErrors({ form: (err as Error).message });
    } finally {
      setBusy(false);
    }
  };

  const remove = async (o: Override) => {
    setBusy(true);
    try {
      await api.deleteOverride(o.id);
      setSaved(`Removed the override for ${formatScope(o.scope)}.`);
      setVersion((v) => v + 1);
      onSaved();
    } catch (err) {
      setErrors({ form: (err as Error).message });
    } finally {
      setBusy(false);
    }
  };

  const fid = (f: string) => `th-${f}`;
  const { err, described } = fieldErrors(errors, 'th');

  return (
    <div class="thresholds">
      <p class="effective">
        <span class="eff-text">{thresholdLong(current, unit)}</span>{' '}
        {effective && (
          <span class="source" title="Where the threshold in force comes from">
            Source: <strong data-testid="threshold-source">{effective.source}</strong>
          </span>
        )}
        {effective === undefined && !absent && !loadErr && <span class="muted">(checking overrides…)</span>}
      </p>
      {absent && can.readOverrides && <p class="muted small">This collector does not offer threshold overrides; the catalogue default applies.</p>}
      {loadErr && <p class="field-error">Cannot load the threshold overrides: {loadErr.message}</p>}
      {saved && (
        <p class="saved" role="status">
          {saved}
        </p>
      )}
      {errors.form && !editing && (
        <p class="field-error" role="alert">
          {errors.form}
        </p>
      )}

      {!absent && mine.length > 0 && (
        <table class="overrides">
          <caption class="sr-only">Overrides of this metric</caption>
          <TableHead columns={['Scope', 'Threshold', 'Updated']} actions={can.editThresholds} />
          <tbody>
            {mine.map((o) => (
              <tr key={String(o.id)} class={effective?.override_id !== undefined && String(effective.override_id) === String(o.id) ? 'in-force' : ''}>
                <td>{formatScope(o.scope)}</td>
                <td>{o.disabled ? 'disabled' : thresholdLong(o.threshold, unit)}</td>
                <td class="nowrap">{o.updated_at ? formatAgo(o.updated_at) : ''}</td>
                {can.editThresholds && (
                  <td>
                    <button type="button" class="btn btn-sm btn-quiet" disabled={busy} onClick={() => remove(o)} aria-label={`Remove the override for ${formatScope(o.scope)}`}>
                      Remove
                    </button>
                  </td>
                )}
              </tr>
            ))}
          </tbody>
        </table>
      )}

      {!absent && !editing && can.editThresholds && (
        <button type="button" class="btn btn-sm" onClick={startEdit} disabled={overrides === null && !loadErr}>
          Change threshold…
        </button>
      )}

      {!absent && editing && can.editThresholds && (
        <form class="th-form" onSubmit={submit} noValidate aria-label="Threshold override">
          <fieldset class="scope" {...described('scope')}>
            <legend>Applies to</legend>
            <label>
              <input type="radio" name="scope" value="node" checked={draft.scope === 'node'} onChange={() => set('scope', 'node')} /> this node ({node})
            </label>
            <label>
              <input type="radio" name="scope" value="selector" checked={draft.scope === 'selector'} onChange={() => set('scope', 'selector')} /> nodes with labels
            </label>
            <label>
              <input type="radio" name="scope" value="global" checked={draft.scope === 'global'} onChange={() => set('scope', 'global')} /> all nodes
            </label>
            {err('scope')}
          </fieldset>
          {draft.scope === 'selector' && (
            <div class="field">
              <label for={fid('selector')}>Label selector</label>
              <input id={fid('selector')} type="text" value={draft.selector} placeholder="customer=acme,rack=r12" onInput={(e) => set('selector', (e.currentTarget as HTMLInputElement).value)} {...described('selector')} />
              {err('selector')}
            </div>
          )}
          <label class="check">
            <input type="checkbox" checked={draft.disabled} onChange={(e) => set('disabled', (e.currentTarget as HTMLInputElement).checked)} /> Switch this metric's threshold off (it stays OK)
          </label>
          {!draft.disabled && (
            <div class="th-grid">
              <div class="field">
                <label for={fid('comparison')}>Raise when the value is</label>
                <select id={fid('comparison')} value={draft.comparison} onChange={(e) => set('comparison', (e.currentTarget as HTMLSelectElement).value)} {...described('comparison')}>
                  <option value="above">above</option>
                  <option value="below">below</option>
                </select>
                {err('comparison')}
              </div>
              <div class="field">
                <label for={fid('warn')}>Warn {unit && <span class="muted">({Number(draft.baseline) > 0 ? '× baseline' : unit})</span>}</label>
                <input id={fid('warn')} name="warn" type="text" inputMode="decimal" value={draft.warn} onInput={(e) => set('warn', (e.currentTarget as HTMLInputElement).value)} {...described('warn')} />
                {err('warn')}
              </div>
              <div class="field">
                <label for={fid('crit')}>Crit {unit && <span class="muted">({Number(draft.baseline) > 0 ? '× baseline' : unit})</span>}</label>
                <input id={fid('crit')} name="crit" type="text" inputMode="decimal" value={draft.crit} onInput={(e) => set('crit', (e.currentTarget as HTMLInputElement).value)} {...described('crit')} />
                {err('crit')}
              </div>
              <div class="field">
                <label for={fid('hold')}>Hold (intervals)</label>
                <input id={fid('hold')} name="hold" type="text" inputMode="numeric" value={draft.hold} onInput={(e) => set('hold', (e.currentTarget as HTMLInputElement).value)} {...described('hold')} />
                {err('hold')}
              </div>
              <div class="field">
                <label for={fid('baseline')}>Baseline (intervals, 0 = absolute)</label>
                <input id={fid('baseline')} name="baseline" type="text" inputMode="numeric" value={draft.baseline} onInput={(e) => set('baseline', (e.currentTarget as HTMLInputElement).value)} {...described('baseline')} />
                {err('baseline')}
              </div>
            </div>
          )}
          {err('form')}
          <FormActions busy={busy} submit="Save override" busyText="Saving…" onCancel={() => setEditing(false)} />
        </form>
      )}
    </div>
  );
}
