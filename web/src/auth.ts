// Who is signed in and what the UI offers them. The collector enforces every
// role on every route; this only keeps the UI from offering what would be
// refused, so a viewer never sees an edit button and a customer never sees a
// door to something that, for them, does not exist.
import { createContext } from 'preact';
import { useContext } from 'preact/hooks';
import type { Role, Selector, WhoAmI } from './access';

/** What the signed-in role may see and do in the UI. */
export interface Can {
  /** Change and remove threshold overrides (PUT/DELETE /thresholds). */
  editThresholds: boolean;
  /** Create, edit, enable and delete alert rules. */
  editRules: boolean;
  /** Acknowledge and silence alerts (POST/DELETE /alerts/{id}/acknowledge and /silence). */
  actOnAlerts: boolean;
  /** Live mode: ask a node to stream its full tree (POST /nodes/{node}/expand). */
  expand: boolean;
  /** The fleet-wide list of overrides (GET /thresholds). */
  readOverrides: boolean;
  /** The alert rules page and links to it. */
  readRules: boolean;
  /** The audit log page and links to it. */
  readAudit: boolean;
  /** The export page (GET /export/status): staff only. */
  readExport: boolean;
  /** The tokens page: list, create, revoke. */
  manageTokens: boolean;
  /** Delete a node with everything it reported (DELETE /nodes/{node}). */
  manageNodes: boolean;
  /** See the labels a node's agent claimed against the bound ones (claimed_labels): staff internals, not a viewer's. */
  readClaims: boolean;
  /** Bind a node's labels, its tenant among them (PUT /nodes/{node}/labels), and manage tenant bootstrap tokens. */
  bindLabels: boolean;
}

const NOTHING: Can = {
  editThresholds: false,
  editRules: false,
  actOnAlerts: false,
  expand: false,
  readOverrides: false,
  readRules: false,
  readAudit: false,
  readExport: false,
  manageTokens: false,
  manageNodes: false,
  readClaims: false,
  bindLabels: false,
};

/**
 * The UI's view of collector/access's roles: viewer reads everything,
 * operator also changes thresholds and rules, expands nodes and sees what
 * agents claimed against their bound labels, admin also manages tokens and
 * binds nodes to tenants; a customer reads only its own nodes' routes. Anything else
 * (an unknown role from a newer collector) gets nothing.
 */
export function capabilities(role: string | null | undefined): Can {
  switch (role) {
    case 'viewer':
      return { ...NOTHING, readOverrides: true, readRules: true, readAudit: true, readExport: true };
    case 'operator':
      return { ...capabilities('viewer'), editThresholds: true, editRules: true, actOnAlerts: true, expand: true, readClaims: true };
    case 'admin':
      return { ...capabilities('operator'), manageTokens: true, manageNodes: true, bindLabels: true };
  }
  return NOTHING;
}

export const ROLES: Role[] = ['viewer', 'operator', 'admin', 'customer'];

export const ROLE_TEXT: Record<Role, string> = {
  viewer: 'reads everything',
  operator: 'also changes thresholds and alert rules, expands nodes',
  admin: 'also manages tokens and nodes',
  customer: 'reads only the nodes its selector matches',
};

/** customer=acme,region=eu with keys sorted, as the collector prints a selector. */
export function selectorText(s: Selector | null | undefined): string {
  return Object.keys(s ?? {})
    .sort()
    .map((k) => `${k}=${s![k]}`)
    .join(',');
}

/**
 * The token in a login link's fragment (/login#token=nbs_…), which
 * `make run` and `nbs-collector --auth.bootstrap-admin` print. The fragment
 * never reaches a server, so the token stays out of access logs.
 */
export function tokenFromHash(hash: string): string | null {
  const h = hash.replace(/^#/, '');
  if (!h) return null;
  const t = new URLSearchParams(h).get('token')?.trim();
  return t ? t : null;
}

/**
 * Where to go after signing in: a path on this origin, never another site
 * (//evil.example, /\evil.example and https://… are refused) and never the
 * login page itself.
 */
export function safeNext(next: string | null | undefined): string {
  if (!next || next.length > 2000 || !next.startsWith('/') || next.startsWith('//') || next.startsWith('/\\')) return '/';
  if (/[\u0000-\u001f]/.test(next)) return '/';
  let u: URL;
  try {
    u = new URL(next, 'http://nbs.invalid');
  } catch {
    return '/';
  }
  if (u.origin !== 'http://nbs.invalid' || u.pathname === '/login') return '/';
  return u.pathname + u.search + u.hash;
}

/** The login page, remembering where the user was going. */
/** Why the login page is shown: a session that ended under the user (expired, revoked), or one they ended. */
export type LoginReason = 'ended' | 'signed-out';

export function loginHref(next?: string, reason?: LoginReason): string {
  const n = next === undefined ? '/' : safeNext(next);
  const p = new URLSearchParams();
  if (n !== '/') p.set('next', n);
  if (reason) p.set('reason', reason);
  const q = p.toString();
  return q ? `/login?${q}` : '/login';
}

/** The reason in a login page's URL, if it is one the page knows. */
export function loginReason(params: URLSearchParams): LoginReason | null {
  const r = params.get('reason');
  return r === 'ended' || r === 'signed-out' ? r : null;
}

/**
 * What a collector without the access routes (one that predates them, or a
 * test's fake) means: no sign-in at all, everyone may do everything, as
 * --auth.mode=none answers.
 */
export const NO_AUTH: WhoAmI = { name: 'anonymous', role: 'admin', via: 'none', mode: 'none' };

export interface Session {
  me: WhoAmI;
  can: Can;
  /** Ends the session at the collector and goes to the login page. */
  logout: () => void;
}

/** Without a provider nobody is signed in and nothing is offered. */
export const SessionContext = createContext<Session | null>(null);

export function useSession(): Session | null {
  return useContext(SessionContext);
}

export function useCan(): Can {
  return useSession()?.can ?? NOTHING;
}

export function sessionFor(me: WhoAmI, logout: () => void = () => {}): Session {
  return { me, can: capabilities(me.role), logout };
}
