import { useEffect, useRef, useState } from 'preact/hooks';
import type { CreateTokenRequest, CreatedToken, Role, Token } from '../access';
import { parseLabelList } from '../alerts';
import { ApiError, api } from '../api';
import { ROLES, ROLE_TEXT, selectorText, useCan, useSession } from '../auth';
import { formatRelative, formatTime } from '../format';
import { useNow, usePoll } from '../hooks';
import { navigate, tokensHref, withParams } from '../route';
import { BootstrapTokens } from './BootstrapTokens';
import { Empty, ErrorBox, Loading, StaleNotice, copy } from './common';

export const TOKENS_REFRESH_MS = 30_000;

type TokenField = 'name' | 'role' | 'selector' | 'expires' | 'form';
export type TokenErrors = Partial<Record<TokenField, string>>;

export interface TokenDraft {
  name: string;
  role: Role;
  selector: string;
  /** 90d, 720h, or empty for the collector's default. */
  expires: string;
}

export const EXPIRY_CHOICES: [string, string][] = [
  ['', 'the default (--auth.token-ttl)'],
  ['1d', '1 day'],
  ['7d', '7 days'],
  ['30d', '30 days'],
  ['90d', '90 days'],
  ['365d', '365 days'],
];

export const emptyTokenDraft = (): TokenDraft => ({ name: '', role: 'viewer', selector: '', expires: '' });

/**
 * The request for a draft, or what is wrong with it. Only the form of the
 * fields is checked here; names, label keys and the expiry's limits are the
 * collector's to judge, and its messages land by field (tokenErrors).
 */
export function tokenRequest(d: TokenDraft): { req?: CreateTokenRequest; errors: TokenErrors } {
  const errors: TokenErrors = {};
  const name = d.name.trim();
  if (!name) errors.name = 'Name the token after who or what uses it, e.g. alice or acme-portal.';
  else if (name.length > 64) errors.name = 'A token name is at most 64 characters.';
  if (!ROLES.includes(d.role)) errors.role = 'Pick a role.';
  const req: CreateTokenRequest = { name, role: d.role };
  if (d.role === 'customer') {
    const sel = parseLabelList(d.selector, 'Selector');
    if (typeof sel === 'string') errors.selector = sel;
    else if (Object.keys(sel).length === 0) errors.selector = 'A customer token needs the labels of its nodes, e.g. customer=acme.';
    else req.selector = sel;
  }
  const exp = d.expires.trim();
  if (exp) {
    if (/^[1-9][0-9]*d$/.test(exp) || /^([0-9]+(\.[0-9]+)?(h|m|s))+$/.test(exp)) req.expires_in = exp;
    else errors.expires = 'Give the lifetime in days (90d) or hours (720h).';
  }
  return Object.keys(errors).length ? { errors } : { req, errors };
}

function tokenFieldOf(part: string): TokenField {
  const p = part.toLowerCase();
  if (/^(token name|a live token named)/.test(p)) return 'name';
  if (/selector|customer token/.test(p)) return 'selector';
  if (/^role/.test(p)) return 'role';
  if (/expir/.test(p)) return 'expires';
  return 'form';
}

/** The collector's 400 (errors joined by new lines) or 409, each part by the field it is about. */
export function tokenErrors(err: ApiError): TokenErrors {
  const out: TokenErrors = {};
  for (const raw of err.message.split('\n')) {
    const part = raw.replace(/^(invalid|conflict):\s*/i, '').trim();
    if (!part) continue;
    const f = err.status === 409 && !/named/.test(part) ? 'form' : tokenFieldOf(part);
    out[f] = out[f] ? `${out[f]} ${part}` : part;
  }
  return out;
}

