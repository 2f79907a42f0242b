// The flow map page in Chromium (run by flowmap_test.go against a real
// collector; by hand against it, or against the stand-in with NBS_MOCK=1):
//
// 1. Staff (NBS_TOKEN; none with --auth.mode=none or the stand-in): the
//    header's "Flow map" opens /flows; the CRIT edge NBS_FLOW_CLIENT →
//    NBS_FLOW_SERVER is drawn CRIT (its class, its diamond, its name says
//    so), hovering it shows its figure (NBS_FLOW_EXPLAIN); clicking opens
//    the edge: resets by reason at both ends, links into both ends' trees
//    (a link is followed to the node page, the metric open); the table view
//    of the same edges sorts by a column (aria-sort); a reload keeps the
//    view; clicking the server's owner shows only its edges (vertex= in
//    the URL), Back all of them, and Tab to the owners and Enter the same;
//    the outside peer NBS_FLOW_OUTSIDE reads as its address; at 1400
//    and 390 px (a list there, no graph), no horizontal overflow, axe clean.
// 2. A customer (NBS_CUSTOMER_TOKEN; with the stand-in, the x-mock-role
//    header): no tenant filter; nothing of NBS_FLOW_HIDDEN (another
//    tenant's owner names, comma-separated) anywhere on the page, the CSV
//    included; the outside peer is an address; 1400 and 390 px, axe clean.
//
// Any console or page error fails it. Screenshots in $NBS_ARTIFACTS/web-e2e
// or e2e/artifacts (flowmap-*.png).
import { mkdirSync } from 'node:fs';
import { resolve } from 'node:path';
import { launchChromium, screenshotter } from './chromium.mjs';

const env = process.env;
let base = (env.NBS_URL ?? '').replace(/\/$/, '');
let mock = null;
if (env.NBS_MOCK === '1') {
  const { startMock } = await import('./flowmap_mock.mjs');
  mock = await startMock({ owners: 300, edges: 1500 });
  base = mock.base;
}
const want = {
  client: env.NBS_FLOW_CLIENT ?? 'shop/cart-1',
  server: env.NBS_FLOW_SERVER ?? 'shop/db-0:5432',
  explain: env.NBS_FLOW_EXPLAIN ?? 'no_socket',
  outside: env.NBS_FLOW_OUTSIDE ?? '203.0.113.9:443',
  hidden: (env.NBS_FLOW_HIDDEN ?? '').split(',').filter(Boolean),
};
if (!base) {
  console.error('usage: NBS_URL=… [NBS_TOKEN=…] [NBS_CUSTOMER_TOKEN=…] node e2e/flowmap.mjs   (or NBS_MOCK=1)');
  process.exit(2);
}
const check = (ok, msg) => {
  if (!ok) throw new Error(msg);
};
const step = (s) => console.log(`▶ ${s}`);
const artifacts = resolve(env.NBS_ARTIFACTS ?? 'e2e/artifacts');
mkdirSync(artifacts, { recursive: true });

const ctx = await launchChromium(env);
const page = ctx.pages()[0] ?? (await ctx.newPage());
page.setDefaultTimeout(30_000);
const problems = [];
page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
// Which request a console's "Failed to load resource" is about.
const failed = [];
page.on('response', (r) => r.status() >= 400 && failed.push(`${r.status()} ${r.request().method()} ${new URL(r.url()).pathname}${new URL(r.url()).search.slice(0, 80)}`));
page.on('console', (m) => {
  // The stand-in answers 404 to what it does not have (whoami, alerts); the browser logs each.
  if (m.type() === 'error' && !(mock && /status of 404/.test(m.text()))) problems.push(`console error: ${m.text()}`);
});

