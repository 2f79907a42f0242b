import type { ComponentChildren } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import type { ApiError } from '../api';
import { normState, stateLabel } from '../state';

export function StateBadge({ state, small }: { state: string; small?: boolean }) {
  const s = normState(state);
  return <span class={`badge st-${s}${small ? ' badge-sm' : ''}`}>{stateLabel[s]}</span>;
}

export function StateDot({ state }: { state: string }) {
  const s = normState(state);
  return <span class={`dot st-${s}`} role="img" aria-label={stateLabel[s]} title={stateLabel[s]} />;
}

export function ErrorBox({ error, title, onRetry }: { error: ApiError | Error; title?: string; onRetry?: () => void }) {
  return (
    <div class="error-box" role="alert">
      <strong>{title ?? 'Something went wrong'}</strong>
      <span class="error-msg">{error.message}</span>
      {onRetry && (
        <button type="button" class="btn btn-sm" onClick={onRetry}>
          Retry
        </button>
      )}
    </div>
  );
}

export function Loading({ what }: { what: string }) {
  return (
    <div class="loading" role="status" aria-live="polite">
      <span class="spinner" aria-hidden="true" /> Loading {what}…
    </div>
  );
}

export function Empty({ children }: { children: ComponentChildren }) {
  return <div class="empty">{children}</div>;
}

/** A small inline notice that a refresh failed while older data is still shown. */
export function StaleNotice({ error }: { error: ApiError | null }) {
  if (!error) return null;
  return (
    <div class="stale-notice" role="status">
      Refresh failed: {error.message} Showing the last data received; retrying.
    </div>
  );
}

/** Copies text; where the clipboard API is refused, selects the field for the user to copy. */
export async function copy(text: string, field: HTMLInputElement | null): Promise<boolean> {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    field?.focus();
    field?.select();
    return false;
  }
}

/**
 * A table row's actions cell for a step that cannot be undone: the trigger
 * button asks first ("prompt [confirm] [Keep]", focus on confirm); Keep or
 * Escape goes back, focus on the trigger. Without show the cell is empty;
 * before stands ahead of the trigger.
 */
export function ConfirmCell({
  show = true,
  busy,
  trigger,
  triggerLabel,
  question,
  prompt,
  confirm,
  onConfirm,
  before,
}: {
  show?: boolean;
  busy: boolean;
  /** The trigger's text, and its accessible name. */
  trigger: string;
  triggerLabel: string;
  /** The confirmation's accessible name. */
  question: string;
  prompt: string;
  /** The confirming button's text. */
  confirm: string;
  onConfirm: () => void;
  before?: ComponentChildren;
}) {
  const [confirming, setConfirming] = useState(false);
  const confirmBtn = useRef<HTMLButtonElement>(null);
  const triggerBtn = useRef<HTMLButtonElement>(null);
  useEffect(() => {
    if (confirming) confirmBtn.current?.focus();
  }, [confirming]);
  const cancel = () => {
    setConfirming(false);
    requestAnimationFrame(() => triggerBtn.current?.focus());
  };
  return (
    <td class="nowrap rule-actions" onKeyDown={(e) => confirming && e.key === 'Escape' && cancel()}>
      {show &&
        (confirming ? (
          <span role="group" aria-label={question}>
            <span class="muted small">{prompt}</span>
            <button ref={confirmBtn} type="button" class="btn btn-sm btn-danger" disabled={busy} onClick={onConfirm}>
              {confirm}
            </button>{' '}
            <button type="button" class="btn btn-sm btn-quiet" onClick={cancel}>
              Keep
            </button>
          </span>
        ) : (
          <>
            {before}
            {before && ' '}
            <button ref={triggerBtn} type="button" class="btn btn-sm btn-quiet" disabled={busy} onClick={() => setConfirming(true)} aria-label={triggerLabel}>
              {trigger}
            </button>
          </>
        ))}
    </td>
  );
}

/** A table's column headers, and with actions an unnamed-on-screen one for the rows' buttons. */
export function TableHead({ columns, actions }: { columns: string[]; actions: boolean }) {
  return (
    <thead>
      <tr>
        {columns.map((c) => (
          <th key={c} scope="col">
            {c}
          </th>
        ))}
        {actions && (
          <th scope="col">
            <span class="sr-only">Actions</span>
          </th>
        )}
      </tr>
    </thead>
  );
}

// TableWrap scrolls a wide table sideways on a narrow screen. It takes the
// keyboard focus so that the scrolling works without a mouse too; with a
// label it is a named region (axe's scrollable-region-focusable). page
// gives it the full-page tables' frame.
export function TableWrap({ label, page, children }: { label?: string; page?: boolean; children: ComponentChildren }) {
  return (
    <div class={page ? 'table-wrap table-page' : 'table-wrap'} tabIndex={0} role={label ? 'region' : undefined} aria-label={label}>
      {children}
    </div>
  );
}
