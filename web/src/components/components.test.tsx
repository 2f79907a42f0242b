import { beforeEach, describe, expect, it, vi } from 'vitest';
import type { Evidence } from '../api';
import { branch, leaf, resetTree } from '../fixtures';
import { $, $$, click, fakeApi, mount, mountAs, press, type, waitFor } from '../testutil';
import { defaultOpen } from '../tree';
import { EvidenceTable, evidenceColumns, fieldTitle, groupEvents, splitAddr } from './Evidence';
import { capabilityLabel } from './NodePage';
import { buildRequest, draftFrom, mapServerError, ThresholdEditor } from './ThresholdEditor';
import { Tree } from './Tree';

beforeEach(() => history.replaceState(null, '', '/'));

describe('Tree', () => {
  const roots = resetTree();
  const setup = (selected: string | null = null) => {
    const open = defaultOpen(roots);
    const onToggle = vi.fn();
    const onSelect = vi.fn();
    const el = mount(<Tree roots={roots} isOpen={(id) => open.has(id)} onToggle={onToggle} selected={selected} onSelect={onSelect} explains="tcp_reset/sent/no_socket" />);
    return { el, onToggle, onSelect };
  };

  it('renders an ARIA tree opened down to the raised child', () => {
    const { el } = setup('tcp_reset/sent/no_socket');
    const items = $$(el, '[role=treeitem]');
    expect(items.map((i) => i.dataset.id)).toContain('tcp_reset/sent/no_socket');
    const noSocket = $(el, '[data-id="tcp_reset/sent/no_socket"]');
    expect(noSocket.getAttribute('aria-level')).toBe('3');
    expect(noSocket.getAttribute('aria-selected')).toBe('true');
    expect(noSocket.textContent).toContain('CRIT');
    expect(noSocket.textContent).toContain('20 resets/s');
    expect(noSocket.textContent).toContain('explains');
    expect(noSocket.tabIndex).toBe(0); // the roving focus starts on the selection
    expect($(el, '[data-id="tcp_reset"]').getAttribute('aria-expanded')).toBe('true');
    expect($(el, '[data-id="latency"]').getAttribute('aria-expanded')).toBe('false');
    expect(el.querySelector('[data-id="latency/rto"]')).toBeNull();
  });

  it('is driven by the keyboard', () => {
    const { el, onToggle, onSelect } = setup();
    const root = $(el, '[data-id="tcp_reset"]');
    press(root, 'ArrowDown');
    expect(document.activeElement).toBe($(el, '[data-id="tcp_reset/received"]'));
    press(document.activeElement!, 'End');
    expect(document.activeElement).toBe($(el, '[data-id="latency"]'));
    press(document.activeElement!, 'ArrowRight');
    expect(onToggle).toHaveBeenCalledWith('latency', true);
    press($(el, '[data-id="tcp_reset/sent"]'), 'ArrowLeft');
    expect(onToggle).toHaveBeenCalledWith('tcp_reset/sent', false);
    press($(el, '[data-id="tcp_reset/sent/tcp_state"]'), 'ArrowLeft');
    expect(document.activeElement).toBe($(el, '[data-id="tcp_reset/sent"]'));
    press(document.activeElement!, 'Enter');
    expect(onSelect).toHaveBeenCalledWith('tcp_reset/sent');
  });

  it('toggles with the caret without selecting', () => {
    const { el, onToggle, onSelect } = setup();
    click($(el, '[data-id="latency"] .caret'));
    expect(onToggle).toHaveBeenCalledWith('latency', true);
    expect(onSelect).not.toHaveBeenCalled();
  });

  it('renders any tree that arrives, not only resets', () => {
    const roots = [branch('ping', [leaf('ping/10.0.0.1/rtt_p99', 'warn', 3.2)]), leaf('agent')];
    roots[0].children![0].unit = 'ms';
    const el = mount(<Tree roots={roots} isOpen={() => true} onToggle={() => {}} selected={null} onSelect={() => {}} />);
    expect($(el, '[data-id="ping/10.0.0.1/rtt_p99"]').textContent).toContain('3.2 ms');
  });
});

