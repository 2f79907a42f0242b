import { useEffect, useRef, useState } from 'preact/hooks';
import type { TreeNode } from '../api';
import { formatAgo, formatCompact, formatValue, formatWindow, thresholdLong, thresholdShort } from '../format';
import { normState, raised, stateLabel } from '../state';
import { type Row, rowId, visibleRows } from '../tree';
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
  /** The tree's time (its newest report): owner children not seen since are folded away. */
  newest?: string | null;
  /** The values are the node's last, not current ones (it stopped reporting). */
  stale?: boolean;
  /** The tree is of a past time: the recent column covers the window before it, not the last minutes. */
  past?: boolean;
}

/** The metric tree as an ARIA tree: arrows move, → opens, ← closes or goes up, Enter selects. */
export function Tree({ roots, isOpen, onToggle, selected, onSelect, sparks, explains, onVisible, windowS, newest, stale, past }: TreeProps) {
  const win = windowS ? formatWindow(windowS) : '';
  const hasRecent = hasRecentData(roots);
  const rows = visibleRows(roots, isOpen, newest === undefined ? undefined : newest);
  const [focus, setFocus] = useState<string | null>(null);
  const refs = useRef(new Map<string, HTMLDivElement>());
  const focusId = rows.some((r) => rowId(r) === focus) ? focus : rows.some((r) => rowId(r) === selected) ? selected : rows[0] ? rowId(rows[0]) : null;
  const ids = rows
    .filter((r) => !r.gone)
    .map((r) => r.node.id)
    .join('\n');

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
        moveTo(rows[i + 1] && rowId(rows[i + 1]));
        break;
      case 'ArrowUp':
        moveTo(rows[i - 1] && rowId(rows[i - 1]));
        break;
      case 'Home':
        moveTo(rows[0] && rowId(rows[0]));
        break;
      case 'End':
        moveTo(rows[rows.length - 1] && rowId(rows[rows.length - 1]));
        break;
      case 'ArrowRight':
        if (row.hasChildren && !row.open) onToggle(rowId(row), true);
        else if (row.open) moveTo(rows[i + 1] && rowId(rows[i + 1]));
        break;
      case 'ArrowLeft':
        if (row.open) onToggle(rowId(row), false);
        else moveTo(row.parent);
        break;
      case 'Enter':
      case ' ':
        if (row.gone) onToggle(rowId(row), !row.open);
        else onSelect(row.node.id);
        break;
      case '*': // open every sibling branch (WAI-ARIA tree pattern)
        rows.filter((r) => r.parent === row.parent && r.hasChildren && !r.open).forEach((r) => onToggle(rowId(r), true));
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
        <span class="num tree-recent-head" title={windowS ? `${windowS} s` : undefined}>
          {hasRecent ? (past ? `${win || 'Window'} before` : `Last ${win || 'window'}`) : ''}
        </span>
        <span>Trend</span>
        <span>Threshold</span>
      </div>
      {rows.map((row, i) => {
        if (row.gone) return <GoneRow key={rowId(row)} row={row} focused={rowId(row) === focusId} onKey={(e) => onKey(e, row, i)} onToggle={onToggle} setRef={(el) => (el ? refs.current.set(rowId(row), el) : refs.current.delete(rowId(row)))} onFocus={() => setFocus(rowId(row))} />;
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
            // No aria-label: the row's name is its content (title, state,
            // value, recent count, trend, threshold, note), so that what a
            // voice-control user reads on screen is part of the name (WCAG
            // 2.5.3, axe's label-content-name-mismatch).
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
            <span class={`tree-value num${stale ? ' is-stale' : ''}`} title={stale ? 'The node stopped reporting: its last value, not a current one' : undefined}>
              {formatValue(n.value, n.unit)}
              {stale && n.value != null && <span class="sr-only"> (stale)</span>}
            </span>
            <Recent n={n} win={win} />
            <span class="tree-spark">
              <Sparkline values={sparks?.[n.id]} state={s} label={n.title} />
            </span>
            <span class="tree-threshold" title={thresholdLong(n.threshold, n.unit)}>
              {thresholdShort(n.threshold)}
            </span>
            {n.note && <TreeNote note={n.note} level={row.level} />}
          </div>
        );
      })}
    </div>
  );
}

/** A branch's owner children not seen in the window, folded into one row that opens like a branch. */
function GoneRow({ row, focused, onKey, onToggle, setRef, onFocus }: { row: Row; focused: boolean; onKey: (e: KeyboardEvent) => void; onToggle: (id: string, open: boolean) => void; setRef: (el: HTMLDivElement | null) => void; onFocus: () => void }) {
  const id = rowId(row);
  const g = row.gone!;
  const label = `${g.count} gone owner${g.count === 1 ? '' : 's'}`;
  return (
    <div
      ref={setRef}
      class="tree-row tree-gone st-ok"
      role="treeitem"
      aria-level={row.level}
      aria-posinset={row.posinset}
      aria-setsize={row.setsize}
      aria-expanded={row.open}
      aria-selected={false}
      data-id={id}
      tabIndex={focused ? 0 : -1}
      onKeyDown={onKey}
      onClick={() => onToggle(id, !row.open)}
      onFocus={onFocus}
    >
      <span class="tree-title" style={{ paddingLeft: `${(row.level - 1) * 1.25}rem` }}>
        <span class={`caret${row.open ? ' open' : ''}`} aria-hidden="true">
          ▸
        </span>
        <span class="title-text muted">{label}</span>
      </span>
      <span class="tree-gone-note muted small">{g.last ? `not seen in this window; last ${formatAgo(g.last)}` : 'not seen in this window'}</span>
    </div>
  );
}

/**
 * A node's status note (the agent detached a triggered source, and why) on a
 * line of its own under the row, in words: "Note:" says what it is without
 * colour, and it is part of the row's accessible name.
 */
function TreeNote({ note, level }: { note: string; level: number }) {
  return (
    <span class="tree-note small" style={{ paddingLeft: `${(level - 1) * 1.25 + 1.4}rem` }}>
      <span class="note-mark" aria-hidden="true">
        ⚠
      </span>{' '}
      <strong>Note:</strong> {note}
    </span>
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
      {showWas && <span class="was">was {stateLabel[rs]} </span>}
      {count != null && count > 0 ? formatCompact(count) : ''}
    </span>
  );
}
