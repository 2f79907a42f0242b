// Drives the NBS UI in headless Chromium (Debian's, via playwright-core) the
// way an operator would: fleet → red node → tree opened down to the child
// that explains it → chart and evidence → live mode → a threshold edit that
// changes the state → the firing alert, its delivery log and the alert rules
// editor. Fails on any step, console error or page error, and saves
// screenshots. Run by web/e2e/browser_test.go; by hand:
//
//   NBS_URL=http://127.0.0.1:7700 NBS_NODE=vm NBS_METRIC=tcp_reset/sent/no_socket node e2e/browser.mjs
//
// Environment: NBS_URL (collector), NBS_NODE (a node with a raised metric),
// NBS_METRIC (the metric that explains it), NBS_OTHER_NODE (optional second
// node), NBS_EVIDENCE_SRC (optional expected evidence source), NBS_ARTIFACTS
// (screenshot directory), NBS_CHROMIUM (default /usr/bin/chromium),
// NBS_SKIP_THRESHOLD_EDIT=1 to leave thresholds alone (e.g. on a shared collector),
// NBS_ALERT_RULE (a rule expected to fire on NBS_NODE, e.g. NBSRootCritical),
// NBS_ALERT_ROOT (its root), NBS_ALERT_RECEIVER (a receiver expected in its
// delivery log, e.g. webhook), NBS_SKIP_RULE_EDIT=1 to leave alert rules alone,
// NBS_TOKEN (an admin's API token to sign in with; without it the
// collector must run with --auth.mode=none).
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { chromium } from 'playwright-core';

const env = process.env;
const base = (env.NBS_URL ?? process.argv[2] ?? '').replace(/\/$/, '');
const nodeName = env.NBS_NODE;
const metric = env.NBS_METRIC;
if (!base || !nodeName || !metric) {
  console.error('usage: NBS_URL=… NBS_NODE=… NBS_METRIC=… node e2e/browser.mjs');
  process.exit(2);
}
const artifacts = resolve(env.NBS_ARTIFACTS ?? 'e2e/artifacts');
mkdirSync(artifacts, { recursive: true });
const userDataDir = mkdtempSync(join(tmpdir(), 'nbs-chromium-'));

const problems = [];
const step = (name) => console.log(`▶ ${name}`);
const check = (ok, msg) => {
  if (!ok) throw new Error(msg);
};

const ctx = await chromium.launchPersistentContext(userDataDir, {
  executablePath: env.NBS_CHROMIUM ?? '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  viewport: { width: 1440, height: 900 },
  colorScheme: 'light',
  timezoneId: 'UTC',
  locale: 'en-GB',
});
const page = ctx.pages()[0] ?? (await ctx.newPage());
page.setDefaultTimeout(20_000);
if (env.NBS_TOKEN) {
  // Sign in as the login page does: POST /api/v1/login turns the token into
  // the session cookie, which this browser context keeps.
  const r = await ctx.request.post(base + '/api/v1/login', { data: { token: env.NBS_TOKEN } });
  if (!r.ok()) {
    console.error(`login: HTTP ${r.status()} ${await r.text()}`);
    await ctx.close();
    rmSync(userDataDir, { recursive: true, force: true });
    process.exit(1);
  }
}

// Chromium logs every HTTP error answer as a console error. Expected ones:
// an absent optional API (alerts, before it exists) answers 404, which is
// how the UI detects it; steps that provoke an error on purpose add theirs.
// Everything else is a failure.
const allowed = [{ text: /status of 404/, url: /\/api\/v1\/alerts$/ }];
page.on('console', (m) => {
  if (m.type() !== 'error') return;
  const url = m.location()?.url ?? '';
  if (allowed.some((a) => a.text.test(m.text()) && a.url.test(url))) return;
  problems.push(`console error: ${m.text()} ${url}`);
});
page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
page.on('requestfailed', (r) => {
  const f = r.failure()?.errorText ?? '';
  if (!/ERR_ABORTED/.test(f)) problems.push(`request failed: ${r.url()} ${f}`);
});

const shot = async (name) => {
  await page.screenshot({ path: join(artifacts, `${name}.png`) });
  console.log(`  screenshot ${join(artifacts, `${name}.png`)}`);
};
const row = (id) => page.locator(`[role=treeitem][data-id="${id}"]`);
const rowState = async (id) => (await row(id).locator('.badge').innerText()).trim();
const waitRowState = async (id, state, timeout) => {
  await page.waitForFunction(
    ([id, state]) => document.querySelector(`[role=treeitem][data-id="${id}"] .badge`)?.textContent?.trim() === state,
    [id, state],
    { timeout },
  );
};
const apiExists = async (path) => {
  const r = await page.request.get(base + path);
  return r.status() !== 404;
};

