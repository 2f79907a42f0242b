// The alerts page at fleet scale, in Chromium (run by alerts_scale_test.go):
// the header counts every firing alert, not those of one page; the alerts
// page shows the firing CRIT on its first screen, the silent fleet as one
// group row, and says how many alerts a group holds; and the alerts page
// loads as fast as the fleet page of the same nodes (timed here, in the
// same run: BENCHMARKS.md).
//
//	NBS_URL=… NBS_TOKEN=… NBS_OPEN_ALERTS=3041 NBS_CRIT_NODE=db-1 NBS_CRIT_RULE=db_down NBS_GROUP_RULE=node_silent node e2e/alerts_scale.mjs
import { mkdirSync } from 'node:fs';
import { resolve } from 'node:path';
import { launchChromium, screenshotter } from './chromium.mjs';

const env = process.env;
const base = (env.NBS_URL ?? '').replace(/\/$/, '');
const openAlerts = Number(env.NBS_OPEN_ALERTS);
const [critNode, critRule, groupRule] = [env.NBS_CRIT_NODE, env.NBS_CRIT_RULE, env.NBS_GROUP_RULE];
if (!base || !env.NBS_TOKEN || !openAlerts || !critNode || !critRule || !groupRule) {
  console.error('usage: NBS_URL=… NBS_TOKEN=… NBS_OPEN_ALERTS=… NBS_CRIT_NODE=… NBS_CRIT_RULE=… NBS_GROUP_RULE=… node e2e/alerts_scale.mjs');
  process.exit(2);
}
const check = (ok, msg) => {
  if (!ok) throw new Error(msg);
};
const count = (n) => n.toLocaleString('en-US');
const artifacts = resolve(env.NBS_ARTIFACTS ?? 'e2e/artifacts');
mkdirSync(artifacts, { recursive: true });

const ctx = await launchChromium(env);
const page = ctx.pages()[0] ?? (await ctx.newPage());
page.setDefaultTimeout(30_000);
const problems = [];
page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
page.on('console', (m) => m.type() === 'error' && problems.push(`console error: ${m.text()}`));

// A screenshot, and axe-core on the page as it is: serious and critical findings fail the run.
const shot = screenshotter(page, artifacts, problems);

