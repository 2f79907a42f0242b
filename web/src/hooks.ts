import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, isAbort } from './api';

export interface Polled<T> {
  data: T | undefined;
  error: ApiError | null;
  loading: boolean; // no data yet and a request is in flight
  refresh: () => void;
}

function toApiError(err: unknown): ApiError {
  return err instanceof ApiError ? err : new ApiError(0, 'client', (err as Error)?.message ?? String(err));
}

/**
 * Loads with fetcher and reloads every intervalMs (0: once) while the page is visible.
 * Keeps the last data when a reload fails, so a live view never blanks out; when key
 * changes, the data is dropped and loaded afresh.
 */
export function usePoll<T>(key: string, fetcher: (signal: AbortSignal) => Promise<T>, intervalMs: number): Polled<T> {
  const [state, setState] = useState<{ key: string; data?: T; error: ApiError | null; inflight: boolean }>({ key, error: null, inflight: true });
  const fetchRef = useRef(fetcher);
  fetchRef.current = fetcher;
  const [tick, setTick] = useState(0);
  const refresh = useCallback(() => setTick((t) => t + 1), []);

  useEffect(() => {
    const ctl = new AbortController();
    let timer: ReturnType<typeof setTimeout> | undefined;
    let alive = true;
    const run = async () => {
      setState((s) => (s.key === key ? { ...s, inflight: true } : { key, error: null, inflight: true }));
      try {
        const data = await fetchRef.current(ctl.signal);
        if (alive) setState({ key, data, error: null, inflight: false });
      } catch (err) {
        if (!alive || isAbort(err)) return;
        setState((s) => ({ ...(s.key === key ? s : { key }), error: toApiError(err), inflight: false }));
      }
      if (alive && intervalMs > 0) timer = setTimeout(schedule, intervalMs);
    };
    const schedule = () => {
      if (!alive) return;
      if (document.hidden) timer = setTimeout(schedule, 1000);
      else void run();
    };
    void run();
    return () => {
      alive = false;
      ctl.abort();
      clearTimeout(timer);
    };
  }, [key, intervalMs, tick]);

  const current = state.key === key;
  return {
    data: current ? state.data : undefined,
    error: current ? state.error : null,
    loading: !current || (state.data === undefined && state.inflight),
    refresh,
  };
}

/** Re-renders every ms milliseconds (for "5s ago" texts). */
/**
 * A page's actions on what it lists: act runs one (busy meanwhile); done, the
 * status line says so and refresh fetches the list again; failed, its error
 * is kept for the page to show and the status line cleared.
 */
export function useAction(refresh: () => void) {
  const [status, setStatus] = useState('');
  const [error, setError] = useState<Error | null>(null);
  const [busy, setBusy] = useState(false);
  const act = async (what: () => Promise<unknown>, done: string) => {
    setBusy(true);
    setError(null);
    try {
      await what();
      setStatus(done);
      refresh();
    } catch (err) {
      setStatus('');
      setError(err as Error);
    } finally {
      setBusy(false);
    }
  };
  return { status, setStatus, error, setError, busy, act };
}

export function useNow(ms: number): number {
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => {
    const id = setInterval(() => setNow(Date.now()), ms);
    return () => clearInterval(id);
  }, [ms]);
  return now;
}

/** The effective colour scheme, following the toggle and the system preference. */
export function useScheme(): 'light' | 'dark' {
  const read = (): 'light' | 'dark' => {
    const t = document.documentElement.dataset.theme;
    if (t === 'light' || t === 'dark') return t;
    return typeof matchMedia === 'function' && matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'light';
  };
  const [scheme, setScheme] = useState(read);
  useEffect(() => {
    const on = () => setScheme(read());
    const mq = typeof matchMedia === 'function' ? matchMedia('(prefers-color-scheme: dark)') : null;
    mq?.addEventListener?.('change', on);
    window.addEventListener('nbs:theme', on);
    return () => {
      mq?.removeEventListener?.('change', on);
      window.removeEventListener('nbs:theme', on);
    };
  }, []);
  return scheme;
}
