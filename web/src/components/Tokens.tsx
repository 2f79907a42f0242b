import { useEffect } from 'preact/hooks';
import type { CreateTokenRequest, CreatedToken, Role, Token } from '../access';
import { parseLabelList } from '../alerts';
import { type ApiError, api } from '../api';
import { ROLES, ROLE_TEXT, selectorText, useCan, useSession } from '../auth';
import { formatRelative, formatTime } from '../format';
import { tokensHref } from '../route';
import { BootstrapTokens } from './BootstrapTokens';
import { ConfirmCell } from './common';
import { ExpiryField, useCreateForm } from './form';
import { CreateSecretForm, CreatedCell, ExpiresCell, LiveBadge, type RowProps, SecretBox, SecretList } from './SecretList';

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
  const link = `${location.origin}/login#token=${created.token}`;
  return (
    <SecretBox
      level="h2"
      headingId="secret-h"
      heading={
        <>
          Token <span class="mono">{created.info.name}</span> created
        </>
      }
      fieldId="new-token"
      fieldLabel="The new token"
      secret={created.token}
      what="Token"
      other={{ label: 'Copy login link', text: link, what: 'Login link', title: 'A link that signs in with this token (the token is in the #fragment, which browsers do not send)' }}
      details={
        <p class="muted small">
          {created.info.role}
          {created.info.selector ? ` of ${selectorText(created.info.selector)}` : ''}, expires {formatTime(created.info.expires_at)} ({formatRelative(created.info.expires_at)}). Use it as <code>Authorization: Bearer …</code> or sign in with it.
        </p>
      }
      onDone={onDone}
    />
  );
}

function TokenForm({ onCreated, onCancel }: { onCreated: (c: CreatedToken) => void; onCancel: () => void }) {
  const form = useCreateForm({ empty: emptyTokenDraft, check: tokenRequest, create: (req) => api.createToken(req), refused: tokenErrors, onCreated, prefix: 'token' });
  const { draft, set, err, described } = form;
  return (
    <CreateSecretForm one="token" level="h2" form={form} namePlaceholder="alice, acme-portal" onCancel={onCancel}>
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
      <ExpiryField id="token-expires" choices={EXPIRY_CHOICES} value={draft.expires} onChange={(v) => set('expires', v)} described={described('expires')} error={err('expires')} />
    </CreateSecretForm>
  );
}

// A void token (minted under --auth.mode=none) works no more but waits to be revoked: shown with the live ones.
const isCurrent = (t: Token) => t.state === 'live' || t.state === 'void';

function TokenRow({ t, now, busy, onRevoke }: RowProps<Token>) {
  const mine = useSession()?.me.token_id === t.id;
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
      <CreatedCell at={t.created_at} by={t.created_by} now={now} />
      <ExpiresCell at={t.expires_at} now={now} />
      <td class="nowrap">{t.last_used_at ? <time dateTime={t.last_used_at}>{formatRelative(t.last_used_at, now)}</time> : <span class="muted">never</span>}</td>
      <td class="nowrap">
        <LiveBadge state={t.state} />
        {t.revoked_by && t.state === 'revoked' && <div class="muted small">by {t.revoked_by}</div>}
        {t.state === 'void' && <div class="muted small">minted without authentication (--auth.mode=none): it works no more; revoke it</div>}
      </td>
      <ConfirmCell
        show={isCurrent(t)}
        busy={busy}
        trigger="Revoke…"
        triggerLabel={`Revoke ${t.name}…`}
        question={`Revoke ${t.name}?`}
        prompt={mine ? 'You are signed in with it: revoking signs you out. Revoke? ' : 'Revoke? It stops working at once. '}
        confirm={`Revoke ${t.name}`}
        onConfirm={onRevoke}
      />
    </tr>
  );
}

/** API tokens, for admins: who may use the collector, create one (?new=1), revoke one. */
export function TokensPage({ params }: { params: URLSearchParams }) {
  const can = useCan();
  useEffect(() => {
    document.title = 'Tokens · NBS';
  }, []);
  return (
    <div class="page tokens-page">
      <SecretList
        params={params}
        href={tokensHref}
        newValue="1"
        allParam="all"
        poll={{ key: 'tokens', fetch: (s) => api.tokens(s), every: TOKENS_REFRESH_MS }}
        one="token"
        many="tokens"
        heading={<h1>Tokens</h1>}
        newClass="btn btn-primary"
        intro={
          <>
            A token signs in a person (at the login page) or a script (<code>Authorization: Bearer</code>). Its role decides what it may do: viewer reads, operator also changes thresholds and alert rules, admin also
            manages tokens; a customer sees only the nodes of its selector.
          </>
        }
        isLive={isCurrent}
        showDead={(n) => `Also show ${n} expired or revoked`}
        revoke={(t) => api.revokeToken(t.id)}
        revoked={(t) => `Revoked ${t.name}: it no longer works, and its sessions have ended.`}
        Secret={NewSecret}
        createdId={(c) => c.info.id}
        Form={TokenForm}
        tableClass="tokens-table"
        columns={['Name', 'Role', 'Selector', 'Created', 'Expires', 'Last used', 'State']}
        Row={TokenRow}
      />
      {can.bindLabels && <BootstrapTokens params={params} />}
    </div>
  );
}
