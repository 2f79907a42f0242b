import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, type AlertRule, api } from '../api';
import {
  RULE_FIELD_ORDER,
  type RuleDraft,
  type RuleErrors,
  type RuleField,
  draftFromRule,
  emptyDraft,
  holdText,
  inputFromRule,
  labelsText,
  mapRuleErrors,
  quorumText,
  ruleInput,
} from '../alerts';
import { useCan, useSession } from '../auth';
import { useAction, usePoll } from '../hooks';
import { alertRulesHref, alertsHref, linkClick, navigate, withParams } from '../route';
import { AlertTabs, SeverityBadge } from './Alerts';
import { ConfirmCell, Empty, ErrorBox, Loading, StaleNotice, TableHead, TableWrap } from './common';
import { FormActions } from './form';

export const RULES_REFRESH_MS = 15_000;

const STATE_TEXT: Record<string, string> = { crit: 'CRIT', warn: 'WARN or worse', unknown: 'UNKNOWN or worse' };

const fid = (f: RuleField) => `rule-${f}`;

/** The form's problems in one sentence for the top of the form. */
function problemCount(errors: RuleErrors): number {
  return Object.entries(errors).filter(([k, v]) => v && k !== 'form').length;
}

interface FormProps {
  rule: AlertRule | null; // null: a new rule
  rules: AlertRule[];
  onSaved: (r: AlertRule, created: boolean) => void;
  onCancel: () => void;
}

