import { useEffect, useRef, useState } from 'preact/hooks';
import type { TreeNode } from '../api';
import { formatCompact, formatDuration, formatValue, thresholdLong, thresholdShort } from '../format';
import { normState, raised, stateLabel } from '../state';
import { type Row, visibleRows } from '../tree';
import { Sparkline } from './Sparkline';
import { StateBadge } from './common';

export interface TreeProps {
  roots: TreeNode[];
  isOpen: (id: string) => boolean;
  onToggle: (id: string, open: boolean) => void;
  selected: string | null;
  onSelect: (id: string) => void;
  sparks?: Record<string, (number | null)[]>;
  explains?: string | null;
  onVisible?: (ids: string[]) => void;
  windowS?: number; // the recent window the tree's recent_count/recent_state cover
}

/** The metric tree as an ARIA tree: arrows move, → opens, ← closes or goes up, Enter selects. */
export function Tree({ roots, isOpen, onToggle, selected, onSelect, sparks, explains, onVisible, windowS }: TreeProps) {
  const win = windowS ? formatDuration(windowS * 1000) : '';
  const hasRecent = hasRecentData(roots);
  const rows = visibleRows(roots, isOpen);
  const [focus, setFocus] = useState<string | null>(null);
  const refs = useRef(new Map<string, HTMLDivElement>());
  const focusId = rows.some((r) => r.node.id === focus) ? focus : rows.some((r) => r.node.id === selected) ? selected : rows[0]?.node.id ?? null;
  const ids = rows.map((r) => r.node.id).join('\n');

  useEffect(() => {
    onVisible?.(ids ? ids.split('\n') : []);
  }, [ids]);

  const moveTo = (id: string | null | undefined) => {
    if (!id) return;
    setFocus(id);
    refs.current.get(id)?.focus();
  };

  const onKey = (e: KeyboardEvent, row: Row, i: number) => {
    let handled = true;
    switch (e.key) {
      case 'ArrowDown':
        moveTo(rows[i + 1]?.node.id);
        break;
      case 'ArrowUp':
        moveTo(rows[i - 1]?.node.id);
        break;
      case 'Home':
        moveTo(rows[0]?.node.id);
        break;
      case 'End':
        moveTo(rows[rows.length - 1]?.node.id);
        break;
      case 'ArrowRight':
        if (row.hasChildren && !row.open) onToggle(row.node.id, true);
        else if (row.open) moveTo(rows[i + 1]?.node.id);
        break;
      case 'ArrowLeft':
        if (row.open) onToggle(row.node.id, false);
        else moveTo(row.parent);
        break;
      case 'Enter':
      case ' ':
        onSelect(row.node.id);
        break;
      case '*': // open every sibling branch (WAI-ARIA tree pattern)
        rows.filter((r) => r.parent === row.parent && r.hasChildren && !r.open).forEach((r) => onToggle(r.node.id, true));
        break;
      default:
        handled = false;
    }
    if (handled) {
      e.preventDefault();
      e.stopPropagation();
    }
  };

  if (rows.length === 0) return <p class="muted">This node has announced no metrics.</p>;

  return (
    <div class="tree" role="tree" aria-label="Metric tree" aria-multiselectable="false">
      <div class="tree-row tree-header" aria-hidden="true">
        <span>Metric</span>
        <span>State</span>
        <span class="num">Value</span>
        <span class="num">{hasRecent ? `Last ${win || 'window'}` : ''}</span>
        <span>Trend</span>
        <span>Threshold</span>
      </div>
      {rows.map((row, i) => {
        const n = row.node;
        const s = normState(n.state);
        const own = normState(n.own_state);
        const isSel = n.id === selected;
        return (
          <div
            key={n.id}
            ref={(el) => {
              if (el) refs.current.set(n.id, el);
              else refs.current.delete(n.id);
            }}
            class={`tree-row st-${s}${isSel ? ' selected' : ''}${n.id === explains ? ' explains' : ''}`}
            role="treeitem"
            aria-level={row.level}
            aria-posinset={row.posinset}
            aria-setsize={row.setsize}
            aria-expanded={row.hasChildren ? row.open : undefined}
            aria-selected={isSel}
            aria-label={`${n.title}, ${stateLabel[s]}, ${formatValue(n.value, n.unit)}`}
            data-id={n.id}
            tabIndex={n.id === focusId ? 0 : -1}
            onKeyDown={(e) => onKey(e, row, i)}
            onClick={() => {
              setFocus(n.id);
              onSelect(n.id);
            }}
            onFocus={() => setFocus(n.id)}
          >
            <span class="tree-title" style={{ paddingLeft: `${(row.level - 1) * 1.25}rem` }}>
              {row.hasChildren ? (
                <span
                  class={`caret${row.open ? ' open' : ''}`}
                  aria-hidden="true"
                  onClick={(e) => {
                    e.stopPropagation();
                    onToggle(n.id, !row.open);
                  }}
                >
                  ▸
                </span>
              ) : (
                <span class="caret leaf" aria-hidden="true" />
              )}
              <span class="title-text" title={n.id}>
                {n.title}
              </span>
              {n.id === explains && <span class="explains-tag">explains</span>}
            </span>
            <span class="tree-state">
              <StateBadge state={s} small />
              {own !== s && own !== 'ok' && <span class="sr-only">, own state {stateLabel[own]}</span>}
            </span>
            <span class="tree-value num">{formatValue(n.value, n.unit)}</span>
            <Recent n={n} win={win} />
            <span class="tree-spark">
              <Sparkline values={sparks?.[n.id]} state={s} label={n.title} />
            </span>
            <span class="tree-threshold" title={thresholdLong(n.threshold, n.unit)}>
              {thresholdShort(n.threshold)}
            </span>
          </div>
        );
      })}
    </div>
  );
}

/** Whether any metric carries recent-window data (older collectors do not send it). */
function hasRecentData(roots: TreeNode[]): boolean {
  return roots.some((r) => r.recent_state !== undefined || r.recent_count != null);
}

/** The recent window: a rate's total, and a state raised then if it is not now. */
function Recent({ n, win }: { n: TreeNode; win: string }) {
  const rs = normState(n.recent_state ?? 'ok');
  const now = normState(n.state);
  const showWas = raised(rs) && rs !== now;
  const countUnit = n.unit.replace(/\/s$/, '');
  const count = n.recent_count;
  const title = [
    count != null ? `${formatCompact(count)} ${countUnit} in the last ${win || 'window'}` : '',
    raised(rs) ? `worst state in the last ${win || 'window'}: ${stateLabel[rs]}` : '',
  ]
    .filter(Boolean)
    .join('; ');
  return (
    <span class={`tree-recent num${showWas ? ` st-${rs}` : ''}`} title={title || undefined}>
      {showWas && <span class={`dot st-${rs}`} aria-hidden="true" />}
      {showWas && <span class="sr-only">was {stateLabel[rs]}</span>}
      {count != null && count > 0 ? formatCompact(count) : ''}
    </span>
  );
}
