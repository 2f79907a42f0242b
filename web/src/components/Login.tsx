import { useEffect, useRef, useState } from 'preact/hooks';
import type { WhoAmI } from '../access';
import { ApiError, api } from '../api';
import { loginReason, safeNext, tokenFromHash } from '../auth';
import { BareShell } from './Shell';

/** What a failed sign-in tells the user. */
export function loginError(err: unknown): string {
  if (err instanceof ApiError) {
    if (err.status === 401) return 'This token is not valid or has expired. Ask an admin for a new one, or create one with nbs-collector token create.';
    if (err.status === 429) return `Too many attempts: ${err.message}`;
    return err.message;
  }
  return (err as Error)?.message ?? String(err);
}

interface Props {
  params: URLSearchParams;
  /** Called with the collector's whoami once the session cookie is set. */
  onLoggedIn: (me: WhoAmI) => void;
}

/**
 * Sign in with an API token: pasted into the form, or carried by a login
 * link's fragment (/login#token=…), which is taken out of the address bar and
 * the history before anything else happens. The collector answers with an
 * HttpOnly session cookie, so the token itself is kept nowhere in the page.
 */
export function LoginPage({ params, onLoggedIn }: Props) {
  const [token, setToken] = useState('');
  const [error, setError] = useState('');
  const [busy, setBusy] = useState(false);
  const [viaLink, setViaLink] = useState(false);
  const input = useRef<HTMLInputElement>(null);
  const next = safeNext(params.get('next'));
  const reason = loginReason(params);

  const signIn = async (t: string) => {
    setBusy(true);
    setError('');
    try {
      const me = await api.login(t);
      onLoggedIn(me);
    } catch (err) {
      setError(loginError(err));
      setBusy(false);
      requestAnimationFrame(() => input.current?.focus());
    }
  };

  const latest = useRef(signIn);
  latest.current = signIn;

  useEffect(() => {
    document.title = 'Sign in · NBS';
    // A login link opened here, or pasted into a tab already on this page.
    const fromLink = () => {
      const t = tokenFromHash(location.hash);
      if (!t) return false;
      // Out of the address bar and the history first: the page may be
      // left, bookmarked or shared before the answer comes.
      history.replaceState(history.state, '', location.pathname + location.search);
      setViaLink(true);
      void latest.current(t);
      return true;
    };
    if (!fromLink()) input.current?.focus();
    window.addEventListener('hashchange', fromLink);
    return () => window.removeEventListener('hashchange', fromLink);
  }, []);

  const submit = (e: Event) => {
    e.preventDefault();
    const t = token.trim();
    if (!t) {
      setError('Paste a token first.');
      input.current?.focus();
      return;
    }
    setViaLink(false);
    void signIn(t);
  };

  return (
    <BareShell>
        <div class="panel login-card">
          <h1>Sign in</h1>
          {reason === 'ended' && (
            <p class="notice session-ended" role="status">
              Your session ended: it expired or was revoked. Sign in again{next !== '/' ? ' to return where you were.' : '.'}
            </p>
          )}
          {reason === 'signed-out' && (
            <p class="notice session-ended" role="status">
              You signed out.
            </p>
          )}
          {next !== '/' && (
            <p class="muted">
              Sign in to continue to <code class="break">{next}</code>.
            </p>
          )}
          {busy && viaLink && (
            <p class="loading" role="status">
              <span class="spinner" aria-hidden="true" /> Signing in with the token from the link…
            </p>
          )}
          {error && (
            <p class="error-box" role="alert" id="login-error">
              <span class="error-msg">{error}</span>
            </p>
          )}
          <form class="login-form" onSubmit={submit} noValidate aria-label="Sign in with a token">
            <div class="field">
              <label for="login-token">API token</label>
              <input
                ref={input}
                id="login-token"
                name="token"
                type="password"
                autoComplete="off"
                spellcheck={false}
                placeholder="nbs_…"
                value={token}
                onInput={(e) => {
                  setToken((e.currentTarget as HTMLInputElement).value);
                  setError('');
                }}
                aria-invalid={error ? true : undefined}
                aria-describedby={error ? 'login-error login-token-hint' : 'login-token-hint'}
              />
              <span class="hint-text" id="login-token-hint">
                A token from an admin, or from <code>nbs-collector token create</code>. It becomes a session cookie for this browser; the token is not stored here.
              </span>
            </div>
            <div class="form-actions">
              <button type="submit" class="btn btn-primary" disabled={busy}>
                {busy ? 'Signing in…' : 'Sign in'}
              </button>
            </div>
          </form>
        </div>
    </BareShell>
  );
}
