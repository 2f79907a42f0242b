// Tenant bootstrap tokens, for admins (on the tokens page): a tenant's token
// enrolls new node names into its labels, so its fleet enrolls itself and no
// agent can choose another tenant. Listed without secrets; a new one is
// shown once, with the agent flag that takes it.
import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, type BootstrapToken, type NewBootstrapToken, api } from '../api';
import { formatRelative, formatTime } from '../format';
import { useNow, usePoll } from '../hooks';
import { navigate, tokensHref, withParams } from '../route';
import { type BootstrapDraft, type BootstrapErrors, bootstrapErrors, bootstrapRequest, bootstrapState, emptyBootstrapDraft, labelsText } from '../tenancy';
import { Empty, ErrorBox, Loading, StaleNotice, copy } from './common';

/** The agent flag that reads a bootstrap token from a file. */
export const AGENT_FLAG = '--node.bootstrap-token-file';
const TOKEN_FILE = '/etc/nbs/bootstrap-token';

export const BOOTSTRAP_EXPIRY: [string, string][] = [
  ['', '30 days (the default)'],
  ['1d', '1 day'],
  ['7d', '7 days'],
  ['90d', '90 days'],
  ['365d', '365 days (the most)'],
];

/** The new bootstrap token, this once, with copy buttons for it and the agent flag. */
export function NewBootstrapSecret({ created, onDone }: { created: NewBootstrapToken; onDone: () => void }) {
  const field = useRef<HTMLInputElement>(null);
  const box = useRef<HTMLDivElement>(null);
  const [copied, setCopied] = useState('');
  useEffect(() => {
    box.current?.focus();
  }, []);
  const flag = `${AGENT_FLAG}=${TOKEN_FILE}`;
  const doCopy = async (text: string, what: string) => setCopied((await copy(text, field.current)) ? `${what} copied.` : 'Copying was refused: the token is selected, press Ctrl+C.');
  const t = created.bootstrap_token;
  return (
    <div class="secret-box" role="region" aria-labelledby="bootstrap-secret-h" tabIndex={-1} ref={box}>
      <h3 id="bootstrap-secret-h">
        Bootstrap token <span class="mono">{t.name}</span> created
      </h3>
      <p class="secret-warning" role="alert">
        <strong>Copy it now: this is the only time the token is shown.</strong> NBS keeps only its hash; if it is lost, revoke it and create another.
      </p>
      <div class="secret-row">
        <label class="sr-only" for="new-bootstrap-token">
          The new bootstrap token
        </label>
        <input id="new-bootstrap-token" ref={field} class="mono secret" type="text" readOnly value={created.token} onFocus={(e) => (e.currentTarget as HTMLInputElement).select()} />
        <button type="button" class="btn btn-primary" onClick={() => doCopy(created.token, 'Bootstrap token')}>
          Copy token
        </button>
        <button type="button" class="btn" onClick={() => doCopy(flag, 'Agent flag')}>
          Copy agent flag
        </button>
      </div>
      <p class="muted small" role="status">
        {copied}
      </p>
      <p class="small">
        Put it in a file on each of the tenant's nodes (mode 0600), e.g. <code>{TOKEN_FILE}</code>, and start the agent with <code>nbs-agent {flag}</code>. Every node that enrolls with it is bound to{' '}
        <span class="mono">{labelsText(t.labels)}</span>, whatever its agent claims; it works until {formatTime(t.expires_at)} ({formatRelative(t.expires_at)})
        {t.max_nodes ? ` or until it has enrolled ${t.max_nodes} nodes` : ''}.
      </p>
      <button type="button" class="btn btn-sm" onClick={onDone}>
        I have stored it — hide the token
      </button>
    </div>
  );
}