let failed = false;
try {
  step('fleet page loads and shows the node, coloured by its worst root');
  const t0 = Date.now();
  await page.goto(base + '/');
  const tile = page.locator(`.tile[data-node="${nodeName}"]`);
  await tile.waitFor();
  console.log(`  fleet visible after ${Date.now() - t0} ms`);
  const cls = await tile.getAttribute('class');
  check(/st-(crit|warn)/.test(cls), `tile of ${nodeName} is not raised: class ${cls}`);
  check(/CRIT|WARN/.test(await tile.innerText()), 'tile does not name its state');
  const critCount = Number((await page.locator('.count-btn.st-crit .count-n').innerText()).trim());
  check(critCount >= 1, `CRIT count is ${critCount}`);
  if (env.NBS_OTHER_NODE) await page.locator(`.tile[data-node="${env.NBS_OTHER_NODE}"]`).waitFor();
  await page.selectOption('select:near(:text("Group by"))', 'customer');
  await page.locator('.group-head').first().waitFor();
  check(new URL(page.url()).searchParams.get('group') === 'customer', `grouping is not in the URL: ${page.url()}`);
  await shot('fleet');

  step('search is keyboard reachable and filters, and the URL keeps it');
  await page.keyboard.press('/');
  check(await page.evaluate(() => document.activeElement?.getAttribute('type') === 'search'), '"/" does not focus the search');
  await page.keyboard.type(nodeName);
  await page.waitForFunction((n) => [...document.querySelectorAll('.tile')].every((t) => t.dataset.node.includes(n)), nodeName);
  check(new URL(page.url()).searchParams.get('q') === nodeName, `search is not in the URL: ${page.url()}`);
  await page.keyboard.press('Escape');
  if (env.NBS_OTHER_NODE) await page.locator(`.tile[data-node="${env.NBS_OTHER_NODE}"]`).waitFor();

  step('opening the node shows the tree opened down to the triggered child');
  await tile.click();
  await page.waitForURL((u) => u.pathname === `/nodes/${encodeURIComponent(nodeName)}`);
  await row(metric).waitFor();
  const parts = metric.split('/');
  for (let i = 1; i < parts.length; i++) {
    const anc = parts.slice(0, i).join('/');
    check((await row(anc).getAttribute('aria-expanded')) === 'true', `${anc} is not open`);
  }
  check((await rowState(metric)) === 'CRIT', `${metric} is ${await rowState(metric)}, want CRIT`);
  await page.waitForFunction((m) => new URL(location.href).searchParams.get('metric') === m, metric);
  check((await row(metric).getAttribute('aria-selected')) === 'true', `${metric} is not selected`);
  check(await row(metric).locator('.explains-tag').isVisible(), `${metric} is not marked as the explaining child`);

  step('the metric view shows the description, a chart with data, and the evidence');
  await page.locator('.metric-view .description').waitFor();
  await page.locator('.metric-view .uplot canvas').first().waitFor();
  await page.waitForFunction(() => !document.querySelector('.chart-empty'));
  const evRows = page.locator('table.evidence tbody tr');
  await evRows.first().waitFor();
  const firstEv = await evRows.first().innerText();
  if (env.NBS_EVIDENCE_SRC) check(firstEv.includes(env.NBS_EVIDENCE_SRC), `evidence row "${firstEv}" lacks ${env.NBS_EVIDENCE_SRC}`);
  check(/no_socket/.test(await page.locator('table.evidence').innerText()), 'evidence names no reason');
  await page.waitForFunction(() => document.querySelectorAll('.tree-spark svg :is(path, circle)').length > 0);
  await shot('node');

  step('the tree is keyboard usable');
  await row(metric).focus();
  await page.keyboard.press('ArrowLeft'); // to the parent
  const parent = parts.slice(0, -1).join('/');
  check(await row(parent).evaluate((el) => el === document.activeElement), 'ArrowLeft did not move to the parent');
  await page.keyboard.press('Enter');
  await page.waitForFunction((m) => new URL(location.href).searchParams.get('metric') === m, parent);
  await page.goBack();
  await page.waitForFunction((m) => new URL(location.href).searchParams.get('metric') === m, metric);

  step('the URL holds the view: a reload restores range and selection');
  await page.selectOption('.range-picker select', '15m');
  await page.waitForFunction(() => new URL(location.href).searchParams.get('range') === '15m');
  await page.reload();
  await row(metric).waitFor();
  check((await row(metric).getAttribute('aria-selected')) === 'true', 'selection lost on reload');
  check((await page.locator('.range-picker select').inputValue()) === '15m', 'range lost on reload');

  step('live mode asks the collector to expand the node');
  const expandReq = page.waitForRequest((r) => r.method() === 'POST' && r.url().endsWith(`/api/v1/nodes/${encodeURIComponent(nodeName)}/expand`));
  await page.getByRole('button', { name: /go live/i }).click();
  const req = await expandReq;
  const resp = await req.response();
  check(resp && resp.status() < 300, `expand answered ${resp?.status()}`);
  check((await page.locator('.live-btn').getAttribute('aria-pressed')) === 'true', 'live button not pressed');
  check(new URL(page.url()).searchParams.get('live') === '1', 'live mode is not in the URL');

  if (env.NBS_SKIP_THRESHOLD_EDIT === '1') {
    console.log('  threshold edit skipped (NBS_SKIP_THRESHOLD_EDIT=1)');
  } else if (!(await apiExists('/api/v1/thresholds'))) {
    console.log('  threshold edit skipped: this collector has no /api/v1/thresholds');
  } else {
    step('a threshold override is validated, saved, and the state follows');
    await page.locator('[data-testid=threshold-source]').waitFor();
    check((await page.locator('[data-testid=threshold-source]').innerText()) === 'default', 'threshold source is not "default"');
    await page.getByRole('button', { name: /change threshold/i }).click();
    // A mistake the collector catches: an invalid label key in a selector.
    allowed.push({ text: /status of 400/, url: /\/api\/v1\/thresholds$/ });
    await page.getByLabel('nodes with labels').check();
    await page.getByLabel('Label selector').fill('Customer=acme');
    await page.getByRole('button', { name: /save override/i }).click();
    const selErr = page.locator('#th-selector-err');
    await selErr.waitFor();
    check(/not a valid label key/.test(await selErr.innerText()), `selector error: ${await selErr.innerText()}`);
    await shot('threshold-error');
    // A mistake caught before sending: warn above crit.
    await page.getByLabel('this node').check();
    await page.getByLabel(/^Warn/).fill('5000');
    await page.getByLabel(/^Crit/).fill('1000');
    await page.getByRole('button', { name: /save override/i }).click();
    await page.locator('#th-warn-err').waitFor();
    // The real edit: this node only, far above the reset rate.
    await page.getByLabel(/^Warn/).fill('1000');
    await page.getByLabel(/^Crit/).fill('5000');
    await page.getByRole('button', { name: /save override/i }).click();
    await page.locator('.saved').waitFor();
    await page.waitForFunction(() => document.querySelector('[data-testid=threshold-source]')?.textContent === 'node');
    const tEdit = Date.now();
    await waitRowState(metric, 'OK', 30_000);
    console.log(`  ${metric} turned OK ${Date.now() - tEdit} ms after the edit`);
    const eff = await page.locator('.thresholds .eff-text').innerText();
    check(/above 1,000 resets\/s/.test(eff), `effective threshold text does not show the new level: ${eff}`);
    await shot('threshold-edited');
    // Removing the override brings the default back, and the state with it.
    await page.getByRole('button', { name: /remove the override/i }).click();
    await page.waitForFunction(() => document.querySelector('[data-testid=threshold-source]')?.textContent === 'default');
    await waitRowState(metric, 'CRIT', 30_000);
  }

  if (!env.NBS_ALERT_RULE) {
    console.log('  alerts skipped: no NBS_ALERT_RULE expected to fire');
  } else if (!(await apiExists('/api/v1/alerts'))) {
    console.log('  alerts skipped: this collector has no /api/v1/alerts');
  } else {
    const rule = env.NBS_ALERT_RULE;
    step('the header links to the alerts page');
    await page.goto(base + '/');
    await page.locator('details.alerts summary').click();
    await page.getByRole('link', { name: 'All alerts and history' }).click();
    await page.waitForURL((u) => u.pathname === '/alerts');
    check(!(await page.locator('details.alerts').evaluate((d) => d.open)), 'the alerts popover stayed open');

    step(`the alerts page shows ${rule} firing on ${nodeName}, linked to the tree at the explaining metric`);
    const firingRow = page.locator(`.open-alerts tr[data-state=firing][data-node="${nodeName}"][data-rule="${rule}"]`).first();
    await firingRow.waitFor({ timeout: 30_000 });
    const cells = await firingRow.locator('td').allInnerTexts();
    console.log(`  firing: ${cells.map((c) => c.replace(/\s+/g, ' ').trim()).join(' | ')}`);
    check(/critical/.test(cells[0]), `severity cell is "${cells[0]}"`);
    if (env.NBS_ALERT_ROOT) check(cells[4].trim() === env.NBS_ALERT_ROOT, `root cell is "${cells[4]}", want ${env.NBS_ALERT_ROOT}`);
    const treeLink = firingRow.locator('.alert-metric a');
    const href = await treeLink.getAttribute('href');
    check(href === `/nodes/${encodeURIComponent(nodeName)}?metric=${encodeURIComponent(metric)}`, `tree link is ${href}, want the node at ${metric}`);
    check(/ vs warn .*crit/.test(cells[6]), `value cell "${cells[6]}" does not compare with the threshold`);
    const firstRow = await page.locator('.open-alerts tbody tr').first().getAttribute('data-state');
    check(firstRow === 'firing', `the first open alert is ${firstRow}, want firing first`);
    await page.waitForFunction(() => Number(document.querySelector('details.alerts .count')?.textContent) >= 1, null, { timeout: 30_000 });
    const thresholdEdited = env.NBS_SKIP_THRESHOLD_EDIT !== '1' && (await apiExists('/api/v1/thresholds'));
    if (thresholdEdited) {
      // The override turned the root OK for a while: that alert resolved and is history now.
      await page.locator(`.history tr[data-node="${nodeName}"][data-rule="${rule}"]`).first().waitFor({ timeout: 30_000 });
    }
    await shot('alerts');

    step('the alert filters live in the URL');
    if (env.NBS_OTHER_NODE) {
      await page.getByLabel('Node', { exact: true }).selectOption(env.NBS_OTHER_NODE);
      await page.waitForFunction((n) => new URL(location.href).searchParams.get('node') === n, env.NBS_OTHER_NODE);
      await page.waitForFunction((n) => ![...document.querySelectorAll('.open-alerts tr[data-node]')].some((r) => r.dataset.node === n), nodeName);
      await page.reload();
      await page.locator('.alerts-section h2').first().waitFor();
      check((await page.getByLabel('Node', { exact: true }).inputValue()) === env.NBS_OTHER_NODE, 'node filter lost on reload');
    }
    await page.getByLabel('State', { exact: true }).selectOption('resolved');
    await page.waitForFunction(() => new URL(location.href).searchParams.get('state') === 'resolved' && !document.querySelector('.open-alerts') && !!document.querySelector('#history-h'));
    await page.getByRole('button', { name: 'Clear filters' }).click();
    await page.waitForFunction(() => location.search === '');
    await firingRow.waitFor();

    step('the alert detail shows the delivery log');
    await firingRow.locator('a.alert-rule').focus();
    await page.keyboard.press('Enter'); // rows are plain links: the keyboard opens them
    await page.waitForURL((u) => /^\/alerts\/\d+$/.test(u.pathname));
    await page.locator('.alert-page h1').waitFor();
    check((await page.locator('.alert-page h1').innerText()).includes(rule), 'detail heading lacks the rule');
    if (env.NBS_ALERT_RECEIVER) {
      const delivered = page.locator(`table.deliveries tr[data-status=delivered]`).filter({ hasText: env.NBS_ALERT_RECEIVER }).first();
      await delivered.waitFor({ timeout: 30_000 });
      console.log(`  delivery: ${(await delivered.innerText()).replace(/\s+/g, ' ')}`);
    }
    await shot('alert-detail');
    await page.getByRole('link', { name: /in the tree$/ }).click();
    await page.waitForURL((u) => u.pathname === `/nodes/${encodeURIComponent(nodeName)}`);
    await row(metric).waitFor();
    check((await row(metric).getAttribute('aria-selected')) === 'true', `${metric} is not selected after following the alert`);

    if (env.NBS_SKIP_RULE_EDIT === '1') {
      console.log('  rule edit skipped (NBS_SKIP_RULE_EDIT=1)');
    } else {
      step('the alert rules editor: collector validation by field, a duplicate name, create and delete');
      await page.goto(base + '/alerts');
      await page.locator('nav.tabs').getByRole('link', { name: 'Rules' }).click();
      await page.waitForURL((u) => u.pathname === '/alerts/rules');
      await page.locator(`.rules-table tr[data-rule="${rule}"]`).waitFor();
      allowed.push({ text: /status of 40[09]/, url: /\/api\/v1\/alert-rules$/ });
      await page.getByRole('button', { name: 'New rule…' }).click();
      // The form focuses its first field in an effect after it renders.
      const focused = await page.waitForFunction(() => document.activeElement?.id === 'rule-name', null, { timeout: 3000 }).then(() => true, () => false);
      check(focused, 'the form does not focus its first field');
      await page.keyboard.type('1 bad');
      await page.getByLabel('Metric or pattern').fill('Tcp Reset');
      await page.getByRole('button', { name: 'Create rule' }).click();
      await page.locator('#rule-name-err').waitFor();
      await page.locator('#rule-metric-err').waitFor();
      check(/letters, digits/.test(await page.locator('#rule-name-err').innerText()), 'name error does not say what is wrong');
      check((await page.getByLabel('Name', { exact: true }).getAttribute('aria-invalid')) === 'true', 'name field not marked invalid');
      await shot('rule-errors');
      await page.getByLabel('Name', { exact: true }).fill(rule);
      await page.getByLabel('Metric or pattern').fill('tcp_reset/sent/*');
      await page.getByRole('button', { name: 'Create rule' }).click();
      await page.locator('#rule-name-err').filter({ hasText: 'exists already' }).waitFor();
      const name = 'E2eAcmeQuorum';
      await page.getByLabel('Name', { exact: true }).fill(name);
      await page.getByRole('radio', { name: /^group:/ }).check();
      await page.getByLabel('Node selector').fill('customer=nobody');
      await page.getByLabel('Fire when at least').fill('50');
      await page.getByLabel('Quorum unit').selectOption('percent');
      await page.getByRole('button', { name: 'Create rule' }).click();
      await page.locator('.saved').filter({ hasText: `Created rule ${name}` }).waitFor();
      const created = page.locator(`.rules-table tr[data-rule="${name}"]`);
      await created.waitFor();
      check(/group/.test(await created.innerText()) && /≥ 50%/.test(await created.innerText()), `created rule row: ${await created.innerText()}`);
      await shot('rules');
      await created.getByRole('button', { name: `Delete ${name}…` }).click();
      await page.getByRole('button', { name: `Delete ${name}`, exact: true }).click();
      await created.waitFor({ state: 'detached' });
    }
  }

  step('the picture for the README: the tree over the last 5 minutes, light and dark');
  // A fresh page from a shared link: fleet state, not live, short range so the trends show.
  await page.goto(`${base}/nodes/${encodeURIComponent(nodeName)}?metric=${encodeURIComponent(metric)}&range=5m`);
  await row(metric).waitFor();
  await waitRowState(metric, 'CRIT', 30_000);
  await page.locator('.metric-view .uplot canvas').first().waitFor();
  await page.locator('table.evidence tbody tr').first().waitFor();
  await page.waitForFunction(() => document.querySelectorAll('.tree-spark svg :is(path, circle)').length > 0);
  await page.waitForTimeout(500);
  await shot('tree');
  const toggle = page.locator('.theme-toggle');
  for (let i = 0; i < 3 && (await page.evaluate(() => document.documentElement.dataset.theme)) !== 'dark'; i++) await toggle.click();
  check((await page.evaluate(() => document.documentElement.dataset.theme)) === 'dark', 'theme toggle never reached dark');
  await page.waitForTimeout(400);
  await shot('tree-dark');
  if (env.NBS_ALERT_RULE && (await apiExists('/api/v1/alerts'))) {
    await page.goto(base + '/alerts');
    await page.locator('.open-alerts tr[data-state=firing]').first().waitFor({ timeout: 30_000 });
    await shot('alerts-dark');
  }

  step('an unknown node says so');
  allowed.push({ text: /status of 404/, url: /\/api\/v1\/nodes\/no-such-node(\/|$)/ });
  await page.goto(`${base}/nodes/no-such-node`);
  await page.getByText(/not known to this collector/).waitFor();

  if (problems.length) throw new Error(`browser reported problems:\n  ${problems.join('\n  ')}`);
  console.log('✓ browser end-to-end passed');
} catch (err) {
  failed = true;
  console.error(`✗ ${err.stack ?? err}`);
  if (problems.length) console.error(`browser problems:\n  ${problems.join('\n  ')}`);
  await page.screenshot({ path: join(artifacts, 'failure.png') }).catch(() => {});
  console.error(`  failure screenshot: ${join(artifacts, 'failure.png')} at ${page.url()}`);
} finally {
  await ctx.close();
  rmSync(userDataDir, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
