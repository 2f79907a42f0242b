import type { ComponentChildren } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import { api } from '../api';
import { usePoll } from '../hooks';
import { alertTreeHref, alertWhere, handled, severityState, sortOpen } from '../alerts';
import { selectorText, useCan, useSession } from '../auth';
import { alertHref, alertRulesHref, alertsHref, auditHref, exportHref, fleetHref, linkClick, tokensHref } from '../route';
import { flowsHref } from '../flows';
import { reportsHref } from '../report';
import { StateDot } from './common';
import { formatCount } from '../format';

type Theme = 'system' | 'light' | 'dark';

function readTheme(): Theme {
  try {
    const t = localStorage.getItem('nbs-theme');
    return t === 'light' || t === 'dark' ? t : 'system';
  } catch {
    return 'system';
  }
}

export function applyTheme(t: Theme) {
  if (t === 'system') delete document.documentElement.dataset.theme;
  else document.documentElement.dataset.theme = t;
  try {
    if (t === 'system') localStorage.removeItem('nbs-theme');
    else localStorage.setItem('nbs-theme', t);
  } catch {
    /* private mode: the choice lasts for this page */
  }
  window.dispatchEvent(new Event('nbs:theme'));
}

export function ThemeToggle() {
  const [theme, setTheme] = useState<Theme>(readTheme);
  const next: Record<Theme, Theme> = { system: 'light', light: 'dark', dark: 'system' };
  const icon: Record<Theme, string> = { system: '◐', light: '☀', dark: '☾' };
  return (
    <button
      type="button"
      class="btn btn-quiet theme-toggle"
      title={`Theme: ${theme} (click for ${next[theme]})`}
      aria-label={`Colour theme: ${theme}. Switch to ${next[theme]}`}
      onClick={() => {
        const t = next[theme];
        applyTheme(t);
        setTheme(t);
      }}
    >
      <span aria-hidden="true">{icon[theme]}</span> <span class="theme-name">{theme}</span>
    </button>
  );
}

// The header lists the first open alerts, worst first; its counts are the collector's totals.
const HEADER_ALERTS = 50;

/** Open alerts, when this collector has an alerts API; hidden when it does not (404). */
function AlertsIndicator() {
  const can = useCan();
  const [absent, setAbsent] = useState(false);
  const box = useRef<HTMLDetailsElement>(null);
  useEffect(() => {
    // Close the popover on a click elsewhere or Escape.
    const close = (e: Event) => {
      const d = box.current;
      if (!d?.open) return;
      if (e instanceof KeyboardEvent ? e.key === 'Escape' : !d.contains(e.target as Node)) d.open = false;
    };
    document.addEventListener('click', close);
    document.addEventListener('keydown', close);
    return () => {
      document.removeEventListener('click', close);
      document.removeEventListener('keydown', close);
    };
  }, []);
  const polled = usePoll(absent ? 'alerts:absent' : 'alerts', (s) => (absent ? Promise.resolve(null) : api.alerts(HEADER_ALERTS, s)), absent ? 0 : 15000);
  useEffect(() => {
    if (polled.error?.notFound) setAbsent(true);
  }, [polled.error]);
  if (absent || !polled.data) return null;
  // The counts are the collector's totals: the list below is only the first (worst) few of them.
  const { firing, pending } = polled.data.totals;
  const alerts = sortOpen(polled.data.alerts.filter((a) => a.state !== 'resolved'));
  const open = firing + pending;
  // A link inside the popover navigates in-app; close it on the way.
  const follow = (e: MouseEvent) => {
    linkClick(e);
    if (box.current) box.current.open = false;
  };
  return (
    <details class="alerts" ref={box}>
      <summary class={`btn btn-quiet${firing ? ' alerts-firing' : ''}`} aria-label={`Alerts: ${firing} firing, ${pending} pending`}>
        Alerts <span class="count">{formatCount(firing)}</span>
      </summary>
      <div class="alerts-pop" role="region" aria-label="Open alerts">
        {polled.error && <p class="field-error">Cannot refresh alerts: {polled.error.message}</p>}
        {alerts.length === 0 ? (
          <p class="muted">No alert is firing.</p>
        ) : (
          <ul>
            {alerts.map((a) => {
              const metric = a.child || a.metric;
              return (
                <li key={a.id}>
                  <StateDot state={severityState(a.severity)} />{' '}
                  <a href={alertHref(a.id)} onClick={follow} title="Details and delivery log">
                    <strong>{a.rule}</strong>
                  </a>{' '}
                  <a href={alertTreeHref(a)} onClick={follow}>
                    {alertWhere(a)}
                    {a.node && metric ? ` · ${metric}` : ''}
                  </a>
                  {a.state !== 'firing' && <span class="muted"> ({a.state})</span>}
                  {handled(a) && <span class="muted"> · {a.acknowledged_at ? 'acknowledged' : 'silenced'}</span>}
                  {a.summary && <div class="muted small">{a.summary}</div>}
                </li>
              );
            })}
          </ul>
        )}
        {alerts.length < open && (
          <p class="muted small" role="status">
            Showing the first {alerts.length} of {formatCount(open)} open alerts ({formatCount(firing)} firing), worst first.
          </p>
        )}
        <p class="alerts-pop-links">
          <a href={alertsHref()} onClick={follow}>
            All alerts and history
          </a>
          {can.readRules && (
            <a href={alertRulesHref()} onClick={follow}>
              Alert rules
            </a>
          )}
        </p>
      </div>
    </details>
  );
}

