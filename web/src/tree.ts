// Pure functions over a node's metric tree.
import type { TreeNode, TreeTime } from './api';
import { raised, sev } from './state';
import { parseInstant } from './timerange';

/**
 * The past time a node page shows, from its URL: ?at= (an instant, as report
 * incident links carry) and/or an absolute ?from=&to= (alert links, a zoomed
 * chart). null: live.
 */
export function treeTimeFromParams(p: URLSearchParams): TreeTime | null {
  const at = parseInstant(p.get('at'));
  const from = parseInstant(p.get('from'));
  const to = parseInstant(p.get('to'));
  const win = from !== null && to !== null && from < to;
  if (at === null && !win) return null;
  const t: TreeTime = {};
  if (at !== null) t.at = at;
  if (win && (at === null || (at >= from && at <= to))) {
    t.from = from;
    t.to = to;
  }
  return t;
}

/** Operator internals a customer is not shown (the collector strips them too): the agent's own
 *  root, and owner children of processes and bare namespace inodes. */
export const staffOnly = (id: string): boolean => id === 'agent' || id.startsWith('agent/') || id.split('/').some((s) => s.startsWith('process:') || s.startsWith('inode:'));

/** The tree without staffOnly metrics. */
export function customerRoots(roots: TreeNode[]): TreeNode[] {
  return roots.filter((n) => !staffOnly(n.id)).map((n) => (n.children ? { ...n, children: customerRoots(n.children) } : n));
}

/** An owner child's last id segment: an owner (pod:…, process:…, host), not "other" or a reason. */
export const isOwnerChild = (id: string): boolean => {
  const seg = id.slice(id.lastIndexOf('/') + 1);
  return seg === 'host' || seg.includes(':');
};

/**
 * An owner child that is gone: not seen in the tree's window (no value in the newest
 * interval, nothing counted in the window, OK). The collector keeps the definitions of
 * owners that lost their child for a while; the agent streams at most top-N + other.
 */
export function isGoneOwner(n: TreeNode, newest: string | null | undefined): boolean {
  if (!isOwnerChild(n.id) || raised(n.state) || raised(n.recent_state)) return false;
  if ((n.recent_count ?? 0) > 0) return false;
  // As times, not strings: RFC 3339 with trimmed fractions does not sort as text.
  const current = !!newest && !!n.updated_at && Date.parse(n.updated_at) >= Math.floor(Date.parse(newest));
  return !current;
}

/** The id under which a branch's gone owners open (kept in the URL like a branch). */
export const goneId = (parent: string) => `${parent}#gone`;

/** A node needs attention when it is raised now or was within the recent window. */
export const attention = (n: TreeNode): boolean => raised(n.state) || raised(n.recent_state);

/** Orders by the current state first, then the recent one. */
const score = (n: TreeNode): number => sev(n.state) * 10 + sev(n.recent_state ?? 'ok');

export const kids = (n: TreeNode): TreeNode[] => n.children ?? [];

/** Every branch that should open by default: a raised node with a raised child, so non-OK
 *  branches are open down to their deepest non-OK child. */
export function defaultOpen(roots: TreeNode[]): Set<string> {
  const open = new Set<string>();
  const walk = (n: TreeNode) => {
    if (attention(n) && kids(n).some(attention)) open.add(n.id);
    kids(n).forEach(walk);
  };
  roots.forEach(walk);
  return open;
}

/** The metric that explains the worst root: follow the worst child down while it needs attention
 *  (raised now, else raised within the recent window). */
export function explaining(roots: TreeNode[]): TreeNode | null {
  let best: TreeNode | null = null;
  for (const r of roots) if (attention(r) && (!best || score(r) > score(best))) best = r;
  let n = best;
  while (n) {
    let next: TreeNode | null = null;
    for (const c of kids(n)) {
      if (!attention(c)) continue;
      const better = !next || score(c) > score(next) || (score(c) === score(next) && (c.recent_count ?? c.value ?? 0) > (next.recent_count ?? next.value ?? 0));
      if (better) next = c;
    }
    if (!next) return n;
    n = next;
  }
  return null;
}

export function findNode(roots: TreeNode[], id: string): TreeNode | null {
  for (const r of roots) {
    if (r.id === id) return r;
    const f = findNode(kids(r), id);
    if (f) return f;
  }
  return null;
}

/** Ids of a node's ancestors, root first (from the path). */
export function ancestors(id: string): string[] {
  const parts = id.split('/');
  return parts.slice(0, -1).map((_, i) => parts.slice(0, i + 1).join('/'));
}

export interface Row {
  node: TreeNode;
  level: number;
  parent: string | null;
  posinset: number;
  setsize: number;
  open: boolean;
  hasChildren: boolean;
  /** Set on the row that stands for a branch's gone owners (node is the parent). */
  gone?: { count: number; last: string | null };
}

/**
 * The rows visible with the given branches open, in display order. A branch's gone owners
 * (isGoneOwner, given newest: the tree's time) fold into one "N gone owners" row that opens
 * like a branch (goneId).
 */
export function visibleRows(roots: TreeNode[], isOpen: (id: string) => boolean, newest?: string | null): Row[] {
  const rows: Row[] = [];
  const walk = (ns: TreeNode[], level: number, parent: TreeNode | null) => {
    const gone = newest === undefined ? [] : ns.filter((n) => isGoneOwner(n, newest));
    const shown = gone.length ? ns.filter((n) => !gone.includes(n)) : ns;
    const setsize = shown.length + (gone.length ? 1 : 0);
    const pid = parent?.id ?? null;
    shown.forEach((n, i) => {
      const hasChildren = kids(n).length > 0;
      const open = hasChildren && isOpen(n.id);
      rows.push({ node: n, level, parent: pid, posinset: i + 1, setsize, open, hasChildren });
      if (open) walk(kids(n), level + 1, n);
    });
    if (gone.length && parent) {
      const open = isOpen(goneId(parent.id));
      const last = gone.map((g) => g.updated_at ?? '').reduce((a, b) => (b > a ? b : a), '') || null;
      rows.push({ node: parent, level, parent: pid, posinset: setsize, setsize, open, hasChildren: true, gone: { count: gone.length, last } });
      if (open) gone.forEach((n, i) => rows.push({ node: n, level: level + 1, parent: goneId(parent.id), posinset: i + 1, setsize: gone.length, open: false, hasChildren: false }));
    }
  };
  walk(roots, 1, null);
  return rows;
}

/** A row's key: a node's id, or its branch's gone-owners id. */
export const rowId = (r: Row): string => (r.gone ? goneId(r.node.id) : r.node.id);

/** Ids of every branch (a node with children). */
export function allIds(roots: TreeNode[]): string[] {
  const out: string[] = [];
  const walk = (n: TreeNode) => {
    if (kids(n).length) out.push(n.id);
    kids(n).forEach(walk);
  };
  roots.forEach(walk);
  return out;
}
