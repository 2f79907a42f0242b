import { beforeEach, describe, expect, it } from 'vitest';
import type { Fleet, FleetNode, FleetRoot, State } from '../api';
import { $, $$, click, fakeApi, mount, type, waitFor } from '../testutil';
import { FLEET_PAGE, FleetPage, fleetQuery, filtersFrom } from './Fleet';

beforeEach(() => history.replaceState(null, '', '/'));

const ago = (ms: number) => new Date(Date.now() - ms).toISOString();

function root(id: string, title: string, state: State, value: number, unit: string, extra: Partial<FleetRoot> = {}): FleetRoot {
  return { id, title, unit, kind: 'gauge', value, state, since: null, explains: null, ...extra };
}

function fleetNode(name: string, state: State, extra: Partial<FleetNode> = {}): FleetNode {
  return {
    name,
    labels: { rack: 'r1' },
    tenant: '',
    state,
    since: ago(5 * 60_000),
    connected: true,
    stale: false,
    last_report: ago(2000),
    interval_ms: 10000,
    roots: [
      root('ping', 'Round-trip time to the peers this node pings', state, 1.25, 'ms'),
      root('agent', 'Agent overhead', 'ok', 0.4, '% of a CPU'),
    ],
    ...extra,
  };
}

function page(nodes: FleetNode[], extra: Partial<Fleet> = {}): Fleet {
  return { time: new Date().toISOString(), total: nodes.length, matched: nodes.length, offset: 0, limit: FLEET_PAGE, counts: { ok: 0, warn: 0, crit: 0, unknown: 0 }, nodes, ...extra };
}

describe('fleet filters', () => {
  it('reads the URL and asks the collector for one page', () => {
    const f = filtersFrom(new URLSearchParams('q=web rack=r1&state=crit&state=warn&l.customer=acme&sort=name&page=3'));
    expect(fleetQuery(f)).toEqual({ q: 'web', label: ['customer=acme', 'rack=r1'], state: ['crit', 'warn'], sort: 'name', offset: 2 * FLEET_PAGE, limit: FLEET_PAGE });
    const d = fleetQuery(filtersFrom(new URLSearchParams('sort=bogus&page=-2')));
    expect(d.sort).toBe('state');
    expect(d.offset).toBe(0);
  });
});