/** Create or edit one rule; the collector's validation messages land next to their fields. */
export function RuleForm({ rule, rules, onSaved, onCancel }: FormProps) {
  const [draft, setDraft] = useState<RuleDraft>(() => (rule ? draftFromRule(rule) : emptyDraft()));
  const [errors, setErrors] = useState<RuleErrors>({});
  const [conflict, setConflict] = useState<AlertRule | null>(null);
  const [busy, setBusy] = useState(false);
  const form = useRef<HTMLFormElement>(null);
  const summary = useRef<HTMLDivElement>(null);

  useEffect(() => {
    form.current?.querySelector<HTMLElement>(`#${fid('name')}`)?.focus();
  }, []);

  const set = <K extends keyof RuleDraft>(k: K, v: RuleDraft[K]) => {
    setDraft((d) => ({ ...d, [k]: v }));
    const field: Partial<Record<keyof RuleDraft, RuleField>> = { holdUnit: 'hold', minUnit: 'min', groupBy: 'group_by', runbook: 'runbook' };
    const f = field[k] ?? (k as RuleField);
    setErrors((e) => ({ ...e, [f]: undefined, form: undefined }));
    if (k === 'name') setConflict(null);
  };

  // After a failed save, focus the first field with a problem (or the summary).
  const focusFirst = (errs: RuleErrors) => {
    requestAnimationFrame(() => {
      const f = RULE_FIELD_ORDER.find((x) => x !== 'form' && errs[x]);
      const el = f ? form.current?.querySelector<HTMLElement>(`[data-field="${f}"]`) : null;
      (el ?? summary.current)?.focus();
    });
  };

  const submit = async (e: Event) => {
    e.preventDefault();
    const { input, errors: errs } = ruleInput(draft);
    setConflict(null);
    if (!input) {
      setErrors(errs);
      focusFirst(errs);
      return;
    }
    setErrors({});
    setBusy(true);
    try {
      const saved = rule ? await api.updateAlertRule(rule.id, input) : await api.createAlertRule(input);
      onSaved(saved, !rule);
    } catch (err) {
      let next: RuleErrors;
      if (err instanceof ApiError && err.status === 400) next = mapRuleErrors(err.message);
      else if (err instanceof ApiError && err.status === 409) {
        const other = rules.find((r) => r.name === input.name && r.id !== rule?.id) ?? null;
        setConflict(other);
        next = { name: `A rule named “${input.name}” exists already: rule names are unique (the name becomes the alertname label). Choose another name.` };
      } else if (err instanceof ApiError && err.status === 404 && rule) next = { form: `Rule ${rule.name} no longer exists (deleted elsewhere?): ${err.message}` };
      else if (err instanceof ApiError && (err.status === 401 || err.status === 403)) next = { form: `You are not allowed to change alert rules: ${err.message}` };
      else next = { form: (err as Error).message };
      setErrors(next);
      focusFirst(next);
    } finally {
      setBusy(false);
    }
  };

  const err = (f: RuleField) =>
    errors[f] ? (
      <span class="field-error" id={fid(`${f}-err` as RuleField)}>
        {errors[f]}
        {f === 'name' && conflict && (
          <>
            {' '}
            <a href={alertRulesHref(new URLSearchParams({ edit: String(conflict.id) }))} onClick={linkClick}>
              Edit {conflict.name} instead
            </a>
            .
          </>
        )}
      </span>
    ) : null;
  const aria = (f: RuleField, hint?: string) => {
    const ids = [errors[f] ? fid(`${f}-err` as RuleField) : '', hint ?? ''].filter(Boolean).join(' ');
    return { 'data-field': f, 'aria-invalid': errors[f] ? true : undefined, 'aria-describedby': ids || undefined };
  };
  const n = problemCount(errors);
  const heading = rule ? `Edit rule ${rule.name}` : 'New alert rule';

  return (
    <form ref={form} class="panel rule-form" onSubmit={submit} noValidate aria-labelledby="rule-form-h" onKeyDown={(e) => e.key === 'Escape' && !busy && onCancel()}>
      <h2 id="rule-form-h">{heading}</h2>
      {rule?.builtin && <p class="muted small">The built-in default. Changes and deletion stick: it is created once, with the schema.</p>}
      {(errors.form || n > 0) && (
        <div class="error-box form-summary" role="alert" tabIndex={-1} ref={summary}>
          <strong>The rule was not saved.</strong>
          {errors.form && <span class="error-msg">{errors.form}</span>}
          {n > 0 && (
            <span class="error-msg">
              {errors.name && conflict !== null ? 'The name is taken. ' : ''}
              {n === 1 ? 'One field needs' : `${n} fields need`} attention; see the messages by the fields.
            </span>
          )}
        </div>
      )}
      <div class="rule-grid">
        <div class="field">
          <label for={fid('name')}>Name</label>
          <input id={fid('name')} type="text" value={draft.name} autoComplete="off" spellcheck={false} placeholder="TcpResetStorm" onInput={(e) => set('name', (e.currentTarget as HTMLInputElement).value)} {...aria('name', 'rule-name-hint')} />
          <span class="hint-text" id="rule-name-hint">
            Becomes the alertname label: letters, digits and _.
          </span>
          {err('name')}
        </div>
        <fieldset class="field kind-field" {...aria('kind')} tabIndex={-1}>
          <legend>Kind</legend>
          <label>
            <input type="radio" name="rule-kind" value="node" checked={draft.kind === 'node'} onChange={() => set('kind', 'node')} /> node: each node on its own
          </label>
          <label>
            <input type="radio" name="rule-kind" value="group" checked={draft.kind === 'group'} onChange={() => set('kind', 'group')} /> group: many nodes at once
          </label>
          <label>
            <input type="radio" name="rule-kind" value="silent" checked={draft.kind === 'silent'} onChange={() => set('kind', 'silent')} /> silent: a node that stopped reporting
          </label>
          {err('kind')}
        </fieldset>
        {draft.kind !== 'silent' && (
          <div class="field">
            <label for={fid('metric')}>Metric or pattern</label>
            <input id={fid('metric')} type="text" class="mono" value={draft.metric} autoComplete="off" spellcheck={false} placeholder="tcp_reset/sent/*" onInput={(e) => set('metric', (e.currentTarget as HTMLInputElement).value)} {...aria('metric', 'rule-metric-hint')} />
            <span class="hint-text" id="rule-metric-hint">
              A metric id, or a pattern where * is one path segment (* alone: every root).
            </span>
            {err('metric')}
          </div>
        )}
        {draft.kind !== 'silent' && (
          <div class="field">
            <label for={fid('state')}>State</label>
            <select id={fid('state')} value={draft.state} onChange={(e) => set('state', (e.currentTarget as HTMLSelectElement).value)} {...aria('state')}>
              {Object.entries(STATE_TEXT).map(([v, t]) => (
                <option key={v} value={v}>
                  {t}
                </option>
              ))}
              {!STATE_TEXT[draft.state] && <option value={draft.state}>{draft.state}</option>}
            </select>
            {err('state')}
          </div>
        )}
        <div class="field">
          <label for={fid('hold')}>For (hold)</label>
          <div class="field-pair">
            <input id={fid('hold')} type="text" inputMode="numeric" value={draft.hold} onInput={(e) => set('hold', (e.currentTarget as HTMLInputElement).value)} {...aria('hold')} />
            <select aria-label="Hold unit" value={draft.holdUnit} onChange={(e) => set('holdUnit', (e.currentTarget as HTMLSelectElement).value as RuleDraft['holdUnit'])}>
              <option value="intervals">report intervals</option>
              <option value="seconds">seconds</option>
            </select>
          </div>
          {err('hold')}
        </div>
        <div class="field">
          <label for={fid('severity')}>Severity</label>
          <input id={fid('severity')} type="text" list="rule-severities" value={draft.severity} autoComplete="off" onInput={(e) => set('severity', (e.currentTarget as HTMLInputElement).value)} {...aria('severity')} />
          <datalist id="rule-severities">
            <option value="critical" />
            <option value="warning" />
            <option value="info" />
          </datalist>
          {err('severity')}
        </div>
        <div class="field">
          <label for={fid('selector')}>Node selector</label>
          <input id={fid('selector')} type="text" value={draft.selector} autoComplete="off" spellcheck={false} placeholder="customer=acme, rack=r12" onInput={(e) => set('selector', (e.currentTarget as HTMLInputElement).value)} {...aria('selector', 'rule-selector-hint')} />
          <span class="hint-text" id="rule-selector-hint">
            {draft.kind === 'group' ? 'The nodes counted' : 'Only nodes with these labels'}; empty: every node.
          </span>
          {err('selector')}
        </div>
        {draft.kind === 'group' && (
          <>
            <div class="field">
              <label for={fid('min')}>Fire when at least</label>
              <div class="field-pair">
                <input id={fid('min')} type="text" inputMode="decimal" value={draft.min} onInput={(e) => set('min', (e.currentTarget as HTMLInputElement).value)} {...aria('min')} />
                <select aria-label="Quorum unit" value={draft.minUnit} onChange={(e) => set('minUnit', (e.currentTarget as HTMLSelectElement).value as RuleDraft['minUnit'])}>
                  <option value="nodes">nodes</option>
                  <option value="percent">% of them</option>
                </select>
              </div>
              {err('min')}
            </div>
            <div class="field">
              <label for={fid('group_by')}>Group by labels</label>
              <input id={fid('group_by')} type="text" value={draft.groupBy} autoComplete="off" spellcheck={false} placeholder="customer, rack" onInput={(e) => set('groupBy', (e.currentTarget as HTMLInputElement).value)} {...aria('group_by', 'rule-groupby-hint')} />
              <span class="hint-text" id="rule-groupby-hint">
                Count each value of these labels apart; empty: all selected nodes together.
              </span>
              {err('group_by')}
            </div>
          </>
        )}
        <div class="field">
          <label for={fid('labels')}>Extra alert labels</label>
          <input id={fid('labels')} type="text" value={draft.labels} autoComplete="off" spellcheck={false} placeholder="team=netops" onInput={(e) => set('labels', (e.currentTarget as HTMLInputElement).value)} {...aria('labels')} />
          {err('labels')}
        </div>
        <div class="field">
          <label for={fid('runbook')}>Runbook URL</label>
          <input id={fid('runbook')} type="text" inputMode="url" value={draft.runbook} autoComplete="off" placeholder="https://wiki.example.com/runbooks/resets" onInput={(e) => set('runbook', (e.currentTarget as HTMLInputElement).value)} {...aria('runbook')} />
          {err('runbook')}
        </div>
      </div>
      <label class="check">
        <input type="checkbox" checked={draft.enabled} onChange={(e) => set('enabled', (e.currentTarget as HTMLInputElement).checked)} /> Enabled
      </label>
      <FormActions busy={busy} submit={rule ? 'Save rule' : 'Create rule'} busyText="Saving…" onCancel={onCancel} />
    </form>
  );
}

