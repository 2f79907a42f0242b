// Pure functions over a node's metric tree.
import type { TreeNode } from './api';
import { raised, sev } from './state';

export const kids = (n: TreeNode): TreeNode[] => n.children ?? [];

/** Every branch that should open by default: a raised node with a raised child, so non-OK
 *  branches are open down to their deepest non-OK child. */
export function defaultOpen(roots: TreeNode[]): Set<string> {
  const open = new Set<string>();
  const walk = (n: TreeNode) => {
    if (raised(n.state) && kids(n).some((c) => raised(c.state))) open.add(n.id);
    kids(n).forEach(walk);
  };
  roots.forEach(walk);
  return open;
}

/** The metric that explains the worst root: follow the worst child down while it is raised. */
export function explaining(roots: TreeNode[]): TreeNode | null {
  let best: TreeNode | null = null;
  for (const r of roots) if (raised(r.state) && (!best || sev(r.state) > sev(best.state))) best = r;
  let n = best;
  while (n) {
    let next: TreeNode | null = null;
    for (const c of kids(n)) {
      if (!raised(c.state)) continue;
      if (!next || sev(c.state) > sev(next.state) || (sev(c.state) === sev(next.state) && (c.value ?? 0) > (next.value ?? 0))) next = c;
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
