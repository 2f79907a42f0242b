// Pieces the forms share: a field's message and the attributes that tie the
// field to it, the Save/Cancel row, the lifetime picker, and the state of a
// form that creates one thing.
import type { ComponentChildren } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError } from '../api';

/** The attributes that tie a field to its message, when it has one. */
export type Described = { 'aria-invalid'?: boolean; 'aria-describedby'?: string };

/**
 * A form's messages by field: err(f) is the message shown by field f (id
 * `${prefix}-${f}-err`, announced), described(f) ties the field to it.
 */
export function fieldErrors<F extends string>(errors: Partial<Record<F, string>>, prefix: string) {
  const id = (f: F) => `${prefix}-${f}-err`;
  const err = (f: F) =>
    errors[f] ? (
      <span class="field-error" id={id(f)} role="alert">
        {errors[f]}
      </span>
    ) : null;
  const described = (f: F): Described => (errors[f] ? { 'aria-invalid': true, 'aria-describedby': id(f) } : {});
  return { err, described };
}

/** The submit button (busyText while busy) and Cancel. */
export function FormActions({ busy, submit, busyText, onCancel }: { busy: boolean; submit: string; busyText: string; onCancel: () => void }) {
  return (
    <div class="form-actions">
      <button type="submit" class="btn btn-primary" disabled={busy}>
        {busy ? busyText : submit}
      </button>
      <button type="button" class="btn btn-quiet" onClick={onCancel} disabled={busy}>
        Cancel
      </button>
    </div>
  );
}

/** A lifetime from choices ([value, text]; '' is the default) or typed in (other…: 180d to start with). */
export function ExpiryField({ id, choices, value, onChange, described, error, hint }: { id: string; choices: [string, string][]; value: string; onChange: (v: string) => void; described: Described; error: ComponentChildren; hint?: string }) {
  const custom = !choices.some(([v]) => v === value);
  return (
    <div class="field">
      <label for={id}>Expires after</label>
      <select
        id={id}
        value={custom ? 'custom' : value}
        onChange={(e) => {
          const v = (e.currentTarget as HTMLSelectElement).value;
          onChange(v === 'custom' ? '180d' : v);
        }}
        {...described}
      >
        {choices.map(([v, label]) => (
          <option key={v} value={v}>
            {label}
          </option>
        ))}
        <option value="custom">other…</option>
      </select>
      {custom && <input type="text" aria-label="Lifetime (e.g. 180d or 720h)" value={value} onInput={(e) => onChange((e.currentTarget as HTMLInputElement).value)} {...described} />}
      {hint && <span class="hint-text">{hint}</span>}
      {error}
    </div>
  );
}

type Errors<F extends string> = Partial<Record<F | 'form', string>>;

export interface CreateFormOptions<D, F extends string, Req, C> {
  empty: () => D;
  /** The request for a draft, or what is wrong with it. */
  check: (d: D) => { req?: Req; errors: Errors<F> };
  create: (req: Req) => Promise<C>;
  /** The collector's 400 or 409, by field. */
  refused: (err: ApiError) => Errors<F>;
  onCreated: (c: C) => void;
  /** Of the ids: `${prefix}-${f}-err`. */
  prefix: string;
}

/**
 * A form that creates one thing: its draft, its messages by field (a field's
 * cleared as it changes), focus on the first field (ref first), and submit,
 * which checks the draft, sends it and hands on what was created.
 */
export function useCreateForm<D, F extends string, Req, C>({ empty, check, create, refused, onCreated, prefix }: CreateFormOptions<D, F, Req, C>) {
  const [draft, setDraft] = useState<D>(empty);
  const [errors, setErrors] = useState<Errors<F>>({});
  const [busy, setBusy] = useState(false);
  const first = useRef<HTMLInputElement>(null);
  useEffect(() => {
    first.current?.focus();
  }, []);
  const set = <K extends keyof D>(k: K, v: D[K]) => {
    setDraft((d) => ({ ...d, [k]: v }));
    setErrors((e) => ({ ...e, [k]: undefined, form: undefined }));
  };
  const submit = async (e: Event) => {
    e.preventDefault();
    const { req, errors: errs } = check(draft);
    setErrors(errs);
    if (!req) return;
    setBusy(true);
    try {
      onCreated(await create(req));
    } catch (err) {
      setErrors(err instanceof ApiError && (err.status === 400 || err.status === 409) ? refused(err) : ({ form: (err as Error).message } as Errors<F>));
    } finally {
      setBusy(false);
    }
  };
  return { draft, busy, first, set, submit, prefix, ...fieldErrors<F | 'form'>(errors, prefix) };
}