/** The new token's secret, this once, with a copy button and the warning that it will not come back. */
export function NewSecret({ created, onDone }: { created: CreatedToken; onDone: () => void }) {
  const field = useRef<HTMLInputElement>(null);
  const [copied, setCopied] = useState('');
  const box = useRef<HTMLDivElement>(null);
  useEffect(() => {
    box.current?.focus();
  }, []);
  const link = `${location.origin}/login#token=${created.token}`;
  const doCopy = async (text: string, what: string) => setCopied((await copy(text, field.current)) ? `${what} copied.` : 'Copying was refused: the token is selected, press Ctrl+C.');
  return (
    <div class="secret-box" role="region" aria-labelledby="secret-h" tabIndex={-1} ref={box}>
      <h2 id="secret-h">
        Token <span class="mono">{created.info.name}</span> created
      </h2>
      <p class="secret-warning" role="alert">
        <strong>Copy it now: this is the only time the token is shown.</strong> NBS keeps only its hash; if it is lost, revoke it and create another.
      </p>
      <div class="secret-row">
        <label class="sr-only" for="new-token">
          The new token
        </label>
        <input id="new-token" ref={field} class="mono secret" type="text" readOnly value={created.token} onFocus={(e) => (e.currentTarget as HTMLInputElement).select()} />
        <button type="button" class="btn btn-primary" onClick={() => doCopy(created.token, 'Token')}>
          Copy token
        </button>
        <button type="button" class="btn" onClick={() => doCopy(link, 'Login link')} title="A link that signs in with this token (the token is in the #fragment, which browsers do not send)">
          Copy login link
        </button>
      </div>
      <p class="muted small" role="status">
        {copied}
      </p>
      <p class="muted small">
        {created.info.role}
        {created.info.selector ? ` of ${selectorText(created.info.selector)}` : ''}, expires {formatTime(created.info.expires_at)} ({formatRelative(created.info.expires_at)}). Use it as <code>Authorization: Bearer …</code> or sign in with it.
      </p>
      <button type="button" class="btn btn-sm" onClick={onDone}>
        I have stored it — hide the token
      </button>
    </div>
  );
}

function TokenForm({ onCreated, onCancel }: { onCreated: (c: CreatedToken) => void; onCancel: () => void }) {
  const [draft, setDraft] = useState<TokenDraft>(emptyTokenDraft);
  const [errors, setErrors] = useState<TokenErrors>({});
  const [busy, setBusy] = useState(false);
  const nameField = useRef<HTMLInputElement>(null);
  useEffect(() => {
    nameField.current?.focus();
  }, []);
  const set = <K extends keyof TokenDraft>(k: K, v: TokenDraft[K]) => {
    setDraft((d) => ({ ...d, [k]: v }));
    setErrors((e) => ({ ...e, [k]: undefined, form: undefined }));
  };
  const submit = async (e: Event) => {
    e.preventDefault();
    const { req, errors: errs } = tokenRequest(draft);
    setErrors(errs);
    if (!req) return;
    setBusy(true);
    try {
      onCreated(await api.createToken(req));
    } catch (err) {
      setErrors(err instanceof ApiError && (err.status === 400 || err.status === 409) ? tokenErrors(err) : { form: (err as Error).message });
    } finally {
      setBusy(false);
    }
  };
  const err = (f: TokenField) =>
    errors[f] ? (
      <span class="field-error" id={`token-${f}-err`} role="alert">
        {errors[f]}
      </span>
    ) : null;
  const described = (f: TokenField) => (errors[f] ? { 'aria-invalid': true, 'aria-describedby': `token-${f}-err` } : {});
  return (
    <form class="panel token-form" onSubmit={submit} noValidate aria-label="New token">
      <h2>New token</h2>
      <div class="rule-grid">
        <div class="field">
          <label for="token-name">Name</label>
          <input ref={nameField} id="token-name" type="text" value={draft.name} maxLength={64} autoComplete="off" placeholder="alice, acme-portal" onInput={(e) => set('name', (e.currentTarget as HTMLInputElement).value)} {...described('name')} />
          {err('name')}
        </div>
        <div class="field">
          <label for="token-role">Role</label>
          <select id="token-role" value={draft.role} onChange={(e) => set('role', (e.currentTarget as HTMLSelectElement).value as Role)} {...described('role')}>
            {ROLES.map((r) => (
              <option key={r} value={r}>
                {r}
              </option>
            ))}
          </select>
          <span class="hint-text">{ROLE_TEXT[draft.role]}</span>
          {err('role')}
        </div>
        {draft.role === 'customer' && (
          <div class="field">
            <label for="token-selector">Node selector</label>
            <input id="token-selector" type="text" value={draft.selector} placeholder="customer=acme" onInput={(e) => set('selector', (e.currentTarget as HTMLInputElement).value)} {...described('selector')} />
            <span class="hint-text">The customer sees only nodes with all of these labels; to them every other node does not exist.</span>
            {err('selector')}
          </div>
        )}
        <div class="field">
          <label for="token-expires">Expires after</label>
          <select id="token-expires" value={EXPIRY_CHOICES.some(([v]) => v === draft.expires) ? draft.expires : 'custom'} onChange={(e) => {
            const v = (e.currentTarget as HTMLSelectElement).value;
            set('expires', v === 'custom' ? '180d' : v);
          }} {...described('expires')}>
            {EXPIRY_CHOICES.map(([v, label]) => (
              <option key={v} value={v}>
                {label}
              </option>
            ))}
            <option value="custom">other…</option>
          </select>
          {!EXPIRY_CHOICES.some(([v]) => v === draft.expires) && (
            <input type="text" aria-label="Lifetime (e.g. 180d or 720h)" value={draft.expires} onInput={(e) => set('expires', (e.currentTarget as HTMLInputElement).value)} {...described('expires')} />
          )}
          {err('expires')}
        </div>
      </div>
      {err('form')}
      <div class="form-actions">
        <button type="submit" class="btn btn-primary" disabled={busy}>
          {busy ? 'Creating…' : 'Create token'}
        </button>
        <button type="button" class="btn btn-quiet" onClick={onCancel} disabled={busy}>
          Cancel
        </button>
      </div>
    </form>
  );
}