// A screenshot, and axe-core on the page as it is: serious and critical findings fail the run.
const shot = screenshotter(page, artifacts, problems);
const noOverflow = async (what) => {
  const r = await page.evaluate(() => {
    const vw = document.documentElement.clientWidth;
    // The graph scrolls inside its own frame; everything else must fit.
    const wide = [...document.querySelectorAll('main *')]
      .filter((e) => !e.closest('.flow-graph svg, .table-wrap table'))
      .filter((e) => e.getBoundingClientRect().right > vw + 1)
      .map((e) => `${e.tagName.toLowerCase()}.${[...e.classList].join('.')}`);
    return { vw, wide: wide.slice(0, 5) };
  });
  check(r.wide.length === 0, `${what}: ${r.wide.join(', ')} reach past the ${r.vw} px viewport`);
};
const signIn = async (token, role) => {
  if (mock) {
    await page.setExtraHTTPHeaders(role === 'customer' ? { 'x-mock-role': 'customer' } : {});
    await page.goto(`${base}/`);
    return;
  }
  if (!token) return page.goto(`${base}/`);
  await page.goto(`${base}/login#token=${token}`);
  await page.waitForURL((u) => u.pathname === '/' && u.hash === '');
};
const signOut = async () => {
  if (mock) return;
  const out = page.locator('button.logout');
  if ((await out.count()) === 0) return;
  if (!(await out.isVisible())) await page.locator('.menu-toggle').click();
  await out.click();
  await page.waitForURL((u) => u.pathname === '/login');
};
const critPath = () => page.locator('path.fe[data-state="crit"]');
const critEdge = () => page.locator(`path.fe[aria-label^="${want.client} → ${want.server}, CRIT"]`);
// The middle of an edge's stroke in the viewport: where a user points at a
// curve (the centre of its box is off the stroke, and a path is hit by its
// stroke only).
const onStroke = async (edge) => {
  await edge.scrollIntoViewIfNeeded();
  return edge.evaluate((p) => {
    const pt = p.getPointAtLength(p.getTotalLength() / 2);
    const m = p.getScreenCTM();
    return { x: m.a * pt.x + m.c * pt.y + m.e, y: m.b * pt.x + m.d * pt.y + m.f };
  });
};

