import { beforeEach, describe, expect, it, vi } from 'vitest';

// happy-dom has no canvas: the metric view's chart draws nothing here.
// Every method Chart calls is here: on a slow machine its effects run
// before the test unmounts it (setData was missing, and failed make test
// once under load with "u.setData is not a function").
vi.mock('uplot', () => ({
  default: class {
    setSize() {}
    setData() {}
    destroy() {}
  },
}));
import type { TreeNode } from '../api';
import { branch, leaf, node, resetTree } from '../fixtures';
import { formatValue } from '../format';
import { $, $$, byText, click, fakeApi, mountAs, waitFor } from '../testutil';
import { useSession } from '../auth';
import { customerRoots, goneId, isGoneOwner, treeTimeFromParams, visibleRows } from '../tree';
import { NodePage, pageRange } from './NodePage';
import { Tree } from './Tree';

const newest = '2026-01-01T12:00:00.000Z';
const earlier = '2026-01-01T11:00:00.000Z';

/** drops/not_specified with one current owner, "other", and three owners gone since. */
function dropsTree(): TreeNode[] {
  const owner = (seg: string, updated: string | undefined, count = 0): TreeNode => ({ ...leaf(`drops/not_specified/${seg}`), updated_at: updated, recent_count: count, recent_state: 'ok' });
  return [
    branch('drops', [
      branch('drops/not_specified', [
        owner('pod:shop.cart-1', newest, 4),
        owner('pod:shop.cart-2', earlier),
        owner('process:sleep.42', earlier),
        owner('host', undefined),
        { ...leaf('drops/not_specified/other'), updated_at: earlier, recent_count: 0 },
      ]),
    ]),
  ];
}

describe('tree time from the URL', () => {
  it.each([
    ['', null],
    ['at=2026-01-01T11:00:00Z', { at: Date.parse('2026-01-01T11:00:00Z') }],
    ['at=1767265200000', { at: 1767265200000 }],
    ['from=2026-01-01T10:00:00Z&to=2026-01-01T11:00:00Z', { from: Date.parse('2026-01-01T10:00:00Z'), to: Date.parse('2026-01-01T11:00:00Z') }],
    ['at=2026-01-01T10:30:00Z&from=2026-01-01T10:00:00Z&to=2026-01-01T11:00:00Z', { at: Date.parse('2026-01-01T10:30:00Z'), from: Date.parse('2026-01-01T10:00:00Z'), to: Date.parse('2026-01-01T11:00:00Z') }],
    ['at=nonsense', null],
    ['from=2026-01-01T11:00:00Z&to=2026-01-01T10:00:00Z', null],
  ])('%s', (q, want) => {
    expect(treeTimeFromParams(new URLSearchParams(q))).toEqual(want);
  });
  it('charts half an hour either side of a lone at', () => {
    const at = Date.parse('2026-01-01T11:00:00Z');
    expect(pageRange(new URLSearchParams(`at=${at}`), { at })).toEqual({ kind: 'absolute', from: at - 1_800_000, to: at + 1_800_000 });
  });
});

describe('gone owners', () => {
  it('folds owner children not seen in the window, keeps current ones, other and raised ones', () => {
    const kids = dropsTree()[0].children![0].children!;
    expect(kids.map((k) => isGoneOwner(k, newest))).toEqual([false, true, true, true, false]);
    expect(isGoneOwner({ ...kids[1], state: 'crit' }, newest)).toBe(false);
    // The newest report's time has microseconds, the child's milliseconds: still current.
    expect(isGoneOwner({ ...kids[1], updated_at: '2026-01-01T12:00:00.345Z' }, '2026-01-01T12:00:00.345678Z')).toBe(false);
    const open = new Set(['drops', 'drops/not_specified']);
    const rows = visibleRows(dropsTree(), (id) => open.has(id), newest);
    expect(rows.map((r) => (r.gone ? `gone:${r.gone.count}` : r.node.id))).toEqual(['drops', 'drops/not_specified', 'drops/not_specified/pod:shop.cart-1', 'drops/not_specified/other', 'gone:3']);
    open.add(goneId('drops/not_specified'));
    expect(visibleRows(dropsTree(), (id) => open.has(id), newest)).toHaveLength(8);
    // Without the tree's time (older callers) nothing is folded.
    expect(visibleRows(dropsTree(), (id) => open.has(id))).toHaveLength(7);
  });
  it('renders "N gone owners" that opens like a branch', () => {
    let toggled: [string, boolean] | null = null;
    const el = mountAs('viewer', <Tree roots={dropsTree()} isOpen={(id) => id === 'drops' || id === 'drops/not_specified'} onToggle={(id, o) => (toggled = [id, o])} selected={null} onSelect={() => {}} newest={newest} />);
    const gone = $(el, '.tree-gone');
    expect(gone.textContent).toContain('3 gone owners');
    expect(gone.textContent).toContain('not seen in this window');
    expect(gone.getAttribute('aria-expanded')).toBe('false');
    expect($$(el, '[role=treeitem]').some((r) => r.textContent?.includes('shop.cart-2'))).toBe(false);
    click(gone);
    expect(toggled).toEqual(['drops/not_specified#gone', true]);
  });
});

