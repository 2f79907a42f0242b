import { Fragment } from 'preact';
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import type { WhoAmI } from './access';
import { ApiError, UNAUTHORIZED_EVENT, api, isAbort } from './api';
import { type Session, NO_AUTH, SessionContext, loginHref, safeNext, sessionFor } from './auth';
import { AlertRulesPage } from './components/AlertRules';
import { AlertDetailPage, AlertsPage } from './components/Alerts';
import { AuditPage } from './components/Audit';
import { ExportPage } from './components/Export';
import { FleetPage } from './components/Fleet';
import { FlowMapPage } from './components/FlowMap';
import { LoginPage } from './components/Login';
import { NodePage } from './components/NodePage';
import { BareShell, Shell } from './components/Shell';
import { ReportsPage } from './components/Reports';
import { TokensPage } from './components/Tokens';
import { ErrorBox, Loading } from './components/common';
import { reportsHref } from './report';
import { alertsHref, fleetHref, linkClick, navigate, parseRoute, useLocation } from './route';

type SessionState = { status: 'checking' } | { status: 'in'; me: WhoAmI } | { status: 'out' } | { status: 'error'; error: ApiError };

/** Whether the collector answered that it has no such API route (one without the access routes). */
const noRoute = (e: unknown) => e instanceof ApiError && e.notFound && /route/i.test(e.message);

/**
 * Who is signed in: asked once (GET /whoami) and then believed until the
 * collector answers 401 to anything, which sends the user to the login page
 * with the way back in ?next=.
 */
function useSessionState(onLoginPage: boolean) {
  const [state, setState] = useState<SessionState>({ status: 'checking' });
  const [attempt, setAttempt] = useState(0);
  // Whether someone was signed in when a 401 came: then their session ended
  // (expired or revoked), which the login page says.
  const wasIn = useRef(false);
  wasIn.current = state.status === 'in';

  useEffect(() => {
    const on = () => {
      const ended = wasIn.current;
      setState({ status: 'out' });
      if (location.pathname !== '/login') navigate(loginHref(location.pathname + location.search, ended ? 'ended' : undefined), { replace: true });
    };
    window.addEventListener(UNAUTHORIZED_EVENT, on);
    return () => window.removeEventListener(UNAUTHORIZED_EVENT, on);
  }, []);

  const needCheck = !onLoginPage && (state.status === 'checking' || state.status === 'out');
  useEffect(() => {
    if (!needCheck) return;
    const ctl = new AbortController();
    setState((s) => (s.status === 'out' ? { status: 'checking' } : s));
    api.whoami(ctl.signal).then(
      (me) => setState({ status: 'in', me }),
      (err) => {
        if (isAbort(err)) return;
        if (err instanceof ApiError && err.status === 401) return; // the 401 listener has sent the user to sign in
        if (noRoute(err)) setState({ status: 'in', me: NO_AUTH });
        else setState({ status: 'error', error: err instanceof ApiError ? err : new ApiError(0, 'client', String(err)) });
      },
    );
    return () => ctl.abort();
  }, [needCheck, attempt]);

  return {
    state,
    signedIn: (me: WhoAmI) => setState({ status: 'in', me }),
    signedOut: () => setState({ status: 'out' }),
    retry: () => {
      setState({ status: 'checking' });
      setAttempt((a) => a + 1);
    },
  };
}

export function App() {
  const loc = useLocation();
  const route = parseRoute(loc.pathname, loc.search);
  const { state, signedIn, signedOut, retry } = useSessionState(route.page === 'login');
  const me = state.status === 'in' ? state.me : null;
  const session = useMemo<Session | null>(
    () =>
      me &&
      sessionFor(me, async () => {
        // Wait for the collector to end the session (and clear the cookie),
        // so signing in again right away cannot race with it; go to the login
        // page even if it cannot be told, as that is where the user asked to be.
        await api.logout().catch(() => {});
        signedOut();
        navigate(loginHref('/', 'signed-out'));
      }),
    [me],
  );

  if (route.page === 'login') {
    return (
      <LoginPage
        params={route.params}
        onLoggedIn={(who) => {
          signedIn(who);
          navigate(safeNext(route.params.get('next')), { replace: true });
        }}
      />
    );
  }
  if (state.status === 'error') {
    return (
      <BareShell>
        <div class="page">
          <ErrorBox title="Cannot tell who you are" error={state.error} onRetry={retry} />
        </div>
      </BareShell>
    );
  }
  if (!session) {
    return (
      <BareShell>
        <Loading what="your session" />
      </BareShell>
    );
  }
  return (
    <SessionContext.Provider value={session}>
      <Page route={route} pathname={loc.pathname} session={session} />
    </SessionContext.Provider>
  );
}