describe('Evidence', () => {
  const events: Evidence[] = [
    { t: '2026-01-01T00:00:01Z', metric: 'tcp_reset/sent/no_socket', fields: { src: '10.0.0.2:9', dst: '10.0.0.1:4000', reason: 'no_socket', netns: '1', extra: 'x' }, counterparts: [] },
    { t: '2026-01-01T00:00:00Z', metric: 'tcp_reset/received/syn_sent', fields: { src: '10.0.0.2:9', dst: '10.0.0.1:4001', state: 'syn_sent' }, counterparts: [] },
  ];
  it('orders columns for reading and shows each event', () => {
    expect(evidenceColumns(events)).toEqual(['reason', 'state', 'src', 'dst', 'extra', 'netns']);
    const el = mount(<EvidenceTable events={events} metric="tcp_reset" error={null} loading={false} limit={200} onRetry={() => {}} />);
    expect($$(el, 'tbody tr:not(.group-head)')).toHaveLength(2);
    expect($$(el, 'thead th').map((t) => t.textContent)).toEqual(['Time', 'Metric', 'Reason', 'State', 'Source', 'Destination', 'Extra', 'Namespace inode']);
    expect($(el, 'tbody tr:not(.group-head)').textContent).toContain('sent/no_socket');
  });
  it('titles every column for people, in both shapes the collector sends', () => {
    // Staff: the owner and the namespace it was found from.
    const staff: Evidence[] = [{ t: '2026-01-01T00:00:01Z', metric: 'drops/x', fields: { owner: 'blue', owner_kind: 'netns', netns_name: 'blue', netns: '4026532177', owner_id: 'netns:blue', pid: '42', comm: 'sleep', dst: '10.0.0.9:443' }, counterparts: [] }];
    const el = mount(<EvidenceTable events={staff} metric="drops/x" error={null} loading={false} limit={200} onRetry={() => {}} />);
    const heads = $$(el, 'thead th').map((t) => t.textContent);
    expect(heads).toEqual(['Time', 'Owner', 'Owner kind', 'Destination', 'Command', 'Namespace', 'PID', 'Namespace inode', 'Owner id']);
    // A customer: the collector sent no namespace or process fields; a pod's owner stays.
    const customer: Evidence[] = [{ t: '2026-01-01T00:00:01Z', metric: 'drops/x', fields: { owner: 'shop/cart', owner_kind: 'pod', pod: 'shop/cart', dst: '10.0.0.9:443', function: 'tcp_v4_rcv' }, counterparts: [] }];
    const cel = mount(<EvidenceTable events={customer} metric="drops/x" error={null} loading={false} limit={200} onRetry={() => {}} />);
    expect($$(cel, 'thead th').map((t) => t.textContent)).toEqual(['Time', 'Owner', 'Owner kind', 'Pod', 'Destination', 'Function']);
    expect(fieldTitle('some_new_field')).toBe('Some new field');
  });
  it('names a missing capability by the agent for staff and by topic for a customer', () => {
    expect(capabilityLabel('owner.oci_bundles')).toBe('owner.oci_bundles');
    expect(capabilityLabel('pod_names')).toBe('pod names');
  });
  it('shows what the other side said, linking to its tree', () => {
    const received: Evidence[] = [
      {
        t: '2026-01-01T00:00:02Z',
        metric: 'tcp_reset/received/syn_sent',
        fields: { src: '10.0.0.2:7001', dst: '10.0.0.1:4002', state: 'syn_sent' },
        counterparts: [
          { node: 'lab-b', t: '2026-01-01T00:00:02Z', metric: 'drops/netfilter_drop', fields: { reason: 'netfilter_drop', src: '10.0.0.1:4002', dst: '10.0.0.2:7001' } },
          { node: 'lab-c', t: '2026-01-01T00:00:02Z', metric: 'tcp_reset/sent/no_socket', fields: { reason: 'no_socket' } },
        ],
      },
      ...events,
    ];
    const el = mount(<EvidenceTable events={received} metric="tcp_reset" error={null} loading={false} limit={200} onRetry={() => {}} />);
    const other = $$(el, 'tbody tr.other-side');
    expect(other).toHaveLength(1); // only the event with counterparts has the row
    expect($$(el, 'tbody tr:not(.group-head)')).toHaveLength(4);
    expect(other[0].textContent).toContain('The other side said:');
    expect(other[0].textContent).toContain('drops/netfilter_drop (netfilter_drop)');
    expect(other[0].textContent).toContain('tcp_reset/sent/no_socket (no_socket)');
    const cell = $(other[0], 'td') as HTMLTableCellElement;
    expect(cell.colSpan).toBe(1 + 1 + evidenceColumns(received).length);
    const links = $$(other[0], 'a');
    expect(links.map((a) => a.textContent)).toEqual(['lab-b', 'lab-c']);
    expect(links[0].getAttribute('href')).toBe('/nodes/lab-b?metric=drops%2Fnetfilter_drop');
    click(links[0]);
    expect(location.pathname).toBe('/nodes/lab-b');
    expect(new URLSearchParams(location.search).get('metric')).toBe('drops/netfilter_drop');
  });
  it('puts the owner first and the namespace inode last, and groups by owner with counts', async () => {
    const owned: Evidence[] = [
      { t: '2026-01-01T00:00:03Z', metric: 'drops/x', fields: { netns: '4026532177', owner: 'shop/cart', owner_kind: 'pod', dst: '10.0.0.9:443', reason: 'x' }, counterparts: [] },
      { t: '2026-01-01T00:00:02Z', metric: 'drops/x', fields: { netns: '4026532177', owner: 'shop/cart', owner_kind: 'pod', dst: '10.0.0.9:80', reason: 'x' }, counterparts: [] },
      { t: '2026-01-01T00:00:01Z', metric: 'drops/x', fields: { netns: '4026532178', owner: 'web', owner_kind: 'container', dst: '[fd00::1]:443', reason: 'x' }, counterparts: [] },
    ];
    const cols = evidenceColumns(owned);
    expect(cols[0]).toBe('owner');
    expect(cols[cols.length - 1]).toBe('netns');
    const el = mount(<EvidenceTable events={owned} metric="drops/x" error={null} loading={false} limit={200} onRetry={() => {}} />);
    expect($$(el, 'tr.group-head').map((t) => t.textContent)).toEqual(['pod shop/cart (2 events)', 'container web (1 event)']);
    const select = $(el, 'select#evidence-group') as HTMLSelectElement;
    select.value = 'port';
    select.dispatchEvent(new Event('change', { bubbles: true }));
    await waitFor(() => expect($$(el, 'tr.group-head').map((t) => t.textContent)).toEqual(['443 (2 events)', '80 (1 event)']));
  });
  it('groups by destination port and peer', () => {
    const evs: Evidence[] = [
      { t: '2026-01-01T00:00:03Z', metric: 'm', fields: { dst: '10.0.0.9:443', direction: 'sent' }, counterparts: [] },
      { t: '2026-01-01T00:00:02Z', metric: 'm', fields: { dst: '[fd00::1]:443', direction: 'sent' }, counterparts: [] },
      { t: '2026-01-01T00:00:01Z', metric: 'm', fields: { src: '10.0.0.7:80', dst: '10.0.0.1:5000', direction: 'received' }, counterparts: [] },
    ];
    expect(splitAddr('[fd00::1]:443')).toEqual({ addr: 'fd00::1', port: '443' });
    expect(splitAddr('10.0.0.9:443')).toEqual({ addr: '10.0.0.9', port: '443' });
    expect(groupEvents(evs, 'port').map((g) => [g.key, g.events.length])).toEqual([
      ['443', 2],
      ['5000', 1],
    ]);
    expect(groupEvents(evs, 'peer').map((g) => g.key)).toEqual(['10.0.0.7', '10.0.0.9', 'fd00::1']);
    expect(groupEvents(evs, 'none')).toEqual([{ key: '', events: evs }]);
  });
  it('says when there is none', () => {
    const el = mount(<EvidenceTable events={[]} metric="m" error={null} loading={false} limit={200} onRetry={() => {}} />);
    expect(el.textContent).toContain('No evidence');
  });
});