describe('customers', () => {
  it('are not shown the agent root or process owners, staff are', () => {
    const roots = [...dropsTree(), branch('agent', [leaf('agent/bpf')])];
    const open = (id: string) => id === 'drops' || id === 'drops/not_specified' || id === goneId('drops/not_specified');
    for (const [role, shown] of [
      ['customer', false],
      ['viewer', true],
    ] as const) {
      const el = mountAs(role, <NodePageTree roots={roots} open={open} />);
      const ids = $$(el, '[role=treeitem]').map((r) => r.getAttribute('data-id'));
      expect(ids.includes('agent'), role).toBe(shown);
      expect(ids.includes('drops/not_specified/process:sleep.42'), role).toBe(shown);
    }
  });
});

/** The tree as the node page gives it: a customer's without operator internals. */
function NodePageTree({ roots, open }: { roots: TreeNode[]; open: (id: string) => boolean }) {
  const customer = useSession()?.me.role === 'customer';
  return <Tree roots={customer ? customerRoots(roots) : roots} isOpen={open} onToggle={() => {}} selected={null} onSelect={() => {}} newest={newest} />;
}

describe('values', () => {
  it('reads a clock flag as words, not "0 1 = synced"', () => {
    expect(formatValue(1, '1 = synced')).toBe('synchronised');
    expect(formatValue(0, '1 = synced')).toBe('not synchronised');
    expect(formatValue(null, '1 = synced')).toBe('—');
    expect(formatValue(null, 'ms')).toBe('—'); // no samples: no value, never 0
  });
  it('explains a red recent value beside an OK badge', () => {
    const n: TreeNode = { ...leaf('tcp_reset'), recent_state: 'crit', recent_count: 34000 };
    const el = mountAs('viewer', <Tree roots={[n]} isOpen={() => false} onToggle={() => {}} selected={null} onSelect={() => {}} windowS={300} />);
    expect($(el, '.tree-recent').textContent).toContain('was CRIT');
  });
});

describe('the node page at a past time', () => {
  beforeEach(() => history.replaceState(null, '', '/nodes/lab-b'));

  function nodeApi(stale = false) {
    return fakeApi({
      'GET /api/v1/nodes/lab-b': () => [200, node('lab-b', 'ok')],
      'GET /api/v1/nodes/lab-b/tree': (u) => {
        const past = u.searchParams.has('at') || u.searchParams.has('to');
        // Raised then, OK now.
        const roots = past ? resetTree() : [branch('tcp_reset', [leaf('tcp_reset/sent')]), branch('latency', [leaf('latency/rto')])];
        return [200, { node: 'lab-b', time: past ? '2026-01-01T11:00:00Z' : new Date().toISOString(), interval_ms: 10000, window_s: 300, stale: !past && stale, roots, ...(past ? { at: '2026-01-01T11:00:00Z' } : {}) }];
      },
      'GET /api/v1/nodes/lab-b/series/batch': (u) => [200, { node: 'lab-b', from: '', to: '', step_ms: 60000, series: u.searchParams.getAll('metric').map((m) => ({ node: 'lab-b', metric: m, unit: '', kind: 'rate', from: '', to: '', step_ms: 60000, points: [] })) }],
      'GET /api/v1/nodes/lab-b/series': () => [200, { node: 'lab-b', metric: 'x', unit: '', kind: 'rate', from: '', to: '', step_ms: 60000, points: [] }],
      'GET /api/v1/nodes/lab-b/events': () => [200, { node: 'lab-b', metric: 'x', events: [] }],
      'GET /api/v1/nodes/lab-b/thresholds': () => [200, { node: 'lab-b', thresholds: [] }],
    });
  }

  it('asks the tree as of ?at=, says so, and goes back to live', async () => {
    const calls = nodeApi();
    const at = '2026-01-01T11:00:00Z';
    const el = mountAs('viewer', <NodePage node="lab-b" params={new URLSearchParams({ at })} />);
    await waitFor(() => expect($(el, '.viewing').textContent).toContain('Viewing'));
    const tree = calls.find((c) => c.url.pathname.endsWith('/tree'))!;
    expect(tree.url.searchParams.get('at')).toBe(String(Date.parse(at)));
    // The state then: the CRIT child is there and explains it.
    await waitFor(() => expect($(el, '.tree-row.explains').getAttribute('data-id')).toBe('tcp_reset/sent/no_socket'));
    click(byText(el, 'button', 'Back to live'));
    expect(new URLSearchParams(location.search).has('at')).toBe(false);
  });

  it('a range picked while viewing ?at= goes back to live', async () => {
    nodeApi();
    history.replaceState(null, '', '/nodes/lab-b?at=2026-01-01T11:00:00Z');
    const el = mountAs('viewer', <NodePage node="lab-b" params={new URLSearchParams({ at: '2026-01-01T11:00:00Z' })} />);
    await waitFor(() => $(el, '.viewing'));
    const picker = $(el, '.range-picker select') as HTMLSelectElement;
    picker.value = '15m';
    picker.dispatchEvent(new Event('change', { bubbles: true }));
    const q = new URLSearchParams(location.search);
    expect(q.has('at')).toBe(false);
    expect(q.get('range')).toBe('15m');
  });

  it('asks the trend lines of the visible rows in one batch request', async () => {
    const calls = nodeApi();
    const el = mountAs('viewer', <NodePage node="lab-b" params={new URLSearchParams()} />);
    await waitFor(() => $(el, '.tree-row[data-id=tcp_reset]'));
    await waitFor(() => expect(calls.some((c) => c.url.pathname.endsWith('/series/batch'))).toBe(true));
    const batches = calls.filter((c) => c.url.pathname.endsWith('/series/batch'));
    expect(batches).toHaveLength(1);
    expect(batches[0].url.searchParams.getAll('metric')).toEqual(expect.arrayContaining(['tcp_reset', 'latency']));
    expect(calls.filter((c) => c.url.pathname.endsWith('/series') && c.url.searchParams.get('metric') === 'latency')).toHaveLength(0);
  });

  it('marks stale values', async () => {
    nodeApi(true);
    const el = mountAs('viewer', <NodePage node="lab-b" params={new URLSearchParams({ metric: 'tcp_reset' })} />);
    await waitFor(() => expect($(el, '.stale-note').textContent).toContain('has not reported since'));
    expect($$(el, '.tree-value.is-stale').length).toBeGreaterThan(0);
    await waitFor(() => expect($(el, '.metric-now').textContent).toContain('last known (stale)'));
  });
});