try {
  await page.goto(`${base}/login#token=${env.NBS_TOKEN}`);
  await page.waitForURL((u) => u.pathname === '/' && u.hash === '');

  console.log('▶ the header counts the firing CRIT, whatever the pending ones');
  const summary = page.locator('.alerts summary');
  await summary.waitFor();
  await page.waitForFunction(() => document.querySelector('.alerts summary .count')?.textContent === '1');
  const label = await summary.getAttribute('aria-label');
  check(label === `Alerts: 1 firing, ${openAlerts - 1} pending`, `the header says "${label}"`);
  await summary.click();
  const pop = page.locator('.alerts-pop');
  check((await pop.locator('li').first().innerText()).includes(critRule), 'the header list does not start with the CRIT');
  check((await pop.innerText()).includes(`of ${count(openAlerts)} open alerts (1 firing)`), `the header list does not say it is cut: ${await pop.innerText()}`);
  await summary.click();

  console.log('▶ the alerts page: the CRIT on the first screen, the silent fleet one row');
  await page.goto(`${base}/alerts`);
  const first = page.locator('.open-alerts tbody tr').first();
  await first.waitFor();
  check((await first.getAttribute('data-node')) === critNode && (await first.getAttribute('data-state')) === 'firing', `the first row is ${await first.getAttribute('data-node')} ${await first.getAttribute('data-state')}`);
  const box = await first.boundingBox();
  check(box && box.y + box.height <= 900, `the CRIT row is not on the first screen (${JSON.stringify(box)})`);
  const group = page.locator(`tr.alert-group-row[data-rule="${groupRule}"]`);
  check((await group.innerText()).includes(`${groupRule} — ${count(openAlerts - 1)} nodes`), `the group row says ${await group.innerText()}`);
  check((await page.locator('.updated').innerText()).startsWith(`1 firing · ${count(openAlerts - 1)} pending`), `the status says ${await page.locator('.updated').innerText()}`);
  const rows = await page.locator('.open-alerts tbody tr').count();
  check(rows <= 10, `the open table holds ${rows} rows, want the groups (a few)`);

  console.log('▶ the group opens a page at a time and says how many it holds');
  await group.locator('button.group-toggle').click();
  await page.locator('tr.in-group').nth(99).waitFor();
  const more = page.locator('.alert-group .alerts-more');
  check((await more.innerText()).includes(`Showing 100 of ${count(openAlerts - 1)} alerts of ${groupRule}`), `the group says ${await more.innerText()}`);
  await more.getByRole('button', { name: /Show 100 more/ }).click();
  await page.locator('tr.in-group').nth(199).waitFor();
  const ids = await page.locator('tr.in-group').evaluateAll((rs) => rs.map((r) => r.dataset.alertId));
  check(new Set(ids).size === ids.length, 'an alert is listed twice in the opened group');
  await group.locator('button.group-toggle').click();
  await shot('alerts-at-scale');
  await page.setViewportSize({ width: 390, height: 844 });
  await page.waitForTimeout(250);
  await shot('alerts-at-scale-phone');
  await page.setViewportSize({ width: 1400, height: 900 });

  console.log('▶ the Node filter suggests a few names, never every node, and filters by the one picked');
  await page.goto(`${base}/alerts`);
  await page.locator('.open-alerts tbody tr').first().waitFor();
  check((await page.locator('.node-filter [role="option"]').count()) === 0, 'the Node filter drew choices before it was used');
  const nodeBox = page.getByRole('combobox', { name: 'Node', exact: true });
  await nodeBox.fill(critNode);
  const picked = page.getByRole('listbox', { name: 'Nodes' }).getByRole('option', { name: critNode, exact: true });
  await picked.waitFor();
  // Every node (the fleet's names) arrives once the box is used: the suggestions stay a few.
  await page.waitForFunction(() => performance.getEntriesByType('resource').some((e) => new URL(e.name).pathname === '/api/v1/nodes'));
  await nodeBox.fill(critNode.slice(0, 1));
  await page.getByRole('listbox', { name: 'Nodes' }).getByRole('option').first().waitFor();
  const suggested = await page.getByRole('listbox', { name: 'Nodes' }).getByRole('option').count();
  check(suggested >= 1 && suggested <= 12, `the Node filter suggests ${suggested} names of ${count(openAlerts)}`);
  await nodeBox.fill(critNode);
  await picked.click();
  await page.waitForFunction((n) => new URL(location.href).searchParams.get('node') === n, critNode);
  await page.waitForFunction(
    (n) => {
      const rows = [...document.querySelectorAll('.open-alerts tbody tr[data-node]')];
      return rows.length > 0 && rows.every((r) => r.dataset.node === n);
    },
    critNode,
  );
  check((await nodeBox.inputValue()) === critNode, `the Node filter reads ${await nodeBox.inputValue()}`);

  console.log('▶ timing: the alerts page beside the fleet page, interleaved');
  const timed = { alerts: [], fleet: [] };
  const apiTimes = { alerts: [], fleet: [] };
  // Where a load's time went: each API call's end, from the navigation's start.
  const calls = () =>
    page.evaluate(() =>
      performance
        .getEntriesByType('resource')
        .filter((e) => e.name.includes('/api/v1/'))
        .map((e) => `${new URL(e.name).pathname.replace('/api/v1', '')}${new URL(e.name).search.slice(0, 24)} ${Math.round(e.responseEnd)}`)
        .join(', '),
    );
  for (let i = 0; i < 11; i++) {
    let t0 = Date.now();
    await page.goto(`${base}/alerts`);
    await page.locator(`.open-alerts tbody tr[data-node="${critNode}"]`).waitFor();
    await page.waitForFunction(() => /^[\d,]+ firing/.test(document.querySelector('.updated')?.textContent ?? ''));
    timed.alerts.push(Date.now() - t0);
    apiTimes.alerts.push(await calls());
    t0 = Date.now();
    await page.goto(`${base}/`);
    await page.locator('.tile').first().waitFor();
    await page.waitForFunction(() => /^[\d,]+ nodes/.test(document.querySelector('.updated')?.textContent ?? ''));
    timed.fleet.push(Date.now() - t0);
    apiTimes.fleet.push(await calls());
  }
  for (const [k, v] of Object.entries(timed)) {
    const s = [...v].sort((a, b) => a - b);
    console.log(`bench chromium: ${k} page load to first rows: median ${s[s.length >> 1]} ms, max ${s[s.length - 1]} ms (${s.join(', ')})`);
    const slowest = v.indexOf(s[s.length - 1]);
    console.log(`  its slowest load's API calls (ms from navigation): ${apiTimes[k][slowest]}`);
  }
  check(problems.length === 0, problems.join('\n'));
  console.log('✔ alerts at scale');
} finally {
  await ctx.close();
}
