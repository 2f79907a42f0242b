// A node's tenancy on its page: the banner of a node that moved to another
// tenant (its former tenant sees what it reported before), the agent's
// ignored claims (operators and admins only: staff internals), and the
// admin's editor of its bound labels, its tenant among them.
import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, type NodeSummary, api } from '../api';
import { useCan } from '../auth';
import { usePoll } from '../hooks';
import { type LabelsDraft, type LabelsErrors, claimText, claimsOf, formatDate, labelsDraftOf, labelsRequest, labelsText, moveText, retiredText, sameLabels, tenantKeyOf } from '../tenancy';
import { ErrorBox, Loading } from './common';
import { fieldErrors } from './form';

/** The moved-away banner (everyone who sees such a row) and the ignored claims (operators and admins). */
export function TenancyNotices({ summary }: { summary: NodeSummary }) {
  const can = useCan();
  const moved = retiredText(summary.retired_at, formatDate);
  // claimed_labels reach staff only, but a viewer is not shown them either.
  const claims = can.readClaims ? claimsOf(summary) : [];
  if (!moved && claims.length === 0) return null;
  return (
    <div class="tenancy-notices">
      {moved && (
        <p class="notice notice-moved" role="note" data-notice="moved">
          <strong>Moved.</strong> {moved}
        </p>
      )}
      {claims.length > 0 && (
        <ul class="notice notice-claims" aria-label="Ignored label claims" data-notice="claims">
          {claims.map((c) => (
            <li key={c.key}>
              <strong>Ignored claim:</strong> {claimText(c)}
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}

type Step = 'edit' | 'confirm';

/**
 * Binds the node's labels, its tenant among them (PUT /nodes/{node}/labels),
 * for admins. The form shows what is bound now; binding another tenant is
 * confirmed with what it does to the node's history.
 */
export function TenantEditor({ node, tenant, onClose, onBound }: { node: string; tenant: string; onClose: () => void; onBound: (message: string) => void }) {
  const ids = usePoll('node-identities', (s) => api.nodeIdentities(s), 0);
  const [draft, setDraft] = useState<LabelsDraft | null>(null);
  const [errors, setErrors] = useState<LabelsErrors>({});
  const [step, setStep] = useState<Step>('edit');
  const [busy, setBusy] = useState(false);
  const [err, setErr] = useState<Error | null>(null);
  const first = useRef<HTMLInputElement>(null);
  const confirmBtn = useRef<HTMLButtonElement>(null);

  const me = ids.data?.nodes.find((n) => n.node === node);
  const bound = me?.bound_labels ?? {};
  // The collector says its tenant label; older collectors did not.
  const stated = ids.data?.tenant_label;
  const { key, guessed } = stated ? { key: stated, guessed: false } : tenantKeyOf(ids.data?.nodes ?? []);

  useEffect(() => {
    if (ids.data && !draft) setDraft(labelsDraftOf(bound, key, tenant));
  }, [ids.data]);
  useEffect(() => {
    if (step === 'edit') first.current?.focus();
    else confirmBtn.current?.focus();
  }, [step, draft === null]);

  const planned = draft ? labelsRequest(draft, key) : null;
  const newTenant = planned?.labels?.[key] ?? '';

  const set = (k: keyof LabelsDraft, v: string) => {
    setDraft((d) => d && { ...d, [k]: v });
    setErrors((e) => ({ ...e, [k]: undefined }));
    setErr(null);
  };
  const review = (e: Event) => {
    e.preventDefault();
    if (!planned) return;
    setErrors(planned.errors);
    if (!planned.labels) return;
    if (sameLabels(planned.labels, bound) && newTenant === tenant) {
      setErr(new Error('Nothing to change: these are the labels bound now.'));
      return;
    }
    setErr(null);
    setStep('confirm');
  };
  const bind = async () => {
    if (!planned?.labels) return;
    setBusy(true);
    setErr(null);
    try {
      const r = await api.labelNode(node, planned.labels);
      const what = labelsText(r.bound_labels) || 'no labels';
      onBound(
        r.tenant !== tenant
          ? `${node} is now ${r.tenant ? `${r.tenant}'s` : 'without a tenant'} (bound: ${what}). ${moveText(node, tenant, r.tenant)}`
          : `Bound ${what} to ${node}.`,
      );
    } catch (x) {
      setErr(x as Error);
      setStep('edit');
    } finally {
      setBusy(false);
    }
  };

  const fieldErr = fieldErrors(errors, 'node-labels').err;
  const described = (f: keyof LabelsErrors) => (errors[f] ? { 'aria-invalid': true, 'aria-describedby': `node-labels-${f}-err` } : { 'aria-describedby': `node-labels-${f}-hint` });
  const noRoute = ids.error instanceof ApiError && ids.error.notFound && /route/i.test(ids.error.message);

  return (
    <section class="panel tenancy-editor" aria-labelledby="tenancy-h" onKeyDown={(e) => e.key === 'Escape' && !busy && onClose()}>
      <h2 id="tenancy-h">Tenant &amp; labels</h2>
      {ids.loading && !ids.error && <Loading what="the node's bound labels" />}
      {noRoute && <p class="muted">This collector cannot bind node labels.</p>}
      {ids.error && !noRoute && <ErrorBox title="Cannot load the node's bound labels" error={ids.error} onRetry={ids.refresh} />}
      {ids.data && draft && (
        <>
          <p class="bound-now">
            {Object.keys(bound).length ? (
              <>
                Bound now: <span class="mono">{labelsText(bound)}</span>
                {me?.bound_by && <span class="muted small"> (by {me.bound_by})</span>}
              </>
            ) : (
              <>Nothing is bound: {node}'s labels are what its agent says{tenant ? '' : ', and it has no tenant'}.</>
            )}{' '}
            Tenant: <strong>{tenant || 'none'}</strong>.
          </p>
          {step === 'edit' ? (
            <form class="tenancy-form" onSubmit={review} noValidate aria-label={`Bind labels to ${node}`}>
              <div class="rule-grid">
                <div class="field">
                  <label for="node-tenant">
                    Tenant <span class="muted small">(label {key})</span>
                  </label>
                  <input ref={first} id="node-tenant" type="text" value={draft.tenant} autoComplete="off" spellcheck={false} placeholder="acme" onInput={(e) => set('tenant', (e.currentTarget as HTMLInputElement).value)} {...described('tenant')} />
                  <span class="hint-text" id="node-labels-tenant-hint">
                    The value of the tenant label <span class="mono">{key}</span>
                    {guessed ? " (the collector's default --tenant.label; no bound node shows another)" : ''}. Empty: no tenant, so only staff see the node.
                  </span>
                  {fieldErr('tenant')}
                </div>
                <div class="field">
                  <label for="node-bound-labels">Other bound labels</label>
                  <input id="node-bound-labels" type="text" value={draft.others} autoComplete="off" spellcheck={false} placeholder="region=eu, tier=gold" onInput={(e) => set('others', (e.currentTarget as HTMLInputElement).value)} {...described('others')} />
                  <span class="hint-text" id="node-labels-others-hint">
                    label=value, separated by commas. Bound labels replace what the agent says for those keys.
                  </span>
                  {fieldErr('others')}
                </div>
              </div>
              {err && <ErrorBox title="The labels were not bound" error={err} />}
              <div class="form-actions">
                <button type="submit" class="btn btn-primary">
                  Review…
                </button>
                <button type="button" class="btn btn-quiet" onClick={onClose}>
                  Cancel
                </button>
              </div>
            </form>
          ) : (
            <div class="tenancy-confirm" role="group" aria-labelledby="tenancy-confirm-h">
              <p id="tenancy-confirm-h">
                Bind <span class="mono">{labelsText(planned?.labels) || 'no labels'}</span> to <strong>{node}</strong>
                {newTenant !== tenant ? (
                  <>
                    , moving it from <strong>{tenant || 'no tenant'}</strong> to <strong>{newTenant || 'no tenant'}</strong>?
                  </>
                ) : (
                  '?'
                )}
              </p>
              <p class={newTenant !== tenant ? 'history-split' : undefined} data-confirm="history">
                {newTenant !== tenant && <strong>Its history splits: </strong>}
                {moveText(node, tenant, newTenant)}
              </p>
              <div class="form-actions">
                <button ref={confirmBtn} type="button" class={`btn ${newTenant !== tenant ? 'btn-danger' : 'btn-primary'}`} disabled={busy} onClick={bind}>
                  {busy ? 'Binding…' : newTenant !== tenant ? `Move ${node} to ${newTenant || 'no tenant'}` : 'Bind labels'}
                </button>
                <button type="button" class="btn btn-quiet" disabled={busy} onClick={() => setStep('edit')}>
                  Back
                </button>
              </div>
            </div>
          )}
        </>
      )}
    </section>
  );
}