function Page({ route, pathname, session }: { route: ReturnType<typeof parseRoute>; pathname: string; session: Session }) {
  const { can, me } = session;
  switch (route.page) {
    case 'fleet':
      return (
        <Shell crumbs={<span aria-current="page">Fleet</span>}>
          <FleetPage params={route.params} />
        </Shell>
      );
    case 'node':
      return (
        <Shell
          crumbs={
            <>
              <a href={fleetHref()} onClick={linkClick}>
                Fleet
              </a>
              <span class="sep" aria-hidden="true">
                /
              </span>
              <span aria-current="page">{route.node}</span>
            </>
          }
        >
          {/* keyed: another node starts from a clean page */}
          <NodePage key={route.node} node={route.node} params={route.params} />
        </Shell>
      );
    case 'alerts':
      return (
        <Shell crumbs={<Crumbs trail={[]} current="Alerts" />}>
          <AlertsPage params={route.params} />
        </Shell>
      );
    case 'alert':
      return (
        <Shell crumbs={<Crumbs trail={[['Alerts', alertsHref()]]} current={`Alert ${route.id}`} />}>
          {/* keyed: another alert starts from a clean page */}
          <AlertDetailPage key={route.id} id={route.id} />
        </Shell>
      );
    case 'alertRules':
      // To a customer, as to the collector, alert rules do not exist.
      if (!can.readRules) return <NotFound pathname={pathname} />;
      return (
        <Shell crumbs={<Crumbs trail={[['Alerts', alertsHref()]]} current="Rules" />}>
          <AlertRulesPage params={route.params} />
        </Shell>
      );
    case 'audit':
      if (!can.readAudit) return <NotFound pathname={pathname} />;
      return (
        <Shell crumbs={<Crumbs trail={[]} current="Audit log" />}>
          <AuditPage params={route.params} />
        </Shell>
      );
    case 'export':
      // Staff only: to a customer, as to the collector, the export's status does not exist.
      if (!can.readExport) return <NotFound pathname={pathname} />;
      return (
        <Shell crumbs={<Crumbs trail={[]} current="Export" />}>
          <ExportPage />
        </Shell>
      );
    case 'flows':
      return (
        <Shell crumbs={<Crumbs trail={[]} current="Flow map" />}>
          <FlowMapPage params={route.params} />
        </Shell>
      );
    case 'reports':
      return (
        <Shell crumbs={<Crumbs trail={[]} current="Reports" />}>
          <ReportsPage params={route.params} />
        </Shell>
      );
    case 'report':
      return (
        <Shell crumbs={<Crumbs trail={[['Reports', reportsHref()]]} current={`Report ${route.id}`} />}>
          {/* keyed: another saved report starts from a clean page */}
          <ReportsPage key={route.id} id={route.id} params={route.params} />
        </Shell>
      );
    case 'tokens':
      if (me.role === 'customer') return <NotFound pathname={pathname} />;
      return (
        <Shell crumbs={<Crumbs trail={[]} current="Tokens" />}>
          {can.manageTokens ? (
            <TokensPage params={route.params} />
          ) : (
            <div class="page">
              <h1>Tokens</h1>
              <p class="empty">
                Tokens are managed by admins; you are signed in as <strong>{me.name}</strong> with the role <strong>{me.role}</strong>.
              </p>
            </div>
          )}
        </Shell>
      );
    default:
      return <NotFound pathname={pathname} />;
  }
}

function NotFound({ pathname }: { pathname: string }) {
  return (
    <Shell>
      <div class="page">
        <h1>Not found</h1>
        <p>
          There is no page at <code>{pathname}</code>.{' '}
          <a href={fleetHref()} onClick={linkClick}>
            Go to the fleet
          </a>
          .
        </p>
      </div>
    </Shell>
  );
}

/** Fleet / …trail / current. */
function Crumbs({ trail, current }: { trail: [string, string][]; current: string }) {
  return (
    <>
      {[['Fleet', fleetHref()] as [string, string], ...trail].map(([label, href]) => (
        <Fragment key={href}>
          <a href={href} onClick={linkClick}>
            {label}
          </a>
          <span class="sep" aria-hidden="true">
            /
          </span>
        </Fragment>
      ))}
      <span aria-current="page">{current}</span>
    </>
  );
}