function TokenRow({ t, mine, now, busy, onRevoke }: { t: Token; mine: boolean; now: number; busy: boolean; onRevoke: () => void }) {
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
  return (
    <tr class={`token-row token-${t.state}`} data-token={t.name} data-token-id={t.id} data-state={t.state}>
      <th scope="row" class="token-name">
        {t.name}
        {mine && <span class="tag">you</span>}
        <div class="muted small mono" title="The token's last four characters">
          …{t.hint}
        </div>
      </th>
      <td>
        <span class="tag">{t.role}</span>
      </td>
      <td class="mono">{selectorText(t.selector) || <span class="muted">—</span>}</td>
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
      <td class="nowrap">{t.last_used_at ? <time dateTime={t.last_used_at}>{formatRelative(t.last_used_at, now)}</time> : <span class="muted">never</span>}</td>
      <td class="nowrap">
        <span class={`badge badge-sm ${t.state === 'live' ? 'st-ok' : 'st-unknown'}`}>{t.state}</span>
        {t.revoked_by && t.state === 'revoked' && <div class="muted small">by {t.revoked_by}</div>}
        {t.state === 'void' && <div class="muted small">minted without authentication (--auth.mode=none): it works no more; revoke it</div>}
      </td>
      <td class="nowrap rule-actions" onKeyDown={(e) => confirming && e.key === 'Escape' && cancel()}>
        {(t.state === 'live' || t.state === 'void') &&
          (confirming ? (
            <span role="group" aria-label={`Revoke ${t.name}?`}>
              <span class="muted small">{mine ? 'You are signed in with it: revoking signs you out. Revoke? ' : 'Revoke? It stops working at once. '}</span>
              <button ref={confirmBtn} type="button" class="btn btn-sm btn-danger" disabled={busy} onClick={onRevoke}>
                Revoke {t.name}
              </button>{' '}
              <button type="button" class="btn btn-sm btn-quiet" onClick={cancel}>
                Keep
              </button>
            </span>
          ) : (
            <button ref={revokeBtn} type="button" class="btn btn-sm btn-quiet" disabled={busy} onClick={() => setConfirming(true)} aria-label={`Revoke ${t.name}…`}>
              Revoke…
            </button>
          ))}
      </td>
    </tr>
  );
}

