// Tenant bootstrap tokens, for admins (on the tokens page): a tenant's token
// enrolls new node names into its labels, so its fleet enrolls itself and no
// agent can choose another tenant. Listed without secrets; a new one is
// shown once, with the agent flag that takes it.
import { type BootstrapToken, type NewBootstrapToken, api } from '../api';
import { formatRelative, formatTime } from '../format';
import { tokensHref } from '../route';
import { bootstrapErrors, bootstrapRequest, bootstrapState, emptyBootstrapDraft, labelsText } from '../tenancy';
import { ConfirmCell } from './common';
import { ExpiryField, useCreateForm } from './form';
import { CreateSecretForm, CreatedCell, ExpiresCell, LiveBadge, type RowProps, SecretBox, SecretList } from './SecretList';

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
  const flag = `${AGENT_FLAG}=${TOKEN_FILE}`;
  const t = created.bootstrap_token;
  return (
    <SecretBox
      level="h3"
      headingId="bootstrap-secret-h"
      heading={
        <>
          Bootstrap token <span class="mono">{t.name}</span> created
        </>
      }
      fieldId="new-bootstrap-token"
      fieldLabel="The new bootstrap token"
      secret={created.token}
      what="Bootstrap token"
      other={{ label: 'Copy agent flag', text: flag, what: 'Agent flag' }}
      details={
        <p class="small">
          Put it in a file on each of the tenant's nodes (mode 0600), e.g. <code>{TOKEN_FILE}</code>, and start the agent with <code>nbs-agent {flag}</code>. Every node that enrolls with it is bound to{' '}
          <span class="mono">{labelsText(t.labels)}</span>, whatever its agent claims; it works until {formatTime(t.expires_at)} ({formatRelative(t.expires_at)})
          {t.max_nodes ? ` or until it has enrolled ${t.max_nodes} nodes` : ''}.
        </p>
      }
      onDone={onDone}
    />
  );
}

function BootstrapForm({ onCreated, onCancel }: { onCreated: (c: NewBootstrapToken) => void; onCancel: () => void }) {
  const form = useCreateForm({
    empty: emptyBootstrapDraft,
    check: bootstrapRequest,
    create: (req) => api.createBootstrapToken(req),
    refused: (err) => bootstrapErrors(err.status, err.message),
    onCreated,
    prefix: 'bootstrap',
  });
  const { draft, set, err, described } = form;
  return (
    <CreateSecretForm one="bootstrap token" level="h3" form={form} namePlaceholder="acme-eu" onCancel={onCancel}>
      <div class="field">
        <label for="bootstrap-labels">Labels of the nodes it enrolls</label>
        <input id="bootstrap-labels" type="text" value={draft.labels} autoComplete="off" spellcheck={false} placeholder="customer=acme, region=eu" onInput={(e) => set('labels', (e.currentTarget as HTMLInputElement).value)} {...described('labels')} />
        <span class="hint-text">label=value, separated by commas; they must name the tenant (customer=…, or this collector's --tenant.label).</span>
        {err('labels')}
      </div>
      <ExpiryField
        id="bootstrap-expires"
        choices={BOOTSTRAP_EXPIRY}
        value={draft.expires}
        onChange={(v) => set('expires', v)}
        described={described('expires')}
        error={err('expires')}
        hint="Enrollment is a rollout's moment, not a standing door."
      />
      <div class="field">
        <label for="bootstrap-max">Most nodes it may enroll</label>
        <input id="bootstrap-max" type="text" inputMode="numeric" value={draft.maxNodes} autoComplete="off" placeholder="no limit" onInput={(e) => set('maxNodes', (e.currentTarget as HTMLInputElement).value)} {...described('maxNodes')} />
        {err('maxNodes')}
      </div>
    </CreateSecretForm>
  );
}

function BootstrapRow({ t, now, busy, onRevoke }: RowProps<BootstrapToken>) {
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
      <CreatedCell at={t.created_at} by={t.created_by} now={now} />
      <ExpiresCell at={t.expires_at} now={now} />
      <td class="nowrap">
        <LiveBadge state={state} />
      </td>
      <ConfirmCell
        show={state === 'live'}
        busy={busy}
        trigger="Revoke…"
        triggerLabel={`Revoke bootstrap token ${t.name}…`}
        question={`Revoke bootstrap token ${t.name}?`}
        prompt="Revoke? No new node enrolls with it; the nodes it enrolled keep their credentials and tenant. "
        confirm={`Revoke ${t.name}`}
        onConfirm={onRevoke}
      />
    </tr>
  );
}

/** The tenants' bootstrap tokens: list (?bootall=1 with dead ones), create (?new=bootstrap), revoke. */
export function BootstrapTokens({ params }: { params: URLSearchParams }) {
  return (
    <section class="bootstrap-section" aria-labelledby="bootstrap-h">
      <SecretList
        params={params}
        href={tokensHref}
        newValue="bootstrap"
        allParam="bootall"
        poll={{ key: 'bootstrap-tokens', fetch: (s) => api.bootstrapTokens(s), every: 30_000 }}
        one="bootstrap token"
        many="bootstrap tokens"
        heading={<h2 id="bootstrap-h">Node bootstrap tokens</h2>}
        newClass="btn"
        intro={
          <>
            A tenant's bootstrap token enrolls new node names into its labels: every node that enrolls with it is that tenant's, whatever its agent claims. Give it to the tenant's agents (
            <code>{AGENT_FLAG}</code>). Revoking it stops new enrollments; the nodes it enrolled keep their credentials and tenant. To move one node to another tenant, use “Tenant &amp; labels…” on its page.
          </>
        }
        missing="This collector has no tenant bootstrap tokens."
        isLive={(t, now) => bootstrapState(t, now) === 'live'}
        showDead={(n) => `Also show ${n} expired or revoked bootstrap tokens`}
        revoke={(t) => api.revokeBootstrapToken(t.name)}
        revoked={(t) => `Revoked bootstrap token ${t.name}: no new node enrolls with it.`}
        Secret={NewBootstrapSecret}
        createdId={(c) => c.bootstrap_token.id}
        Form={BootstrapForm}
        tableClass="tokens-table bootstrap-table"
        columns={['Name', 'Labels', 'Enrolled', 'Created', 'Expires', 'State']}
        Row={BootstrapRow}
      />
    </section>
  );
}
