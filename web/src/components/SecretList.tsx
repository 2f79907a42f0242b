// A list of secrets that are created once and revoked (API tokens, tenant
// bootstrap tokens): the list without secrets, the form that creates one
// (?new=…), the new secret shown this once, and revoking after confirming.
import type { ComponentChildren, ComponentType, VNode } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import { formatRelative, formatTime } from '../format';
import { useAction, useNow, usePoll } from '../hooks';
import { navigate, withParams } from '../route';
import { Empty, ErrorBox, Loading, StaleNotice, TableHead, copy, TableWrap } from './common';
import { type Described, FormActions } from './form';

type Heading = 'h2' | 'h3';

/**
 * A new secret, this once: the field to copy it from, a copy button for it
 * and one for what goes with it (other), the warning that it will not come
 * back, details, and the button that hides it. Focus moves to the box.
 */
export function SecretBox({
  level,
  headingId,
  heading,
  fieldId,
  fieldLabel,
  secret,
  what,
  other,
  details,
  onDone,
}: {
  level: Heading;
  headingId: string;
  heading: ComponentChildren;
  fieldId: string;
  fieldLabel: string;
  secret: string;
  /** What "… copied." names the secret. */
  what: string;
  /** The second copy button: its text, what it copies and what "… copied." names it. */
  other: { label: string; text: string; what: string; title?: string };
  details: ComponentChildren;
  onDone: () => void;
}) {
  const field = useRef<HTMLInputElement>(null);
  const box = useRef<HTMLDivElement>(null);
  const [copied, setCopied] = useState('');
  useEffect(() => {
    box.current?.focus();
  }, []);
  const doCopy = async (text: string, name: string) => setCopied((await copy(text, field.current)) ? `${name} copied.` : 'Copying was refused: the token is selected, press Ctrl+C.');
  const H = level;
  return (
    <div class="secret-box" role="region" aria-labelledby={headingId} tabIndex={-1} ref={box}>
      <H id={headingId}>{heading}</H>
      <p class="secret-warning" role="alert">
        <strong>Copy it now: this is the only time the token is shown.</strong> NBS keeps only its hash; if it is lost, revoke it and create another.
      </p>
      <div class="secret-row">
        <label class="sr-only" for={fieldId}>
          {fieldLabel}
        </label>
        <input id={fieldId} ref={field} class="mono secret" type="text" readOnly value={secret} onFocus={(e) => (e.currentTarget as HTMLInputElement).select()} />
        <button type="button" class="btn btn-primary" onClick={() => doCopy(secret, what)}>
          Copy token
        </button>
        <button type="button" class="btn" onClick={() => doCopy(other.text, other.what)} title={other.title}>
          {other.label}
        </button>
      </div>
      <p class="muted small" role="status">
        {copied}
      </p>
      {details}
      <button type="button" class="btn btn-sm" onClick={onDone}>
        I have stored it — hide the token
      </button>
    </div>
  );
}

/**
 * The form that creates one ("New {one}", from useCreateForm): its first
 * field is the name (`${form.prefix}-name`), then children; the form's own
 * message, and "Create {one}" with Cancel.
 */
export function CreateSecretForm({
  one,
  level,
  form,
  namePlaceholder,
  onCancel,
  children,
}: {
  one: string;
  level: Heading;
  form: {
    draft: { name: string };
    busy: boolean;
    first: { current: HTMLInputElement | null };
    set: (k: 'name', v: string) => void;
    submit: (e: Event) => void;
    err: (f: 'name' | 'form') => VNode | null;
    described: (f: 'name') => Described;
    prefix: string;
  };
  namePlaceholder: string;
  onCancel: () => void;
  children: ComponentChildren;
}) {
  const H = level;
  const id = `${form.prefix}-name`;
  return (
    <form class="panel token-form" onSubmit={form.submit} noValidate aria-label={`New ${one}`}>
      <H>{`New ${one}`}</H>
      <div class="rule-grid">
        <div class="field">
          <label for={id}>Name</label>
          <input ref={form.first} id={id} type="text" value={form.draft.name} maxLength={64} autoComplete="off" placeholder={namePlaceholder} onInput={(e) => form.set('name', (e.currentTarget as HTMLInputElement).value)} {...form.described('name')} />
          {form.err('name')}
        </div>
        {children}
      </div>
      {form.err('form')}
      <FormActions busy={form.busy} submit={`Create ${one}`} busyText="Creating…" onCancel={onCancel} />
    </form>
  );
}

/** When it was created and by whom. */
export function CreatedCell({ at, by, now }: { at: string; by: string; now: number }) {
  return (
    <td class="nowrap">
      <time dateTime={at} title={at}>
        {formatTime(at, new Date(now))}
      </time>
      <div class="muted small">by {by}</div>
    </td>
  );
}

/** When it expires, from now. */
export function ExpiresCell({ at, now }: { at: string; now: number }) {
  return (
    <td class="nowrap">
      <time dateTime={at} title={at}>
        {formatRelative(at, now)}
      </time>
    </td>
  );
}

/** live, or what it is instead (expired, revoked, void). */
export function LiveBadge({ state }: { state: string }) {
  return <span class={`badge badge-sm ${state === 'live' ? 'st-ok' : 'st-unknown'}`}>{state}</span>;
}