function BootstrapForm({ onCreated, onCancel }: { onCreated: (c: NewBootstrapToken) => void; onCancel: () => void }) {
  const [draft, setDraft] = useState<BootstrapDraft>(emptyBootstrapDraft);
  const [errors, setErrors] = useState<BootstrapErrors>({});
  const [busy, setBusy] = useState(false);
  const nameField = useRef<HTMLInputElement>(null);
  useEffect(() => {
    nameField.current?.focus();
  }, []);
  const set = (k: keyof BootstrapDraft, v: string) => {
    setDraft((d) => ({ ...d, [k]: v }));
    setErrors((e) => ({ ...e, [k]: undefined, form: undefined }));
  };
  const submit = async (e: Event) => {
    e.preventDefault();
    const { req, errors: errs } = bootstrapRequest(draft);
    setErrors(errs);
    if (!req) return;
    setBusy(true);
    try {
      onCreated(await api.createBootstrapToken(req));
    } catch (err) {
      setErrors(err instanceof ApiError && (err.status === 400 || err.status === 409) ? bootstrapErrors(err.status, err.message) : { form: (err as Error).message });
    } finally {
      setBusy(false);
    }
  };
  const err = (f: keyof BootstrapErrors) =>
    errors[f] ? (
      <span class="field-error" id={`bootstrap-${f}-err`} role="alert">
        {errors[f]}
      </span>
    ) : null;
  const described = (f: keyof BootstrapErrors) => (errors[f] ? { 'aria-invalid': true, 'aria-describedby': `bootstrap-${f}-err` } : {});
  const custom = !BOOTSTRAP_EXPIRY.some(([v]) => v === draft.expires);
  return (
    <form class="panel token-form" onSubmit={submit} noValidate aria-label="New bootstrap token">
      <h3>New bootstrap token</h3>
      <div class="rule-grid">
        <div class="field">
          <label for="bootstrap-name">Name</label>
          <input ref={nameField} id="bootstrap-name" type="text" value={draft.name} maxLength={64} autoComplete="off" placeholder="acme-eu" onInput={(e) => set('name', (e.currentTarget as HTMLInputElement).value)} {...described('name')} />
          {err('name')}
        </div>
        <div class="field">
          <label for="bootstrap-labels">Labels of the nodes it enrolls</label>
          <input id="bootstrap-labels" type="text" value={draft.labels} autoComplete="off" spellcheck={false} placeholder="customer=acme, region=eu" onInput={(e) => set('labels', (e.currentTarget as HTMLInputElement).value)} {...described('labels')} />
          <span class="hint-text">label=value, separated by commas; they must name the tenant (customer=…, or this collector's --tenant.label).</span>
          {err('labels')}
        </div>
        <div class="field">
          <label for="bootstrap-expires">Expires after</label>
          <select
            id="bootstrap-expires"
            value={custom ? 'custom' : draft.expires}
            onChange={(e) => {
              const v = (e.currentTarget as HTMLSelectElement).value;
              set('expires', v === 'custom' ? '180d' : v);
            }}
            {...described('expires')}
          >
            {BOOTSTRAP_EXPIRY.map(([v, label]) => (
              <option key={v} value={v}>
                {label}
              </option>
            ))}
            <option value="custom">other…</option>
          </select>
          {custom && <input type="text" aria-label="Lifetime (e.g. 180d or 720h)" value={draft.expires} onInput={(e) => set('expires', (e.currentTarget as HTMLInputElement).value)} {...described('expires')} />}
          <span class="hint-text">Enrollment is a rollout's moment, not a standing door.</span>
          {err('expires')}
        </div>
        <div class="field">
          <label for="bootstrap-max">Most nodes it may enroll</label>
          <input id="bootstrap-max" type="text" inputMode="numeric" value={draft.maxNodes} autoComplete="off" placeholder="no limit" onInput={(e) => set('maxNodes', (e.currentTarget as HTMLInputElement).value)} {...described('maxNodes')} />
          {err('maxNodes')}
        </div>
      </div>
      {err('form')}
      <div class="form-actions">
        <button type="submit" class="btn btn-primary" disabled={busy}>
          {busy ? 'Creating…' : 'Create bootstrap token'}
        </button>
        <button type="button" class="btn btn-quiet" onClick={onCancel} disabled={busy}>
          Cancel
        </button>
      </div>
    </form>
  );
}

function BootstrapRow({ t, now, busy, onRevoke }: { t: BootstrapToken; now: number; busy: boolean; onRevoke: () => void }) {
  const [confirming, setConfirming] = useState(false);
  const confirmBtn = useRef<HTMLButtonElement>(null);
  const revokeBtn = useRef<HTMLButtonElement>(null);
  useEffect(() => {
    if (confirming) confirmBtn.current?.focus();
  }, [confirming]);
  const cancel = () => {
    setConfirming(false);
    requestAnimationFrame(() => revokeBtn.current?.focus());
  };
  const state = bootstrapState(t, now);
  return (
    <tr class={`token-row token-${state}`} data-bootstrap={t.name} data-state={state}>
      <th scope="row" class="token-name">
        {t.name}
      </th>
      <td class="mono">{labelsText(t.labels)}</td>
      <td class="num nowrap">
        {t.enrolled}
        {t.max_nodes ? ` of ${t.max_nodes}` : ''}
      </td>
      <td class="nowrap">
        <time dateTime={t.created_at} title={t.created_at}>
          {formatTime(t.created_at, new Date(now))}
        </time>
        <div class="muted small">by {t.created_by}</div>
      </td>
      <td class="nowrap">
        <time dateTime={t.expires_at} title={t.expires_at}>
          {formatRelative(t.expires_at, now)}
        </time>
      </td>
      <td class="nowrap">
        <span class={`badge badge-sm ${state === 'live' ? 'st-ok' : 'st-unknown'}`}>{state}</span>
      </td>
      <td class="nowrap rule-actions" onKeyDown={(e) => confirming && e.key === 'Escape' && cancel()}>
        {state === 'live' &&
          (confirming ? (
            <span role="group" aria-label={`Revoke bootstrap token ${t.name}?`}>
              <span class="muted small">Revoke? No new node enrolls with it; the nodes it enrolled keep their credentials and tenant. </span>
              <button ref={confirmBtn} type="button" class="btn btn-sm btn-danger" disabled={busy} onClick={onRevoke}>
                Revoke {t.name}
              </button>{' '}
              <button type="button" class="btn btn-sm btn-quiet" onClick={cancel}>
                Keep
              </button>
            </span>
          ) : (
            <button ref={revokeBtn} type="button" class="btn btn-sm btn-quiet" disabled={busy} onClick={() => setConfirming(true)} aria-label={`Revoke bootstrap token ${t.name}…`}>
              Revoke…
            </button>
          ))}
      </td>
    </tr>
  );
}

/** The tenants' bootstrap tokens: list (?bootall=1 with dead ones), create (?new=bootstrap), revoke. */
export function BootstrapTokens({ params }: { params: URLSearchParams }) {
  const polled = usePoll('bootstrap-tokens', (s) => api.bootstrapTokens(s), 30_000);
  const now = useNow(30_000);
  // The secret lives in this component's state only: never in the URL, the history or storage.
  const [created, setCreated] = useState<NewBootstrapToken | null>(null);
  const [status, setStatus] = useState('');
  const [actionErr, setActionErr] = useState<Error | null>(null);
  const [busy, setBusy] = useState(false);
  const newBtn = useRef<HTMLButtonElement>(null);
  const creating = params.get('new') === 'bootstrap';
  const showAll = params.get('bootall') === '1';

  const go = (changes: Record<string, string | null>, replace = false) => navigate(tokensHref(withParams(params, changes)), { replace });
  const closeForm = () => {
    go({ new: null });
    requestAnimationFrame(() => newBtn.current?.focus());
  };
  const revoke = async (t: BootstrapToken) => {
    setBusy(true);
    setActionErr(null);
    try {
      await api.revokeBootstrapToken(t.name);
      setStatus(`Revoked bootstrap token ${t.name}: no new node enrolls with it.`);
      polled.refresh();
    } catch (err) {
      setStatus('');
      setActionErr(err as Error);
    } finally {
      setBusy(false);
    }
  };

  const noRoute = polled.error?.notFound && /route/i.test(polled.error.message);
  const all = polled.data ?? [];
  const live = all.filter((t) => bootstrapState(t, now) === 'live');
  const shown = showAll ? all : live;
  const dead = all.length - live.length;
  return (
    <section class="bootstrap-section" aria-labelledby="bootstrap-h">
      <div class="page-head">
        <h2 id="bootstrap-h">Node bootstrap tokens</h2>
        <div class="toolbar-spacer" />
        {!creating && !created && !noRoute && (
          <button ref={newBtn} type="button" class="btn" onClick={() => go({ new: 'bootstrap' })}>
            New bootstrap token…
          </button>
        )}
      </div>
      <p class="muted small page-intro">
        A tenant's bootstrap token enrolls new node names into its labels: every node that enrolls with it is that tenant's, whatever its agent claims. Give it to the tenant's agents (
        <code>{AGENT_FLAG}</code>). Revoking it stops new enrollments; the nodes it enrolled keep their credentials and tenant. To move one node to another tenant, use “Tenant &amp; labels…” on its page.
      </p>
      {status && (
        <p class="saved" role="status">
          {status}
        </p>
      )}
      {actionErr && <ErrorBox title="That did not work" error={actionErr} />}
      {created && (
        <NewBootstrapSecret
          created={created}
          onDone={() => {
            setCreated(null);
            requestAnimationFrame(() => newBtn.current?.focus());
          }}
        />
      )}
      {creating && !created && (
        <BootstrapForm
          onCreated={(c) => {
            setCreated(c);
            setStatus('');
            polled.refresh();
            go({ new: null }, true);
          }}
          onCancel={closeForm}
        />
      )}
      {noRoute && <Empty>This collector has no tenant bootstrap tokens.</Empty>}
      {polled.data && <StaleNotice error={polled.error} />}
      {polled.loading && !polled.error && <Loading what="the bootstrap tokens" />}
      {!polled.data && polled.error && !noRoute && <ErrorBox title="Cannot load the bootstrap tokens" error={polled.error} onRetry={polled.refresh} />}
      {polled.data && shown.length === 0 && <Empty>No live bootstrap token. Create one with “New bootstrap token…”.</Empty>}
      {shown.length > 0 && (
        <div class="table-wrap table-page">
          <table class="tokens-table bootstrap-table">
            <caption class="sr-only">{showAll ? 'Every bootstrap token' : 'Live bootstrap tokens'}</caption>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Labels</th>
                <th scope="col">Enrolled</th>
                <th scope="col">Created</th>
                <th scope="col">Expires</th>
                <th scope="col">State</th>
                <th scope="col">
                  <span class="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {shown.map((t) => (
                <BootstrapRow key={t.id} t={t} now={now} busy={busy} onRevoke={() => revoke(t)} />
              ))}
            </tbody>
          </table>
        </div>
      )}
      {polled.data && (dead > 0 || showAll) && (
        <p>
          <button type="button" class="btn btn-sm btn-quiet" onClick={() => go({ bootall: showAll ? null : '1' }, true)} aria-pressed={showAll}>
            {showAll ? 'Show live bootstrap tokens only' : `Also show ${dead} expired or revoked bootstrap tokens`}
          </button>
        </p>
      )}
    </section>
  );
}