/** Who is signed in, the pages their role adds, and the way out. */
function Account() {
  const s = useSession();
  if (!s) return null;
  const { me, can } = s;
  const scope = me.role === 'customer' ? selectorText(me.selector) : '';
  const how = me.via === 'none' ? 'this collector asks nobody to sign in (--auth.mode=none)' : me.via === 'proxy' ? 'signed in through the reverse proxy' : 'signed in with a token';
  return (
    <>
      <nav class="admin-links" aria-label="Pages">
        <a href={flowsHref()} onClick={linkClick}>
          Flow map
        </a>
        <a href={reportsHref()} onClick={linkClick}>
          Reports
        </a>
          {can.readAudit && (
            <a href={auditHref()} onClick={linkClick}>
              Audit log
            </a>
          )}
          {can.readExport && (
            <a href={exportHref()} onClick={linkClick}>
              Export
            </a>
          )}
          {can.manageTokens && (
            <a href={tokensHref()} onClick={linkClick}>
              Tokens
            </a>
          )}
      </nav>
      <span class="who" data-role={me.role} title={`${me.name}: ${me.role}${scope ? ` of ${scope}` : ''}; ${how}`}>
        <span class="sr-only">Signed in as </span>
        <span class="who-name">{me.name}</span>
        <span class="sr-only">, role</span> <span class="tag who-role">{me.role}</span>
        {scope && (
          <>
            <span class="sr-only">, nodes with</span> <span class="tag who-scope">{scope}</span>
          </>
        )}
      </span>
      {me.via === 'session' && (
        <button type="button" class="btn btn-quiet logout" onClick={s.logout}>
          Log out
        </button>
      )}
    </>
  );
}

/** The page frame before anyone is signed in: no alerts, no account, only the theme. */
export function BareShell({ children }: { children: ComponentChildren }) {
  return (
    <>
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header class="topbar">
        <span class="brand" aria-label="NBS">
          <span class="brand-mark" aria-hidden="true">
            N
          </span>
          <span class="brand-name">NBS</span>
        </span>
        <div class="topbar-right">
          <ThemeToggle />
        </div>
      </header>
      <main id="main" tabIndex={-1}>
        {children}
      </main>
    </>
  );
}

/**
 * The account, its pages and the theme: in the bar on a wide screen; on a
 * phone behind a Menu button (the alerts stay in sight), so nothing is pushed
 * off-screen. Following a link closes it.
 */
function TopMenu() {
  const [open, setOpen] = useState(false);
  const toggle = useRef<HTMLButtonElement>(null);
  const isOpen = useRef(open);
  isOpen.current = open;
  // Escape closes it, from anywhere on the page, and gives the focus back to
  // the button when it was inside. Listening from the start (not from the
  // effect after opening, which runs after a paint) so that an Escape right
  // after opening is not missed.
  useEffect(() => {
    const onKey = (e: KeyboardEvent) => {
      if (e.key !== 'Escape' || !isOpen.current) return;
      const inside = document.getElementById('topbar-menu')?.contains(document.activeElement);
      isOpen.current = false;
      setOpen(false);
      if (inside || document.activeElement === toggle.current) toggle.current?.focus();
    };
    document.addEventListener('keydown', onKey);
    return () => document.removeEventListener('keydown', onKey);
  }, []);
  return (
    <>
      <button
        ref={toggle}
        type="button"
        class="btn btn-quiet menu-toggle"
        aria-expanded={open}
        aria-controls="topbar-menu"
        onClick={() => setOpen((o) => !o)}
      >
        <span aria-hidden="true">☰</span> Menu
      </button>
      <div
        id="topbar-menu"
        class={`topbar-menu${open ? ' open' : ''}`}
        onClick={(e) => {
          if ((e.target as HTMLElement).closest('a')) setOpen(false);
        }}
      >
        <Account />
        <ThemeToggle />
      </div>
    </>
  );
}

export function Shell({ children, crumbs }: { children: ComponentChildren; crumbs?: ComponentChildren }) {
  return (
    <>
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header class="topbar">
        {/* The name people see starts the name a screen reader reads (no aria-label that differs from it);
            the mark's N is drawn by CSS, so it is not part of either. */}
        <a class="brand" href={fleetHref()} onClick={linkClick}>
          <span class="brand-mark brand-mark-css" aria-hidden="true" />
          <span class="brand-name">NBS</span>
          <span class="sr-only"> fleet overview</span>
        </a>
        <nav class="crumbs" aria-label="Breadcrumb">
          {crumbs}
        </nav>
        <div class="topbar-right">
          <AlertsIndicator />
          <TopMenu />
        </div>
      </header>
      <main id="main" tabIndex={-1}>
        {children}
      </main>
    </>
  );
}