function RuleRow({ r, busy, onDelete, onToggle }: { r: AlertRule; busy: boolean; onDelete?: () => void; onToggle?: (on: boolean) => void }) {
  return (
    <tr class={`rule-row${r.enabled ? '' : ' rule-off'}`} data-rule={r.name} data-rule-id={r.id}>
      <th scope="row" class="rule-name">
        {r.name}
        {r.builtin && <span class="tag">default</span>}
      </th>
      <td data-label="Kind">{r.kind}</td>
      <td class="mono" data-label="Metric">{r.metric}</td>
      <td class="nowrap" data-label="State">{STATE_TEXT[r.state] ?? r.state}</td>
      <td class="nowrap" data-label="For">{holdText(r)}</td>
      <td data-label="Selector">{labelsText(r.selector) || <span class="muted">all nodes</span>}</td>
      <td class="nowrap" data-label="At least">{quorumText(r) || <span class="muted">—</span>}</td>
      <td data-label="Group by">{(r.group_by ?? []).join(', ') || <span class="muted">—</span>}</td>
      <td data-label="Severity">
        <SeverityBadge severity={r.severity} />
      </td>
      <td data-label="Enabled">
        {onToggle ? (
          <label class="check nowrap">
            <input type="checkbox" checked={r.enabled} disabled={busy} onChange={(e) => onToggle((e.currentTarget as HTMLInputElement).checked)} aria-label={`${r.name} enabled`} />{' '}
            <span aria-hidden="true">{r.enabled ? 'on' : 'off'}</span>
          </label>
        ) : (
          <span class="nowrap">{r.enabled ? 'on' : 'off'}</span>
        )}
      </td>
      {onDelete && (
        <ConfirmCell
          busy={busy}
          trigger="Delete…"
          triggerLabel={`Delete ${r.name}…`}
          question={`Delete ${r.name}?`}
          prompt="Delete? "
          confirm={`Delete ${r.name}`}
          onConfirm={onDelete}
          before={
            <a class="btn btn-sm" href={alertRulesHref(new URLSearchParams({ edit: String(r.id) }))} onClick={linkClick} aria-label={`Edit ${r.name}`}>
              Edit
            </a>
          }
        />
      )}
    </tr>
  );
}