export interface RowProps<T> {
  t: T;
  now: number;
  busy: boolean;
  onRevoke: () => void;
}

export interface SecretListProps<T extends { id: number }, C> {
  params: URLSearchParams;
  /** The page's address with other parameters. */
  href: (p: URLSearchParams) => string;
  /** The value of ?new= that opens the form. */
  newValue: string;
  /** The parameter (=1) that also lists the expired and revoked. */
  allParam: string;
  poll: { key: string; fetch: (s: AbortSignal) => Promise<T[]>; every: number };
  /** What one is called (token), and many (tokens). */
  one: string;
  many: string;
  heading: VNode;
  newClass: string;
  intro: ComponentChildren;
  /** Said instead of the list where the collector has no such API (a 404 for the route). */
  missing?: string;
  isLive: (t: T, now: number) => boolean;
  /** The text of the button that also lists n expired or revoked. */
  showDead: (n: number) => string;
  revoke: (t: T) => Promise<unknown>;
  /** The status line after revoking t. */
  revoked: (t: T) => string;
  Secret: ComponentType<{ created: C; onDone: () => void }>;
  /** Which listed one a new secret is: revoking it takes its secret off the screen. */
  createdId: (c: C) => number;
  Form: ComponentType<{ onCreated: (c: C) => void; onCancel: () => void }>;
  tableClass: string;
  columns: string[];
  Row: ComponentType<RowProps<T>>;
}

/**
 * The list and its actions. The new secret lives in this component's state
 * only: never in the URL, the history or storage.
 */
export function SecretList<T extends { id: number }, C>(p: SecretListProps<T, C>) {
  const { params, one, many, Secret, Form, Row } = p;
  const polled = usePoll(p.poll.key, p.poll.fetch, p.poll.every);
  const now = useNow(30_000);
  const [created, setCreated] = useState<C | null>(null);
  const { status, setStatus, error: actionErr, busy, act } = useAction(polled.refresh);
  const newBtn = useRef<HTMLButtonElement>(null);
  const creating = params.get('new') === p.newValue;
  const showAll = params.get(p.allParam) === '1';

  const go = (changes: Record<string, string | null>, replace = false) => navigate(p.href(withParams(params, changes)), { replace });
  const closeForm = () => {
    go({ new: null });
    requestAnimationFrame(() => newBtn.current?.focus());
  };

  const noRoute = p.missing !== undefined && polled.error?.notFound && /route/i.test(polled.error.message);
  const all = polled.data ?? [];
  const live = all.filter((t) => p.isLive(t, now));
  const shown = showAll ? all : live;
  const dead = all.length - live.length;
  return (
    <>
      <div class="page-head">
        {p.heading}
        <div class="toolbar-spacer" />
        {!creating && !created && !noRoute && (
          <button ref={newBtn} type="button" class={p.newClass} onClick={() => go({ new: p.newValue })}>
            {`New ${one}…`}
          </button>
        )}
      </div>
      <p class="muted small page-intro">{p.intro}</p>
      {status && (
        <p class="saved" role="status">
          {status}
        </p>
      )}
      {actionErr && <ErrorBox title="That did not work" error={actionErr} />}
      {created && (
        <Secret
          created={created}
          onDone={() => {
            setCreated(null);
            requestAnimationFrame(() => newBtn.current?.focus());
          }}
        />
      )}
      {creating && !created && (
        <Form
          onCreated={(c) => {
            setCreated(c);
            setStatus('');
            polled.refresh();
            go({ new: null }, true);
          }}
          onCancel={closeForm}
        />
      )}
      {noRoute && <Empty>{p.missing}</Empty>}
      {polled.data && <StaleNotice error={polled.error} />}
      {polled.loading && !polled.error && <Loading what={`the ${many}`} />}
      {!polled.data && polled.error && !noRoute && <ErrorBox title={`Cannot load the ${many}`} error={polled.error} onRetry={polled.refresh} />}
      {polled.data && shown.length === 0 && <Empty>{`No live ${one}. Create one with “New ${one}…”.`}</Empty>}
      {shown.length > 0 && (
        <TableWrap page label={showAll ? `Table of every ${one}` : `Table of live ${many}`}>
          <table class={p.tableClass}>
            <caption class="sr-only">{showAll ? `Every ${one}` : `Live ${many}`}</caption>
            <TableHead columns={p.columns} actions />
            <tbody>
              {shown.map((t) => (
                <Row
                  key={t.id}
                  t={t}
                  now={now}
                  busy={busy}
                  onRevoke={() => {
                    // A secret that no longer works is not left on the screen to be copied.
                    if (created && p.createdId(created) === t.id) setCreated(null);
                    act(() => p.revoke(t), p.revoked(t));
                  }}
                />
              ))}
            </tbody>
          </table>
        </TableWrap>
      )}
      {polled.data && (dead > 0 || showAll) && (
        <p>
          <button type="button" class="btn btn-sm btn-quiet" onClick={() => go({ [p.allParam]: showAll ? null : '1' }, true)} aria-pressed={showAll}>
            {showAll ? `Show live ${many} only` : p.showDead(dead)}
          </button>
        </p>
      )}
    </>
  );
}
