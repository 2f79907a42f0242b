import type { ComponentChildren } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { api } from '../api';
import { usePoll } from '../hooks';
import { fleetHref, linkClick, nodeHref, withParams } from '../route';
import { normState } from '../state';
import { StateDot } from './common';

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

interface AlertLike {
  node?: string;
  metric?: string;
  state?: string;
  status?: string;
  summary?: string;
  labels?: Record<string, string>;
}

function alertsOf(body: unknown): AlertLike[] {
  const list = Array.isArray(body) ? body : (body as { alerts?: unknown })?.alerts;
  return Array.isArray(list) ? (list as AlertLike[]).filter((a) => a && typeof a === 'object') : [];
}

/** Firing alerts, when this collector has an alerts API; hidden when it does not (404). */
function AlertsIndicator() {
  const [absent, setAbsent] = useState(false);
  const polled = usePoll(absent ? 'alerts:absent' : 'alerts', (s) => (absent ? Promise.resolve(null) : api.alerts(s)), absent ? 0 : 30000);
  useEffect(() => {
    if (polled.error?.notFound) setAbsent(true);
  }, [polled.error]);
  if (absent || polled.error || !polled.data) return null;
  const alerts = alertsOf(polled.data).filter((a) => !/resolved|inactive|ok/i.test(a.status ?? a.state ?? ''));
  return (
    <details class="alerts">
      <summary class={`btn btn-quiet${alerts.length ? ' alerts-firing' : ''}`}>
        Alerts <span class="count">{alerts.length}</span>
      </summary>
      <div class="alerts-pop" role="region" aria-label="Firing alerts">
        {alerts.length === 0 ? (
          <p class="muted">No alert is firing.</p>
        ) : (
          <ul>
            {alerts.slice(0, 50).map((a, i) => {
              const node = a.node ?? a.labels?.node;
              const metric = a.metric ?? a.labels?.metric;
              const text = `${node ?? 'group'}${metric ? ` · ${metric}` : ''}`;
              return (
                <li key={i}>
                  <StateDot state={normState(a.state ?? a.labels?.severity ?? 'crit')} />{' '}
                  {node ? (
                    <a href={nodeHref(node, metric ? withParams(new URLSearchParams(), { metric }) : undefined)} onClick={linkClick}>
                      {text}
                    </a>
                  ) : (
                    text
                  )}
                  {a.summary && <span class="muted"> — {a.summary}</span>}
                </li>
              );
            })}
          </ul>
        )}
      </div>
    </details>
  );
}

export function Shell({ children, crumbs }: { children: ComponentChildren; crumbs?: ComponentChildren }) {
  return (
    <>
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header class="topbar">
        <a class="brand" href={fleetHref()} onClick={linkClick} aria-label="NBS fleet overview">
          <span class="brand-mark" aria-hidden="true">
            N
          </span>
          <span class="brand-name">NBS</span>
        </a>
        <nav class="crumbs" aria-label="Breadcrumb">
          {crumbs}
        </nav>
        <div class="topbar-right">
          <AlertsIndicator />
          <ThemeToggle />
        </div>
      </header>
      <main id="main" tabIndex={-1}>
        {children}
      </main>
    </>
  );
}
