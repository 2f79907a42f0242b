import type { ComponentChildren } from 'preact';
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