describe('status notes', () => {
  const note = 'detached: over budget, 3.2% of a CPU vs 1% (this source 3.1%)';
  const triggered = (): TreeNode[] => [branch('agent', [branch('agent/triggered', [{ ...leaf('agent/triggered/dns'), note }, leaf('agent/triggered/ping')])])];

  it('shows the note under its tree row in words, as part of the row’s name', () => {
    const el = mountAs('operator', <Tree roots={triggered()} isOpen={() => true} onToggle={() => {}} selected={null} onSelect={() => {}} />);
    const row = $(el, '[role=treeitem][data-id="agent/triggered/dns"]');
    expect($(row, '.tree-note').textContent).toBe(`⚠ Note: ${note}`);
    // The name comes from the content (no aria-label to hide the note or
    // to differ from what is on screen).
    expect(row.hasAttribute('aria-label')).toBe(false);
    expect(row.textContent).toContain(note);
    // Only the node that has a note shows one.
    expect($(el, '[data-id="agent/triggered/ping"]').querySelector('.tree-note')).toBeNull();
    expect($$(el, '.tree-note')).toHaveLength(1);
  });

  it('shows the note in the metric view', async () => {
    history.replaceState(null, '', '/nodes/lab-b?metric=agent/triggered/dns');
    fakeApi({
      'GET /api/v1/nodes/lab-b': () => [200, node('lab-b', 'ok')],
      'GET /api/v1/nodes/lab-b/tree': () => [200, { node: 'lab-b', time: new Date().toISOString(), interval_ms: 10000, window_s: 300, stale: false, roots: triggered() }],
      'GET /api/v1/nodes/lab-b/series/batch': (u) => [200, { node: 'lab-b', from: '', to: '', step_ms: 60000, series: u.searchParams.getAll('metric').map((m) => ({ node: 'lab-b', metric: m, unit: '', kind: 'rate', from: '', to: '', step_ms: 60000, points: [] })) }],
      'GET /api/v1/nodes/lab-b/series': () => [200, { node: 'lab-b', metric: 'x', unit: '', kind: 'rate', from: '', to: '', step_ms: 60000, points: [] }],
      'GET /api/v1/nodes/lab-b/events': () => [200, { node: 'lab-b', metric: 'x', events: [] }],
      'GET /api/v1/nodes/lab-b/thresholds': () => [200, { node: 'lab-b', thresholds: [] }],
    });
    const el = mountAs('operator', <NodePage node="lab-b" params={new URLSearchParams({ metric: 'agent/triggered/dns' })} />);
    const p = await waitFor(() => $(el, '.metric-view [role=note]'));
    expect(p.textContent).toBe(`⚠ Note: ${note}`);
    expect($(p, 'strong').textContent).toBe('Note:');
  });
});