describe('FleetPage', () => {
  const crit = fleetNode('sim-2', 'crit', {
    roots: [
      root('ping', 'Round-trip time to the peers this node pings', 'crit', 80, 'ms', {
        since: ago(12 * 60_000),
        explains: { id: 'ping/gw/loss', title: 'Lost pings to the gateway', unit: 'pings/s', value: 3, state: 'crit' },
      }),
      root('agent', 'Agent overhead', 'ok', 0.4, '% of a CPU'),
    ],
  });
  const stale = fleetNode('sim-10', 'unknown', { stale: true, connected: false, last_report: ago(10 * 60_000) });
  const ok = fleetNode('sim-11', 'ok');

  it('shows a server page: counts of the whole fleet, the explaining child and since on each tile, stale marked', async () => {
    const calls = fakeApi({
      'GET /api/v1/fleet': () => [200, page([crit, stale, ok], { total: 10000, matched: 10000, counts: { ok: 9000, warn: 700, crit: 280, unknown: 20 } })],
    });
    const el = mount(<FleetPage params={new URLSearchParams()} />);
    await waitFor(() => expect($$(el, '.tile')).toHaveLength(3));
    expect(calls[0].url.search).toBe(`?sort=state&offset=0&limit=${FLEET_PAGE}`);
    // The order is the collector's.
    expect($$(el, '.tile').map((t) => t.dataset.node)).toEqual(['sim-2', 'sim-10', 'sim-11']);
    expect($(el, '.count-btn.st-ok').textContent).toContain('9,000');
    expect($(el, '.count-btn.st-crit').textContent).toContain('280');
    expect(el.textContent).toContain('10,000 nodes');
    expect($(el, '.pager').textContent).toContain('1–3 of 10,000 · page 1 of 100');

    const tile = $(el, '.tile[data-node="sim-2"]');
    // Full root titles, the agent's last as the collector sends them.
    expect($$(tile, '.root-title').map((t) => t.textContent)).toEqual(['Round-trip time to the peers this node pings', 'Agent overhead']);
    const why = $(tile, '.explains-link');
    expect(why.textContent).toContain('Lost pings to the gateway');
    expect(why.textContent).toContain('3 pings/s');
    expect(why.getAttribute('href')).toBe('/nodes/sim-2?metric=ping%2Fgw%2Floss');
    expect($(tile, '.root-why').textContent).toContain('since 12 min');
    expect($(tile, '.tile-link').getAttribute('href')).toBe('/nodes/sim-2');
    expect($(tile, '.tile-since').textContent).toBe('since 5 min');

    const old = $(el, '.tile[data-node="sim-10"]');
    expect(old.classList.contains('tile-old')).toBe(true);
    expect($(old, '.tag-warn').textContent).toBe('stale · 10 min ago');
    expect($(old, '.tile-link').getAttribute('aria-label')).toBe('sim-10: UNKNOWN, stale, last report 10 min ago');
    // Its values are its last, not current: greyed, said so, and no explaining line.
    expect($$(old, '.root-val.old')).toHaveLength(2);
    expect(old.querySelector('.root-why')).toBeNull();
    expect($$(old, '.tile-roots li').every((li) => li.classList.contains('st-unknown'))).toBe(true);
  });

  it('pages, filters and sorts through the URL and the collector', async () => {
    const calls = fakeApi({ 'GET /api/v1/fleet': () => [200, page([ok], { total: 250, matched: 250, counts: { ok: 250, warn: 0, crit: 0, unknown: 0 } })] });
    const el = mount(<FleetPage params={new URLSearchParams()} />);
    await waitFor(() => $(el, '.tile'));
    click($$(el, '.pager button')[1]);
    expect(location.search).toBe('?page=2');
    click($(el, '.count-btn.st-crit'));
    expect(location.search).toBe('?state=crit'); // a new filter starts at page 1
    type($(el, 'input[type=search]') as HTMLInputElement, 'web');
    expect(new URLSearchParams(location.search).get('q')).toBe('web');

    const el2 = mount(<FleetPage params={new URLSearchParams('q=sim rack=r2&l.customer=acme&state=warn&sort=name&page=2')} />);
    await waitFor(() => $(el2, '.tile'));
    const asked = calls[calls.length - 1].url.searchParams;
    expect(asked.get('q')).toBe('sim');
    expect(asked.getAll('label')).toEqual(['customer=acme', 'rack=r2']);
    expect(asked.getAll('state')).toEqual(['warn']);
    expect(asked.get('sort')).toBe('name');
    expect(asked.get('offset')).toBe(String(FLEET_PAGE));
    expect($(el2, '.tag-filter').textContent).toContain('customer=acme');
  });

  it('shows the collector error', async () => {
    fakeApi({ 'GET /api/v1/fleet': () => [500, { error: { code: 'internal', message: 'internal error; the collector log has the details (request x)' } }] });
    const el = mount(<FleetPage params={new URLSearchParams()} />);
    await waitFor(() => expect($(el, '[role=alert]').textContent).toContain('collector log has the details'));
  });

  it('explains an empty fleet, and an empty filter', async () => {
    fakeApi({ 'GET /api/v1/fleet': () => [200, page([])] });
    const el = mount(<FleetPage params={new URLSearchParams()} />);
    await waitFor(() => expect(el.textContent).toContain('No node has reported'));
    const el2 = mount(<FleetPage params={new URLSearchParams('q=nope')} />);
    await waitFor(() => expect(el2.textContent).toContain('No node matches these filters'));
  });
});