/** API tokens, for admins: who may use the collector, create one (?new=1), revoke one. */
export function TokensPage({ params }: { params: URLSearchParams }) {
  const session = useSession();
  const can = useCan();
  const polled = usePoll('tokens', (s) => api.tokens(s), TOKENS_REFRESH_MS);
  const now = useNow(30_000);
  // The secret lives in this component's state only: never in the URL, the history or storage.
  const [created, setCreated] = useState<CreatedToken | null>(null);
  const [status, setStatus] = useState('');
  const [actionErr, setActionErr] = useState<Error | null>(null);
  const [busy, setBusy] = useState(false);
  const newBtn = useRef<HTMLButtonElement>(null);
  const creating = params.get('new') === '1';
  const showAll = params.get('all') === '1';

  useEffect(() => {
    document.title = 'Tokens · NBS';
  }, []);

  const go = (changes: Record<string, string | null>, replace = false) => navigate(tokensHref(withParams(params, changes)), { replace });
  const closeForm = () => {
    go({ new: null });
    requestAnimationFrame(() => newBtn.current?.focus());
  };

  const revoke = async (t: Token) => {
    setBusy(true);
    setActionErr(null);
    try {
      await api.revokeToken(t.id);
      setStatus(`Revoked ${t.name}: it no longer works, and its sessions have ended.`);
      polled.refresh();
    } catch (err) {
      setStatus('');
      setActionErr(err as Error);
    } finally {
      setBusy(false);
    }
  };

  const all = polled.data ?? [];
  // A void token (minted under --auth.mode=none) works no more but waits to be revoked: shown with the live ones.
  const current = (t: Token) => t.state === 'live' || t.state === 'void';
  const tokens = showAll ? all : all.filter(current);
  const dead = all.length - all.filter(current).length;
  return (
    <div class="page tokens-page">
      <div class="page-head">
        <h1>Tokens</h1>
        <div class="toolbar-spacer" />
        {!creating && !created && (
          <button ref={newBtn} type="button" class="btn btn-primary" onClick={() => go({ new: '1' })}>
            New token…
          </button>
        )}
      </div>
      <p class="muted small page-intro">
        A token signs in a person (at the login page) or a script (<code>Authorization: Bearer</code>). Its role decides what it may do: viewer reads, operator also changes thresholds and alert rules, admin also
        manages tokens; a customer sees only the nodes of its selector.
      </p>
      {status && (
        <p class="saved" role="status">
          {status}
        </p>
      )}
      {actionErr && <ErrorBox title="That did not work" error={actionErr} />}
      {created && (
        <NewSecret
          created={created}
          onDone={() => {
            setCreated(null);
            requestAnimationFrame(() => newBtn.current?.focus());
          }}
        />
      )}
      {creating && !created && (
        <TokenForm
          onCreated={(c) => {
            setCreated(c);
            setStatus('');
            polled.refresh();
            go({ new: null }, true);
          }}
          onCancel={closeForm}
        />
      )}

      {polled.data && <StaleNotice error={polled.error} />}
      {polled.loading && !polled.error && <Loading what="the tokens" />}
      {!polled.data && polled.error && <ErrorBox title="Cannot load the tokens" error={polled.error} onRetry={polled.refresh} />}
      {polled.data && tokens.length === 0 && <Empty>No live token. Create one with “New token…”.</Empty>}
      {tokens.length > 0 && (
        <div class="table-wrap table-page">
          <table class="tokens-table">
            <caption class="sr-only">{showAll ? 'Every token' : 'Live tokens'}</caption>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Role</th>
                <th scope="col">Selector</th>
                <th scope="col">Created</th>
                <th scope="col">Expires</th>
                <th scope="col">Last used</th>
                <th scope="col">State</th>
                <th scope="col">
                  <span class="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {tokens.map((t) => (
                <TokenRow key={t.id} t={t} mine={session?.me.token_id === t.id} now={now} busy={busy} onRevoke={() => revoke(t)} />
              ))}
            </tbody>
          </table>
        </div>
      )}
      {polled.data && (dead > 0 || showAll) && (
        <p>
          <button type="button" class="btn btn-sm btn-quiet" onClick={() => go({ all: showAll ? null : '1' }, true)} aria-pressed={showAll}>
            {showAll ? 'Show live tokens only' : `Also show ${dead} expired or revoked`}
          </button>
        </p>
      )}
      {can.bindLabels && <BootstrapTokens params={params} />}
    </div>
  );
}