/** The alert rules: a list, and a form to create or edit one (?new=1, ?edit={id}). */
export function AlertRulesPage({ params }: { params: URLSearchParams }) {
  const can = useCan();
  const me = useSession()?.me;
  const polled = usePoll('alert-rules', (s) => api.alertRules(s), RULES_REFRESH_MS);
  const { status, setStatus, error: actionErr, setError: setActionErr, busy, act } = useAction(polled.refresh);
  const newBtn = useRef<HTMLButtonElement>(null);
  const editParam = params.get('edit');
  const creating = params.get('new') === '1';
  const rules = polled.data ?? [];
  const editing = editParam ? (rules.find((r) => String(r.id) === editParam) ?? null) : null;

  useEffect(() => {
    document.title = 'Alert rules · NBS';
  }, []);

  const go = (changes: Record<string, string | null>, replace = false) => navigate(alertRulesHref(withParams(params, changes)), { replace });
  const closeForm = () => {
    go({ edit: null, new: null });
    requestAnimationFrame(() => newBtn.current?.focus());
  };

  const onSaved = (r: AlertRule, created: boolean) => {
    setStatus(`${created ? 'Created' : 'Saved'} rule ${r.name}${r.enabled ? '' : ' (disabled)'}. The evaluator uses it from now on.`);
    setActionErr(null);
    polled.refresh();
    closeForm();
  };

  if (polled.error?.notFound && /route/i.test(polled.error.message)) {
    return (
      <div class="page">
        <h1>Alert rules</h1>
        <Empty>This collector has no alert rules API (/api/v1/alert-rules); it predates threshold alerts.</Empty>
      </div>
    );
  }

  const formOpen = can.editRules && (creating || editParam !== null);
  return (
    <div class="page rules-page">
      <div class="page-head">
        <h1>Alert rules</h1>
        <AlertTabs current="rules" />
        <div class="toolbar-spacer" />
        {!formOpen && can.editRules && (
          <button ref={newBtn} type="button" class="btn btn-primary" onClick={() => go({ new: '1', edit: null })}>
            New rule…
          </button>
        )}
      </div>
      <p class="muted small page-intro">
        A node rule pages when a node's metric stays at a state or worse for the hold; a group rule when enough nodes of a label selector do at once. Changes apply at the next report. Firing alerts are on the{' '}
        <a href={alertsHref()} onClick={linkClick}>
          alerts page
        </a>
        .
      </p>
      {status && (
        <p class="saved" role="status">
          {status}
        </p>
      )}
      {actionErr && <ErrorBox title="That did not work" error={actionErr} />}
      {!can.editRules && (
        <p class="muted small" role="note">
          Read only: {me ? `${me.name} has the role ${me.role}; ` : ''}changing alert rules needs the operator role.
        </p>
      )}

      {can.editRules && creating && <RuleForm key="new" rule={null} rules={rules} onSaved={onSaved} onCancel={closeForm} />}
      {can.editRules && editParam !== null && !creating && editing && <RuleForm key={`edit-${editing.id}`} rule={editing} rules={rules} onSaved={onSaved} onCancel={closeForm} />}
      {can.editRules && editParam !== null && !creating && !editing && polled.data && (
        <div class="error-box" role="alert">
          <strong>Rule {editParam} does not exist.</strong>
          <span class="error-msg">It may have been deleted; pick one from the list below.</span>
          <button type="button" class="btn btn-sm" onClick={closeForm}>
            Close
          </button>
        </div>
      )}

      {polled.data && <StaleNotice error={polled.error} />}
      {polled.loading && !polled.error && <Loading what="the alert rules" />}
      {!polled.data && polled.error && <ErrorBox title="Cannot load the alert rules" error={polled.error} onRetry={polled.refresh} />}
      {polled.data && rules.length === 0 && <Empty>No alert rule: nothing pages.{can.editRules && ' Create one with “New rule…”.'}</Empty>}
      {rules.length > 0 && (
        <TableWrap page label="Alert rules table">
          <table class="rules-table cards-narrow">
            <caption class="sr-only">Alert rules</caption>
            <TableHead columns={['Name', 'Kind', 'Metric or pattern', 'State', 'For', 'Selector', 'At least', 'Group by', 'Severity', 'Enabled']} actions={can.editRules} />
            <tbody>
              {rules.map((r) => (
                <RuleRow
                  key={r.id}
                  r={r}
                  busy={busy}
                  onDelete={can.editRules ? () => act(() => api.deleteAlertRule(r.id), `Deleted rule ${r.name}. Its firing alerts resolve.`) : undefined}
                  onToggle={!can.editRules ? undefined : (on) => act(() => api.updateAlertRule(r.id, { ...inputFromRule(r), enabled: on }), `${on ? 'Enabled' : 'Disabled'} rule ${r.name}.${on ? '' : ' Its firing alerts resolve.'}`)}
                />
              ))}
            </tbody>
          </table>
        </TableWrap>
      )}
    </div>
  );
}