describe('ThresholdEditor', () => {
  const t = { warn: 1, crit: 10, comparison: 'above' as const, hold_intervals: 1 };

  it('validates before sending', () => {
    const d = draftFrom(t, 'selector', '');
    expect(buildRequest(d, 'm', 'n').errors.selector).toMatch(/at least one label/);
    expect(buildRequest({ ...d, selector: 'customer=acme', warn: '20' }, 'm', 'n').errors.warn).toMatch(/must not be above crit/);
    expect(buildRequest({ ...d, selector: 'customer=acme', hold: '1.5' }, 'm', 'n').errors.hold).toMatch(/whole number/);
    expect(buildRequest({ ...d, selector: 'customer=acme', crit: 'x' }, 'm', 'n').errors.crit).toMatch(/number/);
    expect(buildRequest({ ...d, scope: 'node' }, 'm', 'n').req).toEqual({ scope: { kind: 'node', node: 'n' }, metric: 'm', threshold: { ...t } });
    expect(buildRequest({ ...d, scope: 'global', disabled: true }, 'm', 'n').req).toEqual({ scope: { kind: 'global' }, metric: 'm', disabled: true });
  });

  it('maps the collector messages to fields', () => {
    expect(mapServerError('bad request: invalid override: threshold: warn (5) must not be above crit (1) when the comparison is above')).toEqual({
      warn: 'threshold: warn (5) must not be above crit (1) when the comparison is above',
    });
    expect(mapServerError('bad request: invalid override: selector label "A" is not a valid label key; scope.kind "x" must be global, selector or node')).toMatchObject({
      selector: expect.stringContaining('label'),
      scope: expect.stringContaining('must be global'),
    });
  });

  it('shows the effective value and source, saves, and shows server errors next to the field', async () => {
    let effective = { metric: 'tcp_reset/sent/no_socket', threshold: t, source: 'default' };
    const calls = fakeApi({
      'GET /api/v1/thresholds': () => [200, { overrides: [] }],
      'GET /api/v1/nodes/lab-b/thresholds': () => [200, { thresholds: [effective] }],
      'PUT /api/v1/thresholds': (_u, init) => {
        const body = JSON.parse(String(init?.body));
        if (body.threshold.crit > 1000) return [400, { error: { code: 'bad_request', message: 'bad request: invalid override: threshold: crit is silly' } }];
        effective = { ...effective, threshold: body.threshold, source: 'node' };
        return [200, { id: 7, ...body, disabled: false, updated_at: new Date().toISOString() }];
      },
    });
    const saved = vi.fn();
    const el = mountAs('operator', <ThresholdEditor node="lab-b" labels={{ customer: 'acme' }} metric="tcp_reset/sent/no_socket" unit="resets/s" fallback={t} onSaved={saved} />);
    await waitFor(() => expect($(el, '[data-testid=threshold-source]').textContent).toBe('default'));
    expect(el.textContent).toContain('WARN when above 1 resets/s, CRIT when above 10 resets/s.');

    click($(el, 'button.btn-sm'));
    type($(el, '#th-crit') as HTMLInputElement, '5000');
    type($(el, '#th-warn') as HTMLInputElement, '100');
    click($(el, 'button[type=submit]'));
    await waitFor(() => expect($(el, '#th-crit-err').textContent).toContain('crit is silly'));
    expect($(el, '#th-crit').getAttribute('aria-invalid')).toBe('true');

    type($(el, '#th-crit') as HTMLInputElement, '500');
    click($(el, 'button[type=submit]'));
    await waitFor(() => expect($(el, '[data-testid=threshold-source]').textContent).toBe('node'));
    expect(saved).toHaveBeenCalled();
    const put = calls.find((c) => c.method === 'PUT' && (c.body as { threshold: { crit: number } }).threshold.crit === 500);
    expect(put?.body).toEqual({ scope: { kind: 'node', node: 'lab-b' }, metric: 'tcp_reset/sent/no_socket', threshold: { warn: 100, crit: 500, comparison: 'above', hold_intervals: 1 } });
  });

  it('hides the editor when the collector has no thresholds API', async () => {
    fakeApi({});
    const el = mountAs('operator', <ThresholdEditor node="n" labels={{}} metric="m" unit="" fallback={t} onSaved={() => {}} />);
    await waitFor(() => expect(el.textContent).toContain('does not offer threshold overrides'));
    expect(el.querySelector('button')).toBeNull();
  });
});
