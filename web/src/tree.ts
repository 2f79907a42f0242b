// Pure functions over a node's metric tree.
import type { TreeNode } from './api';
import { raised, sev } from './state';

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
}

/** The rows visible with the given branches open, in display order. */
export function visibleRows(roots: TreeNode[], isOpen: (id: string) => boolean): Row[] {
  const rows: Row[] = [];
  const walk = (ns: TreeNode[], level: number, parent: string | null) => {
    ns.forEach((n, i) => {
      const hasChildren = kids(n).length > 0;
      const open = hasChildren && isOpen(n.id);
      rows.push({ node: n, level, parent, posinset: i + 1, setsize: ns.length, open, hasChildren });
      if (open) walk(kids(n), level + 1, n.id);
    });
  };
  walk(roots, 1, null);
  return rows;
}

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