try {
  step('staff: the header leads to the flow map; the CRIT edge is drawn CRIT, by colour and by shape');
  await signIn(env.NBS_TOKEN, 'staff');
  await page.getByRole('link', { name: 'Flow map' }).click();
  await page.waitForURL((u) => u.pathname === '/flows');
  await critEdge().waitFor();
  check((await page.title()) === 'Flow map · NBS', `the title is ${await page.title()}`);
  check((await critEdge().getAttribute('class')).includes('st-crit'), 'the CRIT edge is not drawn as crit');
  const marks = await page.locator('.fe-marks rect').count();
  check(marks >= 1, 'no CRIT edge carries its diamond');
  check((await critPath().count()) === marks, `${await critPath().count()} CRIT edges but ${marks} diamonds`);
  check((await page.locator('.flow-legend').innerText()).includes('CRIT'), 'no legend');

  step('its figure on hover, and on keyboard focus');
  const mid = await onStroke(critEdge());
  await page.mouse.move(mid.x, mid.y);
  const tip = page.locator('.flow-tip');
  await tip.waitFor();
  check((await tip.innerText()).includes(want.explain), `the tooltip says ${await tip.innerText()}`);
  await page.mouse.move(2, 2);
  await page.locator('path.fe[tabindex="0"]').focus();
  await tip.waitFor();
  await page.keyboard.press('ArrowRight');
  check((await page.evaluate(() => document.activeElement?.getAttribute('data-i'))) === '1', 'ArrowRight did not move to the next edge');
  await shot('flowmap-graph');
  await noOverflow('the graph at 1400 px');

  step('the outside peer reads as its address, never a name');
  check(
    (await page.locator('.fv text').allTextContents()).some((t) => t.startsWith(want.outside)),
    `no vertex reads ${want.outside}: ${(await page.locator('.fv.fv-outside text').allTextContents()).slice(0, 5).join(', ')}`,
  );

  step("a click on an owner shows only its edges (in the URL); Back shows all again; by keyboard too");
  const serverName = want.server.replace(/:\d+$/, '');
  const allEdges = await page.locator('path.fe[data-key]').count();
  const vkeys = await page
    .locator('g.fv[role="button"]')
    .evaluateAll((gs, name) => gs.filter((g) => g.querySelector('text')?.textContent === name).map((g) => g.getAttribute('data-vertex')), serverName);
  check(vkeys.length === 1, `${vkeys.length} vertices named ${serverName}`);
  const vkey = vkeys[0];
  const vertex = page.locator(`g.fv[data-vertex="${vkey}"]`);
  await vertex.locator('text').click();
  await page.waitForURL((u) => u.searchParams.get('vertex') === vkey);
  await page.locator('.flow-toolbar .vertex-filter').waitFor();
  await page.locator('g.fv.fv-sel').waitFor();
  // Every edge drawn now has that vertex at one end, and there are fewer of them.
  const drawnEdges = await page.locator('path.fe[data-key]').evaluateAll((ps) => ps.map((p) => p.getAttribute('aria-label') ?? ''));
  check(drawnEdges.length > 0 && drawnEdges.length < allEdges, `${drawnEdges.length} edges drawn for ${serverName}, ${allEdges} before`);
  for (const e of drawnEdges) check(e.includes(`${serverName}:`) || e.startsWith(`${serverName} →`), `an edge without ${serverName} is drawn: ${e}`);
  check((await page.locator('.flow-toolbar .vertex-filter').innerText()).includes(serverName), 'the filter chip does not name the owner');
  await shot('flowmap-vertex');
  await page.goBack();
  await page.waitForURL((u) => !u.searchParams.has('vertex'));
  await page.waitForFunction((n) => document.querySelectorAll('path.fe[data-key]').length === n, allEdges);
  // Keyboard: Tab from the edges to the owners, Enter filters, and Enter again (the focus kept on it) undoes it.
  await page.locator('path.fe[tabindex="0"]').focus();
  await page.keyboard.press('Tab');
  const focused = await page.evaluate(() => document.activeElement?.getAttribute('data-vertex'));
  check(!!focused, `Tab from the edges did not reach an owner (at ${await page.evaluate(() => document.activeElement?.outerHTML.slice(0, 80))})`);
  await page.keyboard.press('Enter');
  await page.waitForURL((u) => u.searchParams.get('vertex') === focused);
  await page.waitForFunction((v) => document.activeElement?.getAttribute('data-vertex') === v && document.activeElement.getAttribute('aria-pressed') === 'true', focused);
  await page.keyboard.press('Enter');
  await page.waitForURL((u) => !u.searchParams.has('vertex'));
  await page.waitForFunction((n) => document.querySelectorAll('path.fe[data-key]').length === n, allEdges);

  step('a click opens the edge: resets by reason at both ends, links into both trees');
  const at = await onStroke(critEdge());
  await page.mouse.click(at.x, at.y);
  await page.waitForURL((u) => u.searchParams.has('edge'));
  const panel = page.locator('.flow-panel');
  await panel.locator('.flow-detail').waitFor();
  const ends = await panel.locator('.flow-ends-table').innerText();
  check(/Resets sent/.test(ends) && /no_socket/.test(ends), `the edge's ends read ${ends}`);
  const treeLinks = panel.locator('a.tree-link');
  check((await treeLinks.count()) >= 1, 'no link into a tree at a metric');
  const ends2 = await panel.locator('.flow-links li[data-end]').evaluateAll((ls) => ls.map((l) => l.dataset.end));
  check(ends2.includes('client') && ends2.includes('server'), `tree links for ${ends2}`);
  await shot('flowmap-edge');
  const serverLink = panel.locator('li[data-end="server"] a.tree-link').first();
  const href = await serverLink.getAttribute('href');
  const metric = new URL(href, base).searchParams.get('metric');
  check(href.startsWith('/nodes/') && metric, `the server's tree link is ${href}`);
  if (!mock) {
    await serverLink.click();
    await page.waitForURL((u) => u.pathname.startsWith('/nodes/') && u.searchParams.get('metric') === metric);
    const node = decodeURIComponent(new URL(href, base).pathname.split('/')[2]);
    await page.locator('.node-page h1', { hasText: node }).waitFor();
    await page.goBack();
    await panel.locator('.flow-detail').waitFor();
  }
  await page.keyboard.press('Escape');
  await page.waitForURL((u) => !u.searchParams.has('edge'));

  step('the table: the same edges, sortable; a reload keeps the view');
  await page.getByRole('button', { name: 'Table' }).click();
  await page.waitForURL((u) => u.searchParams.get('view') === 'table');
  const row = page.locator(`.flow-table tbody tr[data-state="crit"]`).first();
  await row.waitFor();
  await page.locator('.flow-table th button', { hasText: 'Resets' }).click();
  await page.waitForURL((u) => u.searchParams.get('tsort') === 'resets');
  check((await page.locator('.flow-table th[aria-sort]').innerText()).includes('Resets'), 'the sorted column has no aria-sort');
  const resets = await page.locator('.flow-table tbody tr td:nth-child(6)').allInnerTexts();
  const nums = resets.map((t) => Number(t.replaceAll(',', '')));
  check(nums.every((n, i) => i === 0 || nums[i - 1] >= n), `the resets column is not in descending order: ${nums.slice(0, 10)}`);
  await page.reload();
  await page.locator('.flow-table th[aria-sort]').waitFor();
  await shot('flowmap-table');
  await noOverflow('the table at 1400 px');

  step('at 390 px: a list, worst first, no graph; axe clean');
  await page.setViewportSize({ width: 390, height: 844 });
  await page.goto(`${base}/flows`);
  await page.locator('.flow-list li').first().waitFor();
  check((await page.locator('.flow-graph').count()) === 0, 'the graph is drawn at 390 px');
  check((await page.locator('.flow-list li').first().getAttribute('data-state')) === 'crit', 'the list does not start with a CRIT edge');
  await noOverflow('the list at 390 px');
  await shot('flowmap-phone');
  await page.locator('.flow-list li[data-state="crit"] button').first().click();
  await page.locator('.flow-panel .flow-detail').waitFor();
  await noOverflow('the edge at 390 px');
  await shot('flowmap-phone-edge');
  await page.setViewportSize({ width: 1400, height: 900 });
  await signOut();

  if (mock || env.NBS_CUSTOMER_TOKEN) {
    step("a customer: no tenant filter, nothing of another tenant's, the outside peer an address");
    await signIn(env.NBS_CUSTOMER_TOKEN, 'customer');
    await page.goto(`${base}/flows`);
    await critEdge().waitFor();
    check((await page.locator('.flow-toolbar').innerText()).includes('Tenant') === false, 'a customer is offered a tenant filter');
    const text = await page.locator('main').innerText();
    const labels = (await page.locator('path.fe').evaluateAll((ps) => ps.map((p) => p.getAttribute('aria-label') ?? ''))).join('\n');
    for (const h of want.hidden) check(!text.includes(h) && !labels.includes(h), `the customer's map shows ${h}`);
    if (want.hidden.length && !mock) {
      const csv = await page.request.get(`${base}/api/v1/flows?format=csv`);
      const body = await csv.text();
      check(csv.ok(), `the customer's CSV: HTTP ${csv.status()}`);
      for (const h of want.hidden) check(!body.includes(h), `the customer's CSV holds ${h}`);
    }
    await shot('flowmap-customer');
    await page.setViewportSize({ width: 390, height: 844 });
    await page.locator('.flow-list li').first().waitFor();
    await noOverflow('the customer list at 390 px');
    await shot('flowmap-customer-phone');
    await page.setViewportSize({ width: 1400, height: 900 });
    await signOut();
  }
  check(problems.length === 0, `${problems.join('\n')}\nanswers ≥ 400: ${failed.join(', ')}`);
  console.log('✔ the flow map');
} finally {
  await ctx.close();
  mock?.close();
}
