// Client-side routes. The URL holds the whole view, so links can be shared:
//   /                           the fleet   ?q=&state=crit&group=customer&l.customer=acme
//   /nodes/{node}               a node      ?metric=tcp_reset/sent&range=6h&live=1&open=…&closed=…
//   /alerts                     alerts      ?state=resolved&node=lab-b&rule=NBSRootCritical&limit=200
//   /alerts/{id}                one alert and its delivery log
//   /alerts/rules               alert rules ?edit={id} or ?new=1 (the form that is open)
//   /audit                      the audit log ?kind=threshold&id=…&since=24h&limit=200
//   /flows                      the flow map ?owner=&namespace=&label=k%3Dv&tenant=&sort=traffic&range=6h|from=&to=&at=&view=table&edge={key}&cursor=&limit=&tsort=&tdir=
//   /reports                    reports   ?selector=customer%3Dacme&period=7d|1d|30d|custom&from=&to=&targets=a,b
//   /reports/{id}               a saved report definition, run for its period ending now
//   /export                     the Prometheus export's health (staff): series, overflow, push receivers, the scrape config
//   /tokens                     API tokens (admins) ?new=1 (the create form), ?new=bootstrap (a tenant bootstrap token), ?all=1, ?bootall=1 (dead ones too)
//   /login                      sign in   ?next=/where/to/go  #token=nbs_… (a login link)
// The collector serves index.html for any path that is not a file or /api.
import { useEffect, useState } from 'preact/hooks';

export type Route =
  | { page: 'fleet'; params: URLSearchParams }
  | { page: 'node'; node: string; params: URLSearchParams }
  | { page: 'alerts'; params: URLSearchParams }
  | { page: 'alert'; id: number; params: URLSearchParams }
  | { page: 'alertRules'; params: URLSearchParams }
  | { page: 'audit'; params: URLSearchParams }
  | { page: 'tokens'; params: URLSearchParams }
  | { page: 'export'; params: URLSearchParams }
  | { page: 'flows'; params: URLSearchParams }
  | { page: 'reports'; params: URLSearchParams }
  | { page: 'report'; id: number; params: URLSearchParams }
  | { page: 'login'; params: URLSearchParams }
  | { page: 'notfound'; params: URLSearchParams };

export function parseRoute(pathname: string, search: string): Route {
  const params = new URLSearchParams(search);
  const path = pathname.replace(/\/+$/, '') || '/';
  if (path === '/' || path === '/index.html') return { page: 'fleet', params };
  if (path === '/alerts') return { page: 'alerts', params };
  if (path === '/alerts/rules') return { page: 'alertRules', params };
  if (path === '/audit') return { page: 'audit', params };
  if (path === '/tokens') return { page: 'tokens', params };
  if (path === '/export') return { page: 'export', params };
  if (path === '/flows') return { page: 'flows', params };
  if (path === '/reports') return { page: 'reports', params };
  const r = /^\/reports\/([1-9][0-9]{0,15})$/.exec(path);
  if (r) return { page: 'report', id: Number(r[1]), params };
  if (path === '/login') return { page: 'login', params };
  const a = /^\/alerts\/([1-9][0-9]{0,15})$/.exec(path);
  if (a) return { page: 'alert', id: Number(a[1]), params };
  const m = /^\/nodes\/([^/]+)$/.exec(path);
  if (m) {
    try {
      return { page: 'node', node: decodeURIComponent(m[1]), params };
    } catch {
      return { page: 'notfound', params };
    }
  }
  return { page: 'notfound', params };
}

type Changes = Record<string, string | string[] | null | undefined>;

/** Applies changes to parameters: null or undefined deletes, arrays repeat. */
export function withParams(base: URLSearchParams, changes: Changes): URLSearchParams {
  const p = new URLSearchParams(base);
  for (const [k, v] of Object.entries(changes)) {
    p.delete(k);
    if (v === null || v === undefined || v === '') continue;
    if (Array.isArray(v)) v.forEach((x) => p.append(k, x));
    else p.set(k, v);
  }
  return p;
}

function withQuery(path: string, params?: URLSearchParams): string {
  const s = params?.toString() ?? '';
  return s ? `${path}?${s}` : path;
}

export const fleetHref = (params?: URLSearchParams) => withQuery('/', params);
export const nodeHref = (node: string, params?: URLSearchParams) => withQuery(`/nodes/${encodeURIComponent(node)}`, params);
export const alertsHref = (params?: URLSearchParams) => withQuery('/alerts', params);
export const alertHref = (id: number | string) => `/alerts/${encodeURIComponent(String(id))}`;
export const alertRulesHref = (params?: URLSearchParams) => withQuery('/alerts/rules', params);
export const auditHref = (params?: URLSearchParams) => withQuery('/audit', params);
export const tokensHref = (params?: URLSearchParams) => withQuery('/tokens', params);
export const exportHref = () => '/export';

const EVENT = 'nbs:navigate';

/** Changes the URL without a reload. replace keeps the back button for real moves. */
export function navigate(href: string, opts: { replace?: boolean } = {}): void {
  const cur = location.pathname + location.search;
  if (href === cur) return;
  if (opts.replace) history.replaceState(null, '', href);
  else history.pushState(null, '', href);
  window.dispatchEvent(new Event(EVENT));
}

/** Follows the location (back/forward and navigate()). */
export function useLocation(): { pathname: string; search: string } {
  const read = () => ({ pathname: location.pathname, search: location.search });
  const [loc, setLoc] = useState(read);
  useEffect(() => {
    const on = () => setLoc((prev) => {
      const next = read();
      return prev.pathname === next.pathname && prev.search === next.search ? prev : next;
    });
    window.addEventListener('popstate', on);
    window.addEventListener(EVENT, on);
    return () => {
      window.removeEventListener('popstate', on);
      window.removeEventListener(EVENT, on);
    };
  }, []);
  return loc;
}

/** onClick for <a href>: navigates in-app for plain left clicks, lets the browser handle the rest. */
export function linkClick(e: MouseEvent, opts: { replace?: boolean } = {}): void {
  if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  const a = (e.currentTarget as HTMLElement).closest('a');
  if (!a || (a.target && a.target !== '_self')) return;
  const href = a.getAttribute('href');
  if (!href || href.startsWith('http') || href.startsWith('/api/')) return;
  e.preventDefault();
  navigate(href, opts);
}
