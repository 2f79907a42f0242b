// Drives the NBS UI in headless Chromium (Debian's, via playwright-core) the
// way its users would, and fails on any step, console error or page error,
// saving screenshots. Run by web/e2e/browser_test.go; by hand:
//
//   NBS_URL=http://127.0.0.1:7700 NBS_NODE=vm NBS_METRIC=tcp_reset/sent/no_socket NBS_TOKEN=nbs_… node e2e/browser.mjs
//
// Scenarios, in this order, in one browser (each signs in through the login
// link /login#token=… and out through the header's Log out button):
//
// 1. An admin (NBS_TOKEN; without it the collector must ask nobody to sign
//    in): fleet → red node → tree opened down to the child that explains it →
//    chart and evidence → live mode → a threshold edit that changes the
//    state → the firing alert, its delivery log, its chart over the breach,
//    the tree at the breach window, acknowledge and silence (and undo them),
//    no horizontal overflow at 390 px and 1400 px → the alert rules editor →
//    the node's tenant & labels editor (a move to another tenant reviewed
//    with its history split, then cancelled) → a token created (its secret
//    shown once) and revoked → a tenant bootstrap token created (shown once,
//    with the agent's flag) and revoked. Before the tokens: the export page
//    after a scrape of /api/v1/export/metrics?match=customer=acme (its series
//    and its one node as the page shows them, the scrape config), at 1400
//    and 390 px.
// 2. An operator (NBS_OPERATOR_TOKEN): edits a threshold, then finds that
//    change (metric and new value) in the audit log, and removes it again;
//    the tenant & labels editor is not offered.
// 3. A customer (NBS_CUSTOMER_TOKEN, e.g. of customer=acme): the fleet shows
//    exactly its nodes, nothing anywhere can be edited (no threshold editor
//    button, no live mode, no tenant & labels editor or agent claims, no
//    alert rules, audit log, export page or tokens), and another
//    customer's node is "not known", exactly like a node that does not exist.
// 4. A report (NBS_REPORT_TOKEN, default NBS_CUSTOMER_TOKEN; skipped when the
//    collector has no /api/v1/report-definitions): the customer opens Reports
//    from the header, runs a day's report, waits for its charts and tables
//    (every section heading), checks the scope (its nodes, never another
//    customer's) in the page, the JSON and the CSV download, that the page
//    fits 390 and 1400 px, then prints the page to PDF (page.pdf() is
//    Chromium's print-to-PDF), turns the PDF into PNGs with
//    `pdftoppm -png -r 60` and checks no page is blank, the page count is
//    bounded by the sections with data, the first page is the summary
//    against the previous period, and the PDF's text (`pdftotext`) has every
//    heading and the charts' legends; last it follows an incident to the
//    node's tree at the incident's time. Needs poppler-utils.
//
// axe-core runs on every page the run takes a screenshot of (and the report
// at 390 px): see axeCheck.
//
// The pages of issue 27 are each checked at 1400 and 390 px (atWidths, with
// axe at both): a simulated node whose every echo was lost reads — on its
// ping root beside the loss, its one report a visible dot; "was CRIT" stays
// in its column and no name is cut; the breach chart asks a step no finer
// than the node's interval, draws a line, its tick labels each their own;
// the delivery log breaks no word; the alert's tree window ends by now and
// its column reads "11 min before"; the rules table is not cut; Escape
// closes the phone menu; a revoked token's secret leaves the screen;
// revoked tokens' UNKNOWN badges pass axe's contrast; the report's CSV has
// its percentiles in one order, no figure reads "no data 0.99%" or "(— of
// —)", the data start is the report's data_from to the minute, and an
// incident opens its window with the breach in sight.
//
// NBS_SCENARIOS (comma-separated: admin,operator,customer,report; default all)
// runs only some, e.g. NBS_SCENARIOS=report against a mock collector; without
// admin, NBS_NODE and NBS_METRIC are not needed.
//
// Environment:
//   NBS_URL                 the collector (required)
//   NBS_NODE, NBS_METRIC    a node with a raised metric, and the metric that explains it (required for admin)
//   NBS_OTHER_NODE          optional second node, expected in the (admin's) fleet
//   NBS_FLEET_NODES         optional: simulated nodes sim-1… in the fleet (some WARN, explained by a child):
//                           the admin scans it page by page, by name, and opens an explaining child
//   NBS_NODE_TENANT         optional: NBS_NODE's tenant, expected on its page
//   NBS_EVIDENCE_SRC        optional expected evidence source
//   NBS_ARTIFACTS           screenshot directory (default e2e/artifacts)
//   NBS_CHROMIUM            default /usr/bin/chromium
//   NBS_SKIP_THRESHOLD_EDIT=1  leave thresholds alone in scenario 1 (e.g. on a shared collector)
//   NBS_ALERT_RULE          a rule expected to fire on NBS_NODE, e.g. NBSRootCritical
//   NBS_ALERT_ROOT          its root
//   NBS_ALERT_RECEIVER      a receiver expected in its delivery log, e.g. webhook
//   NBS_SKIP_RULE_EDIT=1    leave alert rules alone
//   NBS_EXPORT_FAILING_RECEIVER  a push receiver that cannot be reached: the export page must show it failing
//                           (unset: the page must say no receivers are configured)
//   NBS_TOKEN               an admin token for scenario 1 (unset: no sign-in, --auth.mode=none)
//   NBS_OPERATOR_TOKEN      an operator token: runs scenario 2
//   NBS_OPERATOR_NAME       optional: that token's name, expected as the audit entry's actor
//   NBS_OPERATOR_NODE       where the operator edits (default NBS_NODE)
//   NBS_OPERATOR_METRIC     which metric (default NBS_METRIC)
//   NBS_CUSTOMER_TOKEN      a customer token: runs scenario 3
//   NBS_CUSTOMER_NODES      comma-separated: exactly the nodes that customer must see (required with the token)
//   NBS_CUSTOMER_HIDDEN_NODES  comma-separated: other customers' nodes, which must not exist for it (required with the token)
//   NBS_CUSTOMER_SCOPE      optional: the scope the header must show, e.g. customer=acme
//   NBS_REPORT_TOKEN        a customer token for scenario 4 (default NBS_CUSTOMER_TOKEN)
//   NBS_REPORT_NODES        comma-separated: nodes the report must cover (default NBS_CUSTOMER_NODES)
//   NBS_REPORT_HIDDEN_NODES comma-separated: nodes it must never mention (default NBS_CUSTOMER_HIDDEN_NODES)
//   NBS_REPORT_MIN_CHARTS   charts the day's report must draw (default 1)
//   NBS_REPORT_INCIDENT_NODE  a node with an incident in the customer's day: its link is followed to the tree
//   NBS_PDFTOPPM, NBS_PDFTOTEXT  default pdftoppm and pdftotext from $PATH
//   NBS_UPDATE_SCREENSHOTS=1  also copy the report's screenshot to docs/screenshots/report.png
//                           (browser_test.go copies the others it names)
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { inflateSync } from 'node:zlib';
import { chromium } from 'playwright-core';

const env = process.env;
const list = (v) => (v ?? '').split(',').map((x) => x.trim()).filter(Boolean);
const scenarios = new Set(env.NBS_SCENARIOS ? list(env.NBS_SCENARIOS) : ['admin', 'operator', 'customer', 'report']);
const base = (env.NBS_URL ?? process.argv[2] ?? '').replace(/\/$/, '');
const nodeName = env.NBS_NODE;
const metric = env.NBS_METRIC;
if (!base || (scenarios.has('admin') && (!nodeName || !metric))) {
  console.error('usage: NBS_URL=… NBS_NODE=… NBS_METRIC=… node e2e/browser.mjs');
  process.exit(2);
}
const customerNodes = list(env.NBS_CUSTOMER_NODES);
const hiddenNodes = list(env.NBS_CUSTOMER_HIDDEN_NODES);
if (env.NBS_CUSTOMER_TOKEN && (!customerNodes.length || !hiddenNodes.length)) {
  console.error('NBS_CUSTOMER_TOKEN needs NBS_CUSTOMER_NODES and NBS_CUSTOMER_HIDDEN_NODES');
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
  viewport: { width: 1400, height: 900 },
  colorScheme: 'light',
  timezoneId: 'UTC',
  locale: 'en-GB',
});
const page = ctx.pages()[0] ?? (await ctx.newPage());
page.setDefaultTimeout(20_000);

// Chromium logs every HTTP error answer as a console error. Expected ones:
// an absent optional API (alerts, whoami, before they exist) answers 404, which is
// how the UI detects it; steps that provoke an error on purpose add theirs.
// Everything else is a failure.
const allowed = [{ text: /status of 404/, url: /\/api\/v1\/alerts(\?|$)/ }];
// A collector without the access routes (no sign-in at all) answers 404 to
// whoami, which the UI takes as "nobody needs to sign in".
if (!env.NBS_TOKEN) allowed.push({ text: /status of 404/, url: /\/api\/v1\/whoami$/ });
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

// axe-core (web/node_modules, no network) checks every page the run takes
// a screenshot of. It is evaluated in the page through the DevTools
// protocol, which the collector's Content-Security-Policy does not govern,
// so the UI's own policy stays as it is. Serious and critical violations
// fail the run, on every page; moderate and minor ones are written, with
// the others, to artifacts/axe.json.
const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
const axeFindings = [];
const axeCheck = async (name) => {
  const loaded = await page.evaluate(() => typeof window.axe === 'object');
  if (!loaded) await page.evaluate(axeSource);
  const res = await page.evaluate(async () => {
    const r = await window.axe.run(document, { resultTypes: ['violations'] });
    return r.violations.map((v) => ({
      id: v.id,
      impact: v.impact,
      help: v.help,
      nodes: v.nodes.slice(0, 5).map((n) => n.target.join(' ')),
      // Whether every element is in the header (the shell every page shares).
      header: v.nodes.every((n) => document.querySelector(n.target.join(' '))?.closest('.topbar') != null),
    }));
  });
  const path = new URL(page.url()).pathname;
  const bad = res.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  axeFindings.push({ page: name, path, violations: res });
  writeFileSync(join(artifacts, 'axe.json'), JSON.stringify(axeFindings, null, 2));
  for (const v of bad) {
    const msg = `axe on ${name} (${path}${v.header ? ', header' : ''}): ${v.impact} ${v.id}: ${v.help} at ${v.nodes.join(', ')}`;
    problems.push(msg);
  }
  console.log(`  axe ${name}: ${bad.length} serious or critical of ${res.length} violations`);
};
const shot = async (name) => {
  await page.screenshot({ path: join(artifacts, `${name}.png`) });
  console.log(`  screenshot ${join(artifacts, `${name}.png`)}`);
  await axeCheck(name);
};

// No page may be wider than the window: the phone (390 px) and desktop
// (1400 px) widths, each checked on the page as it is.
const checkNoOverflow = async (name, { axe = false } = {}) => {
  const was = page.viewportSize();
  try {
    for (const width of [390, 1400]) {
      await page.setViewportSize({ width, height: 900 });
      await page.waitForTimeout(250); // charts resize on the next frame
      const wide = await page.evaluate(() => {
        const d = document.documentElement;
        const over = [...document.querySelectorAll('body *')].filter((e) => e.getBoundingClientRect().right > d.clientWidth + 1 && !e.closest('.table-wrap'));
        const names = (es) => es.slice(0, 3).map((e) => `${e.tagName.toLowerCase()}.${[...e.classList].join('.')}`);
        const own = over.filter((e) => !e.closest('.topbar'));
        return { scroll: d.scrollWidth, client: d.clientWidth, over: names(over), own: names(own), header: own.length === 0 };
      });
      // The phone layout is a page of its own for axe-core too.
      if (axe && width === 390) await axeCheck(`${name}-390`);
      if (wide.scroll <= wide.client) continue;
      check(false, `${name} at ${width} px is ${wide.scroll} px wide (window ${wide.client}): ${wide.over.join(', ')}${wide.header ? ' (the header only)' : ''}`);
    }
  } finally {
    if (was) await page.setViewportSize(was);
  }
};
// Issue 27's page checks: each at the desktop (1400 px) and phone (390 px)
// widths, with axe-core on each (no serious or critical finding, contrast
// included), on the page as it is.
let atWidthsMs = 0; // what these checks add to the run, said at its end
const atWidths = async (name, fn) => {
  const was = page.viewportSize();
  const t0 = Date.now();
  try {
    for (const width of [1400, 390]) {
      await page.setViewportSize({ width, height: 900 });
      await page.waitForTimeout(300); // charts resize on the next frame
      await fn(width);
      await axeCheck(`${name}-${width}`);
    }
  } finally {
    if (was) await page.setViewportSize(was);
    atWidthsMs += Date.now() - t0;
  }
};
// The tree's rows: no name cut short, and the recent window's column ("was
// CRIT", its count) within its own box, never over the value.
const treeLayout = () =>
  page.evaluate(() => {
    const out = [];
    for (const r of document.querySelectorAll('[role=treeitem]')) {
      const id = r.dataset.id;
      const t = r.querySelector('.title-text');
      if (t && t.scrollWidth > t.clientWidth + 1) out.push(`${id}: its name is cut to ${t.clientWidth} of ${t.scrollWidth} px ("${t.textContent}")`);
      const v = r.querySelector('.tree-value')?.getBoundingClientRect();
      const rc = r.querySelector('.tree-recent');
      if (!v || !rc || getComputedStyle(rc).display === 'none') continue;
      const b = rc.getBoundingClientRect();
      if (v.width && b.width && v.right > b.left + 0.5 && b.right > v.left + 0.5) out.push(`${id}: the value [${v.left}, ${v.right}] and the recent column [${b.left}, ${b.right}] overlap`);
      for (const c of rc.children) {
        const cb = c.getBoundingClientRect();
        if (cb.width && (cb.left < b.left - 0.5 || cb.right > b.right + 0.5)) out.push(`${id}: "${c.textContent}" [${cb.left}, ${cb.right}] sticks out of its column [${b.left}, ${b.right}]`);
      }
    }
    return out;
  });
// Words broken across lines though they would fit on one line of their
// cell ("deliv-ered"): a string longer than its cell (a URL) may break.
const brokenWords = (sel) =>
  page.evaluate((sel) => {
    const root = document.querySelector(sel);
    if (!root) return [`no ${sel} on the page`];
    const out = [];
    const walk = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      const cell = n.parentElement.closest('td, th, div');
      const cs = getComputedStyle(cell);
      const room = cell.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
      for (const m of n.textContent.matchAll(/\S+/g)) {
        const r = document.createRange();
        r.setStart(n, m.index);
        r.setEnd(n, m.index + m[0].length);
        const rects = [...r.getClientRects()].filter((x) => x.width > 0);
        const width = rects.reduce((w, x) => w + x.width, 0);
        if (rects.length > 1 && width <= room + 1) out.push(`"${m[0]}" (${Math.round(width)} px) broken over ${rects.length} lines in a ${Math.round(room)} px cell`);
      }
    }
    return out.slice(0, 5);
  }, sel);
// A table cut off: cells past the window, or a wrapper that hides some of it.
const clippedTable = (sel) =>
  page.evaluate((sel) => {
    const t = document.querySelector(sel);
    if (!t) return [`no ${sel} on the page`];
    const vw = document.documentElement.clientWidth;
    const out = [];
    const wrap = t.closest('.table-wrap');
    if (wrap && wrap.scrollWidth > wrap.clientWidth + 1) out.push(`its wrapper shows ${wrap.clientWidth} of ${wrap.scrollWidth} px`);
    for (const c of t.querySelectorAll('th, td')) {
      // A phone's cards keep the header row for screen readers only, clipped to nothing.
      const head = c.closest('thead');
      if (head && getComputedStyle(head).position === 'absolute') continue;
      const r = c.getBoundingClientRect();
      if (r.width && (r.right > vw + 1 || r.left < -1)) out.push(`${c.tagName.toLowerCase()} "${c.textContent.trim().slice(0, 30)}" spans ${Math.round(r.left)}–${Math.round(r.right)} px of ${vw}`);
    }
    return out.slice(0, 5);
  }, sel);
// How many pixels of a canvas chart are drawn in a CSS colour (the first
// line's, --chart-1) within 6 canvas pixels of a point: a lone point's
// marker is dozens, a speck one or two.
const inkOf = (sel, cssVar, [x, y]) =>
  page.evaluate(
    ([sel, cssVar, x, y]) => {
      const c = document.querySelector(sel);
      const hex = getComputedStyle(document.documentElement).getPropertyValue(cssVar).trim().replace('#', '');
      const [r, g, b] = [0, 2, 4].map((i) => parseInt(hex.slice(i, i + 2), 16));
      const px = c.getContext('2d').getImageData(x - 6, y - 6, 13, 13).data;
      let n = 0;
      for (let i = 0; i < px.length; i += 4) if (px[i + 3] > 200 && Math.abs(px[i] - r) < 40 && Math.abs(px[i + 1] - g) < 40 && Math.abs(px[i + 2] - b) < 40) n++;
      return n / (window.devicePixelRatio || 1) ** 2;
    },
    [sel, cssVar, x, y],
  );
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
const escapeRe = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const hrefNode = (n) => `/nodes/${encodeURIComponent(n)}`;
const setTheme = async (want) => {
  const toggle = page.locator('.theme-toggle');
  const now = () => page.evaluate(() => document.documentElement.dataset.theme ?? 'system');
  for (let i = 0; i < 3 && (await now()) !== want; i++) await toggle.click();
  check((await now()) === want, `theme toggle never reached ${want}`);
};

// Signs in the way `make run` hands out access: a login link carrying the
// token in its fragment. The UI must take the token out of the address bar
// and land on the fleet, showing who is signed in.
const login = async (token, role) => {
  // From a blank page: opening the link is a page load, as from a terminal.
  await page.goto('about:blank');
  await page.goto(`${base}/login#token=${token}`);
  await page.waitForURL((u) => u.pathname === '/' && u.hash === '');
  check(!page.url().includes(token), `the token is still in the address: ${page.url()}`);
  check(!(await page.evaluate((t) => location.href.includes(t), token)), 'the token is still in the address');
  await page.locator('.who-role').waitFor();
  const shown = (await page.locator('.who-role').innerText()).trim();
  check(shown === role, `the header shows the role ${shown}, want ${role}`);
};

// Signs out through the header; afterwards the collector must not know the browser.
const logout = async () => {
  await page.getByRole('button', { name: 'Log out' }).click();
  await page.waitForURL((u) => u.pathname === '/login');
  await page.locator('#login-token').waitFor();
  const r = await page.request.get(base + '/api/v1/whoami');
  check(r.status() === 401, `after logging out /api/v1/whoami answers ${r.status()}, want 401`);
};

// noOverflow fails when the page is wider than a viewport of width px: the
// fleet's own content must fit; what overflows elsewhere (the header) is
// named in the log.
const noOverflow = async (what, width, keep = false) => {
  const before = page.viewportSize();
  await page.setViewportSize({ width, height: 900 });
  await page.waitForTimeout(300);
  const r = await page.evaluate(() => {
    const vw = document.documentElement.clientWidth;
    const wide = [...document.querySelectorAll('main *')].filter((e) => e.getBoundingClientRect().right > vw + 1).map((e) => `${e.tagName.toLowerCase()}.${[...e.classList].join('.')}`);
    return { vw, sw: document.documentElement.scrollWidth, wide: wide.slice(0, 5) };
  });
  check(r.wide.length === 0, `${what} at ${width} px: ${r.wide.join(', ')} reach past the ${r.vw} px viewport`);
  if (r.sw > r.vw) console.log(`  note: ${what} at ${width} px: the document is ${r.sw} px wide (outside the page's main content)`);
  else console.log(`  ${what} at ${width} px: no horizontal overflow`);
  if (!keep && before) await page.setViewportSize(before);
};

// The operator scans a large fleet (NBS_FLEET_NODES simulated nodes beside
// the lab's): one server page at a time, counts of the whole fleet, names in
// numeric order, a raised node's explaining child one click away.
const fleetNodes = Number(env.NBS_FLEET_NODES ?? 0);
async function scanLargeFleet() {
  step(`the fleet of ${fleetNodes} simulated nodes is served a page at a time`);
  const total = async () => Number((await page.locator('.updated').innerText()).match(/^([\d,]+) nodes/)?.[1].replaceAll(',', '') ?? 0);
  await page.waitForFunction((n) => /^[\d,]+ nodes/.test(document.querySelector('.updated')?.textContent ?? '') && Number(document.querySelector('.updated').textContent.match(/^([\d,]+)/)[1].replaceAll(',', '')) >= n, fleetNodes);
  check((await total()) >= fleetNodes, `the fleet says ${await total()} nodes, want at least ${fleetNodes}`);
  const tiles = await page.locator('.tile').count();
  check(tiles > 0 && tiles <= 100, `the page holds ${tiles} tiles, want one server page (at most 100)`);
  const pager = await page.locator('.pager').innerText();
  check(/page 1 of \d+/.test(pager), `pager says ${pager}`);
  const counted = (await page.locator('.count-btn .count-n').allInnerTexts()).reduce((sum, t) => sum + Number(t.trim().replaceAll(',', '') || 0), 0);
  check(counted === (await total()), `the state counts add up to ${counted}, want ${await total()}`);

  step('sorted by name, sim-2 comes before sim-10, and the next page follows on');
  await page.selectOption('select:near(:text("Sort"))', 'name');
  await page.waitForFunction(() => new URL(location.href).searchParams.get('sort') === 'name');
  await page.getByRole('button', { name: 'Next ›' }).click();
  await page.waitForFunction(() => new URL(location.href).searchParams.get('page') === '2');
  await page.waitForFunction(() => (document.querySelector('.pager')?.textContent ?? '').includes('page 2 of'));
  const names = await page.locator('.tile').evaluateAll((ts) => ts.map((t) => t.dataset.node));
  const sims = names.filter((n) => /^sim-\d+$/.test(n)).map((n) => Number(n.slice(4)));
  check(sims.length > 10, `page 2 by name holds ${sims.length} sim nodes: ${names.slice(0, 5).join(', ')}…`);
  check(sims.every((v, i) => i === 0 || sims[i - 1] < v), `page 2 is not in numeric order: ${names.slice(0, 12).join(', ')}`);
  await page.goto(base + '/?sort=name&q=sim-');
  await page.locator('.tile').first().waitFor();
  const first = await page.locator('.tile').evaluateAll((ts) => ts.slice(0, 3).map((t) => t.dataset.node));
  check(JSON.stringify(first) === JSON.stringify(['sim-1', 'sim-2', 'sim-3']), `by name the fleet starts ${first.join(', ')}, want sim-1, sim-2, sim-3`);

  step('the WARN nodes, each tile naming the child that explains it and since when; open one');
  await page.goto(base + '/?state=warn&q=sim-');
  const warnTile = page.locator('.tile.st-warn').first();
  await warnTile.waitFor();
  check((await page.locator('.tile:not(.st-warn)').count()) === 0, 'a tile that is not WARN is shown under the WARN filter');
  const why = warnTile.locator('.explains-link');
  check(/since \d/.test(await warnTile.locator('.root-why').innerText()), 'the raised root does not say since when');
  const whyHref = new URL(await why.getAttribute('href'), base);
  const child = whyHref.searchParams.get('metric');
  check(!!child && child.includes('/'), `the explaining link goes to ${whyHref}`);
  await noOverflow('fleet', 390, true);
  await shot('fleet-phone');
  await page.setViewportSize({ width: 1400, height: 900 });
  await why.click();
  await page.waitForURL((u) => u.pathname === whyHref.pathname && u.searchParams.get('metric') === child);
  await row(child).waitFor();
  check((await row(child).getAttribute('aria-selected')) === 'true', `${child} is not selected on the node page`);

  step("a simulated node with every echo lost: its ping root reads — (not 0 ms) beside the loss; a lone report among many is a visible dot");
  // One report an hour: over 6 hours a single point with nothing either side.
  await page.goto(`${base}${whyHref.pathname}?metric=${encodeURIComponent(child)}&range=6h`);
  await row('ping').waitFor();
  await page.locator('.metric-view figure.chart[data-points]:not([data-points="0"])').waitFor();
  await atWidths('node-lone-point', async (width) => {
    const root = (await row('ping').locator('.tree-value').innerText()).trim();
    check(root === '—', `at ${width} px the ping root with every echo lost reads "${root}", want —`);
    check(/WARN|CRIT/.test(await rowState('ping')), `the ping root is ${await rowState('ping')}`);
    const loss = (await row(child).locator('.tree-value').innerText()).trim();
    check(loss !== '—' && /\d/.test(loss), `at ${width} px the loss beside it reads "${loss}"`);
    console.log(`  ${width} px: ping root "${root}", loss "${loss}"`);
  });
  // lone-1 reported every 10 s for 20 minutes but for one report alone in a
  // 3-minute gap: among a line's hundreds of points, that one is a marker.
  await page.goto(`${base}${hrefNode('lone-1')}?metric=ping&range=30m`);
  await page.locator('.metric-view .uplot[data-lone-at]:not([data-lone-at=""])').waitFor();
  await atWidths('node-lone-point', async (width) => {
    await page.waitForFunction(() => (document.querySelector('.metric-view .uplot')?.dataset.loneAt ?? '') !== '');
    const at = (await page.locator('.metric-view .uplot').getAttribute('data-lone-at')).split(';').map((p) => p.split(',').map(Number));
    const pts = Number(await page.locator('.metric-view figure.chart').getAttribute('data-points'));
    check(at.length === 1 && pts > 60, `at ${width} px lone-1's chart has ${at.length} lone points of ${pts}, want its one report in the gap among many`);
    const ink = await inkOf('.metric-view .uplot canvas', '--chart-1', at[0]);
    check(ink >= 20, `at ${width} px the lone point at ${at[0]} is ${ink} px of the line's colour: a speck, want a marker (≥ 20 px)`);
    console.log(`  ${width} px: lone-1's lone point at ${at[0]} is ${ink} px of ${pts} points`);
  });
  await page.goto(base + '/');
}

async function adminScenario() {
  if (env.NBS_TOKEN) {
    step('without a session, the UI sends the user to the login page, remembering where they were going');
    allowed.push({ text: /status of 401/, url: /\/api\/v1\/whoami$/ });
    await page.goto(`${base}${hrefNode(nodeName)}`);
    await page.waitForURL((u) => u.pathname === '/login');
    check(new URL(page.url()).searchParams.get('next') === hrefNode(nodeName), `login page without the way back: ${page.url()}`);
    await page.locator('#login-token').waitFor();
    step('a wrong token is refused with a clear message');
    allowed.push({ text: /status of 401/, url: /\/api\/v1\/login$/ });
    await page.getByLabel('API token').fill('nbs_' + 'a'.repeat(52));
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByText('This token is not valid or has expired').waitFor();
    await shot('login-error');
    step('the admin signs in with a login link');
    await login(env.NBS_TOKEN, 'admin');
  }

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
  await noOverflow('fleet', 1400);
  await shot('fleet');
  if (fleetNodes > 0) await scanLargeFleet();
  if (env.NBS_OTHER_NODE) {
    await page.goto(base + '/?q=' + encodeURIComponent(env.NBS_OTHER_NODE));
    await page.locator(`.tile[data-node="${env.NBS_OTHER_NODE}"]`).waitFor();
    await page.goto(base + '/');
    await tile.waitFor();
  }

  step('search is keyboard reachable and filters, and the URL keeps it');
  await page.keyboard.press('/');
  check(await page.evaluate(() => document.activeElement?.getAttribute('type') === 'search'), '"/" does not focus the search');
  await page.keyboard.type(nodeName);
  await page.waitForFunction((n) => [...document.querySelectorAll('.tile')].every((t) => t.dataset.node.includes(n)), nodeName);
  check(new URL(page.url()).searchParams.get('q') === nodeName, `search is not in the URL: ${page.url()}`);
  await page.keyboard.press('Escape');
  await page.waitForFunction(() => !new URL(location.href).searchParams.has('q'));

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
  const evRows = page.locator('table.evidence tbody tr:not(.group-head)');
  await evRows.first().waitFor();
  const firstEv = await evRows.first().innerText();
  if (env.NBS_EVIDENCE_SRC) check(firstEv.includes(env.NBS_EVIDENCE_SRC), `evidence row "${firstEv}" lacks ${env.NBS_EVIDENCE_SRC}`);
  check(/no_socket/.test(await page.locator('table.evidence').innerText()), 'evidence names no reason');
  // Grouped (by owner where events name one), each group with its count; the owner column first.
  check(/\(\d+ events?\)/.test(await page.locator('table.evidence tr.group-head').first().innerText()), 'evidence groups carry no count');
  const cols = (await page.locator('table.evidence thead th').allInnerTexts()).map((c) => c.trim()).filter((c) => c !== 'Time' && c !== 'Metric');
  // Titled for people (Evidence.tsx, fieldTitle), whatever the style's case.
  const col = (title) => cols.findIndex((c) => c.toLowerCase() === title.toLowerCase());
  check(col('Owner') <= 0, `the owner column is not first: ${cols.join(', ')}`);
  check(col('Namespace inode') < 0 || col('Namespace inode') > col('Destination'), `the netns inode comes before the flow: ${cols.join(', ')}`);
  check(!cols.some((c) => /^[a-z]+(_[a-z]+)+$/i.test(c)), `an evidence column is titled by its field name: ${cols.join(', ')}`);
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

  if (env.NBS_PAST_AT) {
    // NBS_PAST_AT is in a minute before the reset storm began: the tree then was quiet.
    const root = metric.split('/')[0];
    step(`the node page at a past time (?at=${env.NBS_PAST_AT}) shows the state then, and goes back to live`);
    await page.goto(`${base}${hrefNode(nodeName)}?at=${encodeURIComponent(env.NBS_PAST_AT)}`);
    await page.locator('.viewing').waitFor();
    check(/Viewing/.test(await page.locator('.viewing').innerText()), 'no "viewing <time>" indicator');
    await row(root).waitFor();
    check((await rowState(root)) === 'OK', `${root} at ${env.NBS_PAST_AT} is ${await rowState(root)}, want OK (before the storm)`);
    check((await row(metric).count()) === 0 || (await rowState(metric)) !== 'CRIT', `${metric} is CRIT before the storm`);
    await shot('node-past');
    await page.getByRole('button', { name: 'Back to live' }).click();
    await page.waitForFunction(() => !new URL(location.href).searchParams.has('at'));
    await waitRowState(root, 'CRIT', 20_000);
    check((await page.locator('.viewing').count()) === 0, 'the "viewing" indicator stays after going back to live');

    step('the trend lines come in batches, not one request per row');
    let batch = 0;
    const count = (r) => {
      if (new URL(r.url()).pathname.endsWith('/series/batch')) batch++;
    };
    page.on('request', count);
    await page.getByRole('button', { name: 'Expand all' }).click();
    await page.waitForTimeout(3000);
    page.off('request', count);
    const rows = await page.locator('[role=treeitem]').count();
    check(batch >= 1 && batch <= Math.ceil(rows / 64) + 1, `${batch} batch series requests for ${rows} rows`);
    await page.getByRole('button', { name: 'Collapse all' }).click();

    step('the node page fits a 390 px phone: nothing wider than the screen');
    await page.setViewportSize({ width: 390, height: 844 });
    await page.goto(`${base}${hrefNode(nodeName)}?metric=${encodeURIComponent(metric)}`);
    await row(metric).waitFor();
    await page.locator('table.evidence').waitFor();
    const wide = await page.evaluate(() => {
      const w = document.documentElement.clientWidth;
      const page = document.querySelector('.node-page');
      const out = [];
      if (page.scrollWidth > page.clientWidth + 1) out.push(`.node-page scrolls: ${page.scrollWidth} > ${page.clientWidth}`);
      // What sticks out of the screen, outside a scrolling box (a wide table scrolls in its own).
      const scrolls = (el) => {
        for (let p = el.parentElement; p && p !== page; p = p.parentElement) if (/(auto|scroll|hidden)/.test(getComputedStyle(p).overflowX)) return true;
        return false;
      };
      for (const el of page.querySelectorAll('*')) {
        const r = el.getBoundingClientRect();
        if (r.width > 0 && r.right > w + 1 && !scrolls(el)) out.push(`${el.tagName.toLowerCase()}.${el.className} ends at ${Math.round(r.right)} px`);
      }
      return out.slice(0, 5);
    });
    check(wide.length === 0, `at 390 px the node page is wider than the screen: ${wide.join('; ')}`);
    await shot('node-390');
    await page.setViewportSize({ width: 1400, height: 900 });
  }

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
    // It was CRIT a moment ago: the recent column says so, in its own box.
    await row(metric).locator('.was').waitFor();
    await atWidths('tree-was', async (width) => {
      const bad = await treeLayout();
      check(bad.length === 0, `at ${width} px the tree's rows: ${bad.join('; ')}`);
      if (width === 1400) check((await row(metric).locator('.was').innerText()).trim() === 'was CRIT', `the recent column reads "${await row(metric).locator('.was').innerText()}"`);
    });
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
    const link = new URL(href, base);
    check(
      link.pathname === `/nodes/${encodeURIComponent(nodeName)}` && link.searchParams.get('metric') === metric && Date.parse(link.searchParams.get('from')) < Date.parse(link.searchParams.get('to')),
      `tree link is ${href}, want the node at ${metric} over the breach window (from, to)`,
    );
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
      // The Node filter is a search box: type part of the name, pick it from the few suggested.
      await page.getByRole('combobox', { name: 'Node', exact: true }).fill(env.NBS_OTHER_NODE.slice(0, -1));
      const suggested = page.getByRole('listbox', { name: 'Nodes' }).getByRole('option', { name: env.NBS_OTHER_NODE, exact: true });
      await suggested.waitFor();
      const suggestions = await page.getByRole('listbox', { name: 'Nodes' }).getByRole('option').count();
      check(suggestions >= 1 && suggestions <= 12, `the Node filter suggests ${suggestions} names`);
      await suggested.click();
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
    const seriesAsked = [];
    const onSeries = (r) => /\/api\/v1\/nodes\/[^/]+\/series\?/.test(r.url()) && seriesAsked.push(new URL(r.url()));
    page.on('request', onSeries);
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
    step('on-call: the alert page charts the explaining metric over the breach, and follows it to the tree window');
    await page.locator('.alert-chart .uplot canvas').first().waitFor({ timeout: 30_000 });
    page.off('request', onSeries);
    // The chart's step is never finer than the node's interval (a histogram reported every 10 s asked at 5 s draws no line).
    const interval = (await (await page.request.get(`${base}/api/v1/nodes/${encodeURIComponent(nodeName)}`)).json()).interval_ms;
    check(seriesAsked.length > 0, 'the alert page asked for no series');
    for (const u of seriesAsked) {
      const m = /^(\d+)s$/.exec(u.searchParams.get('step') ?? '');
      check(m && Number(m[1]) * 1000 >= interval, `the breach chart asks step=${u.searchParams.get('step')}, the node reports every ${interval} ms`);
    }
    const fig = page.locator('.alert-chart figure.chart');
    const [pts, lone] = [Number(await fig.getAttribute('data-points')), Number(await fig.getAttribute('data-lone'))];
    check(pts > 0 && lone <= pts / 4, `the breach chart has ${lone} lone points of ${pts}: no line to draw`);
    console.log(`  breach chart: step ${seriesAsked[0].searchParams.get('step')} (interval ${interval} ms), ${pts} points, ${lone} alone`);
    await page.locator('table.deliveries').waitFor();
    await atWidths('alert-page', async (width) => {
      const ticks = ((await page.locator('.alert-chart .uplot').getAttribute('data-ticks')) ?? '').split('|').filter(Boolean);
      check(ticks.length >= 1 && new Set(ticks).size === ticks.length, `at ${width} px the breach chart's ticks repeat: ${ticks.join(', ')}`);
      const broken = await brokenWords('table.deliveries');
      check(broken.length === 0, `at ${width} px the delivery log breaks words: ${broken.join('; ')}`);
      const clipped = await clippedTable('table.deliveries');
      check(clipped.length === 0, `at ${width} px the delivery log is cut: ${clipped.join('; ')}`);
      console.log(`  ${width} px: ticks ${ticks.join(' ')}`);
    });
    await shot('alert-detail');
    const alertURL = page.url();
    const since = await page.evaluate(() => {
      const dt = [...document.querySelectorAll('.alert-facts-panel dt')].find((d) => d.textContent === 'Breach began');
      return Date.parse(dt?.nextElementSibling?.querySelector('time')?.getAttribute('datetime') ?? '');
    });
    check(Number.isFinite(since), 'the alert page does not say when the breach began');
    await page.getByRole('link', { name: /in the tree$/ }).click();
    await page.waitForURL((u) => u.pathname === `/nodes/${encodeURIComponent(nodeName)}`);
    const win = new URL(page.url()).searchParams;
    check(
      Date.parse(win.get('from')) < since && Date.parse(win.get('to')) > since,
      `the tree opened at ${page.url()}, want a window around the breach that began ${new Date(since).toISOString()}`,
    );
    check(Date.parse(win.get('to')) <= Date.now() + 1000, `the tree window ends at ${win.get('to')}, in the future`);
    await row(metric).waitFor();
    check((await row(metric).getAttribute('aria-selected')) === 'true', `${metric} is not selected after following the alert`);
    await atWidths('alert-tree-window', async (width) => {
      const head = page.locator('.tree-recent-head');
      if (width === 1400) {
        const text = (await head.innerText()).trim();
        check(/^(\d+ (s|min|h|d)|Window) before$/.test(text), `the tree's window column reads "${text}", want e.g. "11 min before"`);
        console.log(`  the window column reads "${text}"`);
      } else check(!(await head.isVisible()), 'the window column shows at 390 px');
      const bad = await treeLayout();
      check(bad.length === 0, `at ${width} px the tree's rows: ${bad.join('; ')}`);
    });

    step('on-call: acknowledge and silence the alert from its page (audited), then end the silence');
    await page.goto(alertURL);
    await page.locator('.alert-actions-panel').waitFor();
    await page.getByLabel('Comment').fill('e2e: on it');
    await page.getByRole('button', { name: 'Acknowledge', exact: true }).click();
    await page.locator('.alert-page > .handled-tags .tag-ack').waitFor();
    await page.getByLabel('Silence for').selectOption({ label: '1 hour' });
    await page.getByRole('button', { name: 'Silence', exact: true }).click();
    await page.locator('.alert-page > .handled-tags .tag-silenced').filter({ hasText: 'silenced until' }).waitFor();
    await shot('alert-silenced');
    const audit = await page.evaluate(async () => (await (await fetch('/api/v1/audit?limit=20')).json()).entries ?? []);
    for (const action of ['acknowledge', 'silence']) {
      check(audit.some((e) => e.action === action && e.object_kind === 'alert'), `the audit log has no ${action} of the alert: ${JSON.stringify(audit.slice(0, 3))}`);
    }
    await page.getByRole('button', { name: 'End silence' }).click();
    await page.locator('.alert-page > .handled-tags .tag-silenced').waitFor({ state: 'detached' });
    await page.getByRole('button', { name: 'Withdraw acknowledgement' }).click();
    await page.locator('.alert-page > .handled-tags .tag-ack').waitFor({ state: 'detached' });

    step('phone (390 px) and desktop (1400 px): no page is wider than the screen; the header menu holds log out and the theme');
    for (const width of [390, 1400]) {
      await page.setViewportSize({ width, height: 844 });
      for (const path of ['/', '/alerts', new URL(alertURL).pathname, '/alerts/rules', `/nodes/${encodeURIComponent(nodeName)}`]) {
        await page.goto(base + path);
        await page.locator('main h1, main h2').first().waitFor();
        await page.waitForTimeout(300);
        const over = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
        check(over <= 0, `${path} at ${width} px is ${over} px wider than the screen`);
      }
      await page.goto(base + '/alerts');
      await page.locator('.open-alerts tr[data-state=firing]').first().waitFor({ timeout: 30_000 });
      if (width === 390) {
        check((await page.locator('.open-alerts tbody tr').first().evaluate((r) => getComputedStyle(r).display)) === 'block', 'alerts are not cards at 390 px');
        await shot('alerts-phone');
        await page.getByRole('button', { name: 'Menu' }).click();
      }
      for (const name of ['Log out', /^Colour theme/]) {
        const b = page.getByRole('button', { name });
        await b.waitFor();
        const box = await b.boundingBox();
        check(box && box.x >= 0 && box.x + box.width <= width, `"${name}" is off-screen at ${width} px: ${JSON.stringify(box)}`);
      }
      if (width === 390) {
        await shot('header-menu-phone');
        await page.keyboard.press('Escape');
        await page.getByRole('button', { name: 'Log out' }).waitFor({ state: 'hidden', timeout: 3000 });
        const menu = page.getByRole('button', { name: 'Menu' });
        check((await menu.getAttribute('aria-expanded')) === 'false', 'Escape left the phone menu marked open');
        await page.getByRole('button', { name: 'Menu' }).click();
        await page.getByRole('button', { name: 'Log out' }).focus();
        await page.keyboard.press('Escape');
        await page.getByRole('button', { name: 'Log out' }).waitFor({ state: 'hidden', timeout: 3000 });
        check(await menu.evaluate((b) => b === document.activeElement), 'Escape from inside the menu did not give the focus back to its button');
      } else {
        await page.keyboard.press('Escape');
        check(await page.getByRole('button', { name: 'Log out' }).isVisible(), 'Escape hid the account at 1400 px');
      }
    }
    await page.setViewportSize({ width: 1400, height: 900 });

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
      await atWidths('rules', async (width) => {
        const clipped = await clippedTable('table.rules-table');
        check(clipped.length === 0, `at ${width} px the rules table is cut: ${clipped.join('; ')}`);
        const cells = await created.locator('td, th').evaluateAll((cs) => cs.filter((c) => c.getBoundingClientRect().width > 0).length);
        check(cells >= 10, `at ${width} px the rule shows ${cells} of its cells`);
      });
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
  await page.locator('table.evidence tbody tr:not(.group-head)').first().waitFor();
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

  if (await apiExists('/api/v1/node-identities')) {
    step("tenancy: the admin's tenant & labels editor shows the node's tenant and explains a move's history split (not sent)");
    await setTheme('light');
    await page.goto(`${base}${hrefNode(nodeName)}`);
    await page.locator('.node-tenant').waitFor();
    const tenant = (await page.locator('.node-tenant').innerText()).trim();
    if (env.NBS_NODE_TENANT) check(tenant === env.NBS_NODE_TENANT, `${nodeName}'s tenant shows as ${tenant}, want ${env.NBS_NODE_TENANT}`);
    let bound = false;
    const onRequest = (r) => r.method() === 'PUT' && r.url().endsWith('/labels') && (bound = true);
    page.on('request', onRequest);
    await page.getByRole('button', { name: 'Tenant & labels…' }).click();
    const field = page.locator('#node-tenant');
    await field.waitFor();
    const want = tenant === 'none' ? '' : tenant;
    check((await field.inputValue()) === want, `the editor's tenant is "${await field.inputValue()}", the node's "${want}"`);
    await field.fill('e2e-other');
    await page.getByRole('button', { name: 'Review…' }).click();
    const split = await page.locator('[data-confirm=history]').innerText();
    check(split.includes('e2e-other sees only what it reports from now') && (!want || split.includes(`${want} keeps what ${nodeName} reported until now`)), `the confirmation does not explain the split: ${split}`);
    await page.getByRole('button', { name: 'Move ' + nodeName + ' to e2e-other' }).waitFor();
    await shot('node-tenancy');
    await page.getByRole('button', { name: 'Back' }).click();
    await page.getByRole('button', { name: 'Cancel' }).click();
    await page.locator('.tenancy-editor').waitFor({ state: 'detached' });
    page.off('request', onRequest);
    check(!bound, 'labels were sent without being confirmed');
  }

  if (await apiExists('/api/v1/export/status')) await exportPage();

  if (env.NBS_TOKEN) {
    step('tokens: an admin creates one, sees its secret once, and revokes it');
    await setTheme('light');
    await page.goto(base + '/');
    await page.getByRole('link', { name: 'Tokens' }).click();
    await page.waitForURL((u) => u.pathname === '/tokens');
    await page.locator('.tokens-table tbody tr').first().waitFor();
    await page.getByRole('button', { name: 'New token…' }).click();
    const name = `e2e-viewer-${Date.now() % 100000}`;
    await page.getByLabel('Name', { exact: true }).fill(name);
    await page.getByLabel('Role', { exact: true }).selectOption('viewer');
    await page.getByLabel('Expires after').selectOption('1d');
    await page.getByRole('button', { name: 'Create token' }).click();
    const secret = await page.locator('#new-token').inputValue();
    check(/^nbs_[a-z2-7]{52}$/.test(secret), `the new token looks like ${secret.slice(0, 8)}…`);
    check(/only time the token is shown/.test(await page.locator('.secret-box').innerText()), 'no warning that the token is shown once');
    check(!page.url().includes(secret), 'the secret is in the URL');
    await page.getByRole('button', { name: 'Copy token' }).click();
    await page.locator('.secret-box [role=status]').filter({ hasText: /copied|selected/ }).waitFor();
    await shot('token-created');
    const created = page.locator(`.tokens-table tr[data-token="${name}"]`);
    await created.waitFor();
    const r = await page.request.get(base + '/api/v1/nodes', { headers: { Authorization: `Bearer ${secret}` } });
    check(r.status() === 200, `the new token is refused: ${r.status()}`);
    // Revoked while its secret is still shown: the secret, which works no more, leaves the screen.
    await created.getByRole('button', { name: `Revoke ${name}…` }).click();
    await page.getByRole('button', { name: `Revoke ${name}`, exact: true }).click();
    await created.waitFor({ state: 'detached' });
    await page.locator('#new-token').waitFor({ state: 'detached', timeout: 3000 });
    check(!(await page.locator('main').innerText()).includes(secret) && !(await page.content()).includes(secret), "a revoked token's secret is still on the page");
    const r2 = await page.request.get(base + '/api/v1/nodes', { headers: { Authorization: `Bearer ${secret}` } });
    check(r2.status() === 401, `the revoked token still works: ${r2.status()}`);
    await shot('tokens');
    // The revoked ones listed too: their UNKNOWN-coloured badges must read (axe's contrast).
    await page.goto(base + '/tokens?all=1');
    await page.locator('.tokens-table .badge.st-unknown').first().waitFor();
    await atWidths('tokens-revoked', async () => {});

    if (await apiExists('/api/v1/node-bootstrap-tokens')) {
      step("tenant bootstrap tokens: an admin creates one (shown once, with the agent's flag) and revokes it");
      const boot = `e2e-boot-${Date.now() % 100000}`;
      await page.getByRole('button', { name: 'New bootstrap token…' }).click();
      await page.locator('#bootstrap-name').fill(boot);
      await page.getByLabel('Labels of the nodes it enrolls').fill('customer=e2e-tenant');
      await page.locator('#bootstrap-expires').selectOption('1d');
      await page.getByRole('button', { name: 'Create bootstrap token' }).click();
      const bsecret = await page.locator('#new-bootstrap-token').inputValue();
      check(/^nbsb1_[A-Za-z0-9_-]{43}$/.test(bsecret), `the new bootstrap token looks like ${bsecret.slice(0, 9)}…`);
      check(!page.url().includes(bsecret), 'the bootstrap token is in the URL');
      check((await page.locator('.secret-box').innerText()).includes('--node.bootstrap-token-file'), 'no agent flag next to the bootstrap token');
      await shot('bootstrap-token-created');
      await page.getByRole('button', { name: /hide the token/ }).click();
      const brow = page.locator(`.bootstrap-table tr[data-bootstrap="${boot}"]`);
      await brow.waitFor();
      check((await brow.innerText()).includes('customer=e2e-tenant'), `the bootstrap token's row: ${await brow.innerText()}`);
      await brow.getByRole('button', { name: `Revoke bootstrap token ${boot}…` }).click();
      await page.getByRole('button', { name: `Revoke ${boot}`, exact: true }).click();
      await brow.waitFor({ state: 'detached' });
    }
    await logout();
  }
}

// The export page (staff): Prometheus scrapes the collector once, and the
// page shows that scrape's series (as many as the scrape held), the push
// receivers (NBS_EXPORT_FAILING_RECEIVER failing, or none), the scrape URL
// and config for this collector; at 1400 and 390 px with axe, nothing wider
// than the window.
async function exportPage() {
  step("the export page: a Prometheus scrape, then its series on the page, the push receivers, the scrape config");
  const t0 = Date.now();
  // Narrowed to lab-b's tenant (?match=): the same scrape whatever the
  // simulated fleet still holds in the export's window, and a cheap one.
  const scraped = await page.request.get(base + '/api/v1/export/metrics?match=customer%3Dacme');
  check(scraped.status() === 200, `GET /api/v1/export/metrics?match=customer=acme answered ${scraped.status()}`);
  // Counters and gauges: one line per series.
  const series = (await scraped.text()).split('\n').filter((l) => l && !l.startsWith('#')).length;
  check(series > 0, 'the scrape held no series');
  const scrapeMs = Date.now() - t0;
  await page.goto(base + '/');
  await page.getByRole('link', { name: 'Export', exact: true }).click();
  await page.waitForURL((u) => u.pathname === '/export');
  const scrapeRow = page.locator('.export-table tr[data-kind="scrape"]');
  await scrapeRow.waitFor();
  const shown = Number((await scrapeRow.locator('[data-series]').innerText()).replaceAll(',', ''));
  check(shown === series, `the page says the newest scrape had ${shown} series; the scrape held ${series}`);
  const nodes = (await scrapeRow.locator('[data-nodes]').innerText()).trim();
  check(nodes === '1', `the page says the newest scrape (customer=acme: lab-b) had ${nodes} nodes, want 1`);
  const failingName = env.NBS_EXPORT_FAILING_RECEIVER;
  if (failingName) {
    // A receiver nothing listens for fails from its first push: the page
    // (refreshed every 15 s) says so, with the error as the collector has it.
    const rrow = page.locator(`.receivers-table tr[data-receiver="${failingName}"]`);
    await page.waitForFunction((n) => document.querySelector(`.receivers-table tr[data-receiver="${n}"]`)?.dataset.health === 'failing', failingName, { timeout: 40_000 });
    const failing = (await rrow.locator('.export-failing').innerText()).trim();
    check(/^Failing: nothing delivered yet/.test(failing), `the failing receiver says: ${failing}`);
    const shownErr = (await rrow.locator('.export-error').innerText()).trim();
    check(/connection refused/.test(shownErr), `the failing receiver's error reads: ${shownErr}`);
    console.log(`  export: ${failingName}: ${failing} · ${shownErr}`);
  } else {
    check((await page.locator('.export-no-receivers').innerText()).includes('--export.receivers-file'), 'no empty state for the push receivers');
  }
  const url = (await page.locator('[data-scrape-url]').innerText()).trim();
  check(url === `${base}/api/v1/export/metrics`, `the scrape URL reads ${url}`);
  const config = await page.locator('.export-config').innerText();
  check(config.includes(`targets: ['${new URL(base).host}']`) && config.includes('metrics_path: /api/v1/export/metrics'), `the scrape config does not point at this collector:\n${config}`);
  await atWidths('export', async (width) => {
    await page.screenshot({ path: join(artifacts, `export-${width}.png`), fullPage: true });
    const wide = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
    check(wide <= 0, `the export page at ${width} px scrolls sideways by ${wide} px`);
    for (const table of ['.export-table', ...(failingName ? ['.receivers-table'] : [])]) {
      const cut = await clippedTable(table);
      check(cut.length === 0, `${table} at ${width} px is cut: ${cut.join('; ')}`);
    }
  });
  console.log(`  export: the scrape held ${series} series (${scrapeMs} ms); the page and its checks took ${((Date.now() - t0) / 1000).toFixed(1)} s`);
}

// Scenario 2: an operator changes a threshold, and the audit log shows who
// changed what, from which value to which.
async function operatorScenario() {
  const node = env.NBS_OPERATOR_NODE || nodeName;
  const m = env.NBS_OPERATOR_METRIC || metric;
  // Levels no default has, so the audit entry is this edit's and no other's.
  const warn = 1234;
  const crit = 4321;
  step('an operator signs in with a login link');
  await login(env.NBS_OPERATOR_TOKEN, 'operator');
  check((await page.getByRole('link', { name: 'Audit log' }).count()) === 1, 'an operator has no link to the audit log');
  check((await page.getByRole('link', { name: 'Tokens' }).count()) === 0, 'an operator is offered the tokens page');

  step(`the operator changes the threshold of ${m} on ${node}`);
  await page.goto(`${base}${hrefNode(node)}?metric=${encodeURIComponent(m)}`);
  await page.locator('[data-testid=threshold-source]').waitFor();
  check((await page.getByRole('button', { name: /tenant & labels/i }).count()) === 0, 'an operator is offered the tenant & labels editor');
  await page.getByRole('button', { name: /change threshold/i }).click();
  await page.getByLabel('this node').check();
  await page.getByLabel(/^Warn/).fill(String(warn));
  await page.getByLabel(/^Crit/).fill(String(crit));
  await page.getByRole('button', { name: /save override/i }).click();
  await page.locator('.saved').waitFor();
  await page.waitForFunction(() => document.querySelector('[data-testid=threshold-source]')?.textContent === 'node');

  step('the audit log lists the change: who, which metric, the new levels');
  await page.getByRole('link', { name: 'Audit log' }).click();
  await page.waitForURL((u) => u.pathname === '/audit');
  await page.getByLabel('Object', { exact: true }).selectOption('threshold');
  await page.waitForFunction(() => new URL(location.href).searchParams.get('kind') === 'threshold');
  const entry = page.locator('.audit-table tr[data-kind="threshold"]').filter({ hasText: String(warn) }).first();
  await entry.waitFor({ timeout: 15_000 });
  const cells = await entry.locator('td').allInnerTexts();
  console.log(`  audit: ${cells.map((c) => c.replace(/\s+/g, ' ').trim().slice(0, 120)).join(' | ')}`);
  check(/\boperator\b/.test(cells[1]), `the entry's role is not operator: ${cells[1]}`);
  if (env.NBS_OPERATOR_NAME) check(cells[1].includes(env.NBS_OPERATOR_NAME), `the entry's actor is not ${env.NBS_OPERATOR_NAME}: ${cells[1]}`);
  check(new RegExp(`\\b${warn}\\b`).test(cells[4]), `the change does not show the new warn level ${warn}: ${cells[4]}`);
  await entry.locator('.audit-full summary').click();
  const full = await entry.locator('.audit-json').innerText();
  check(full.includes(m), `the entry does not name the metric ${m}: ${full.slice(0, 300)}`);
  check(full.includes(String(crit)), `the entry does not hold the new crit level ${crit}`);
  await shot('audit');
  await setTheme('dark');
  await shot('audit-dark');
  await setTheme('light');

  step('the operator removes the override again');
  await page.goto(`${base}${hrefNode(node)}?metric=${encodeURIComponent(m)}`);
  const remove = page.getByRole('button', { name: `Remove the override for node ${node}` });
  await remove.click();
  await page.locator('.saved').filter({ hasText: 'Removed the override' }).waitFor();
  await logout();
}

// Scenario 3: a customer sees its nodes and nothing else, and can change nothing.
async function customerScenario() {
  step('a customer signs in with a login link');
  await login(env.NBS_CUSTOMER_TOKEN, 'customer');
  if (env.NBS_CUSTOMER_SCOPE) {
    const scope = (await page.locator('.who-scope').innerText()).trim();
    check(scope === env.NBS_CUSTOMER_SCOPE, `the header shows the scope ${scope}, want ${env.NBS_CUSTOMER_SCOPE}`);
  }

  step(`the fleet shows exactly ${customerNodes.join(', ')}`);
  for (const n of customerNodes) await page.locator(`.tile[data-node="${n}"]`).waitFor();
  // Let a refresh pass: nothing else may arrive later either.
  await page.waitForTimeout(5500);
  const shown = (await page.locator('.tile').evaluateAll((ts) => ts.map((t) => t.dataset.node))).sort();
  check(JSON.stringify(shown) === JSON.stringify([...customerNodes].sort()), `the fleet shows ${shown.join(', ')}, want ${customerNodes.join(', ')}`);
  const pageText = await page.locator('main').innerText();
  for (const n of hiddenNodes) check(!pageText.includes(n), `the fleet page mentions ${n}`);
  const counted = (await page.locator('.count-btn .count-n').allInnerTexts()).reduce((sum, t) => sum + Number(t.trim() || 0), 0);
  check(counted === customerNodes.length, `the state counts add up to ${counted} nodes, want ${customerNodes.length}`);

  step('nothing can be edited, and the staff pages are not offered');
  for (const name of ['Audit log', 'Export', 'Tokens', 'Alert rules']) check((await page.getByRole('link', { name, exact: true }).count()) === 0, `a customer is offered "${name}"`);
  const alerts = page.locator('details.alerts');
  if (await alerts.count()) {
    await alerts.locator('summary').click();
    check((await alerts.getByRole('link', { name: 'Alert rules' }).count()) === 0, 'the alerts popover links to the alert rules');
    const popover = await alerts.innerText();
    for (const n of hiddenNodes) check(!popover.includes(n), `the alerts popover mentions ${n}`);
    await page.keyboard.press('Escape');
  }
  await shot('customer-fleet');
  const own = customerNodes[0];
  await page.locator(`.tile[data-node="${own}"]`).click();
  await page.waitForURL((u) => u.pathname === hrefNode(own));
  await page.locator('[role=treeitem]').first().waitFor();
  if (!new URL(page.url()).searchParams.get('metric')) await page.locator('[role=treeitem]').first().click();
  await page.locator('.thresholds .eff-text').waitFor();
  await page.waitForTimeout(500); // the effective threshold's request settles
  check((await page.getByRole('button', { name: /change threshold/i }).count()) === 0, 'a customer is offered the threshold editor');
  check((await page.getByRole('button', { name: /remove the override/i }).count()) === 0, 'a customer is offered removing overrides');
  check((await page.getByRole('button', { name: /go live/i }).count()) === 0, 'a customer is offered live mode (expand)');
  check((await page.locator('form').count()) === 0, 'a form is on a customer\'s node page');
  check((await page.getByRole('button', { name: /tenant & labels/i }).count()) === 0, 'a customer is offered the tenant & labels editor');
  check((await page.locator('.notice-claims').count()) === 0, "a customer is shown the agent's label claims");
  check((await row('agent').count()) === 0, "a customer is shown the agent's own root");
  const treeBody = await (await page.request.get(`${base}/api/v1/nodes/${encodeURIComponent(own)}/tree`)).json();
  check(!treeBody.roots.some((r) => r.id === 'agent'), "the collector sends a customer the agent's own root");
  check(!JSON.stringify(treeBody).includes('--'), 'the collector sends a customer command-line flags');
  await shot('customer-node');
  if (await apiExists('/api/v1/alerts')) {
    await page.goto(base + '/alerts');
    await page.locator('.alerts-section h2').first().waitFor();
    await page.waitForFunction(() => !document.querySelector('.loading'));
    check((await page.locator('nav.tabs').count()) === 0, 'the alerts page offers the rules tab');
    const alertNodes = await page.locator('tr[data-node]').evaluateAll((rs) => rs.map((r) => r.dataset.node));
    for (const n of alertNodes) check(!n || customerNodes.includes(n), `the alerts page lists an alert of ${n}`);
  }
  for (const path of ['/alerts/rules', '/audit', '/export', '/tokens']) {
    await page.goto(base + path);
    await page.getByRole('heading', { name: 'Not found' }).waitFor();
  }

  step(`another customer's node (${hiddenNodes.join(', ')}) is not known, exactly like one that does not exist`);
  const missing = 'no-such-node-e2e';
  for (const n of [...hiddenNodes, missing]) allowed.push({ text: /status of 404/, url: new RegExp(`/api/v1/nodes/${escapeRe(encodeURIComponent(n))}(/|$|\\?)`) });
  await page.goto(`${base}${hrefNode(missing)}`);
  await page.getByText(/not known to this collector/).waitFor();
  await page.waitForTimeout(1000);
  const absentText = (await page.locator('main .error-box').innerText()).replaceAll(missing, 'NODE');
  for (const n of hiddenNodes) {
    await page.goto(`${base}${hrefNode(n)}`);
    await page.getByText(/not known to this collector/).waitFor();
    await page.waitForTimeout(1000); // both the node's and its tree's answer are in
    const text = (await page.locator('main .error-box').innerText()).replaceAll(n, 'NODE');
    check(text === absentText, `${n} answers differently from a node that does not exist:\n    ${text}\n    ${absentText}`);
  }
  await shot('customer-hidden-node');
  await logout();
}

// A PNG's pixels, enough for pdftoppm's output (8-bit RGB or RGBA or grey, not interlaced).
function decodePNG(buf) {
  let off = 8;
  let w = 0;
  let h = 0;
  let channels = 0;
  const idat = [];
  while (off < buf.length) {
    const len = buf.readUInt32BE(off);
    const type = buf.toString('latin1', off + 4, off + 8);
    const data = buf.subarray(off + 8, off + 8 + len);
    if (type === 'IHDR') {
      w = data.readUInt32BE(0);
      h = data.readUInt32BE(4);
      const depth = data[8];
      channels = { 0: 1, 2: 3, 4: 2, 6: 4 }[data[9]];
      if (depth !== 8 || !channels || data[12] !== 0) throw new Error(`PNG layout not handled (depth ${depth}, colour type ${data[9]}, interlace ${data[12]})`);
    } else if (type === 'IDAT') idat.push(data);
    off += 12 + len;
  }
  const raw = inflateSync(Buffer.concat(idat));
  const stride = w * channels;
  const px = Buffer.alloc(h * stride);
  for (let y = 0; y < h; y++) {
    const f = raw[y * (stride + 1)];
    for (let x = 0; x < stride; x++) {
      const v = raw[y * (stride + 1) + 1 + x];
      const a = x >= channels ? px[y * stride + x - channels] : 0;
      const b = y > 0 ? px[(y - 1) * stride + x] : 0;
      const c = x >= channels && y > 0 ? px[(y - 1) * stride + x - channels] : 0;
      let p = 0;
      if (f === 1) p = a;
      else if (f === 2) p = b;
      else if (f === 3) p = (a + b) >> 1;
      else if (f === 4) {
        const pa = Math.abs(b - c);
        const pb = Math.abs(a - c);
        const pc = Math.abs(a + b - 2 * c);
        p = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
      }
      px[y * stride + x] = (v + p) & 0xff;
    }
  }
  return { w, h, channels, px };
}

/** The share of a PNG's pixels that are not (nearly) white. */
function inkShare(file) {
  const { w, h, channels, px } = decodePNG(readFileSync(file));
  let ink = 0;
  for (let i = 0; i < w * h; i++) {
    const o = i * channels;
    const grey = channels >= 3 ? Math.min(px[o], px[o + 1], px[o + 2]) : px[o];
    if (grey < 235) ink++;
  }
  return ink / (w * h);
}

// A customer's report: a customer cannot set objectives, so a report
// without any has no Objectives section for them.
const REPORT_HEADINGS = ['Summary', 'Ping delay', 'Kernel latency', 'Reliability', 'Availability', 'Incidents'];

async function reportScenario(token) {
  const nodes = list(env.NBS_REPORT_NODES ?? env.NBS_CUSTOMER_NODES);
  const hidden = list(env.NBS_REPORT_HIDDEN_NODES ?? env.NBS_CUSTOMER_HIDDEN_NODES);
  const minCharts = Number(env.NBS_REPORT_MIN_CHARTS ?? 1);
  step('a customer opens Reports from the header');
  await login(token, 'customer');
  if (!(await apiExists('/api/v1/report-definitions'))) {
    console.log('  report scenario skipped: this collector has no /api/v1/report-definitions');
    await logout();
    return;
  }
  await page.getByRole('link', { name: 'Reports', exact: true }).click();
  await page.waitForURL((u) => u.pathname === '/reports');

  step("a day's report, run from the keyboard");
  await page.getByLabel('Period', { exact: true }).selectOption('1d');
  await page.getByLabel('Targets', { exact: true }).focus();
  await page.keyboard.press('Enter');
  await page.waitForURL((u) => u.pathname === '/reports' && u.searchParams.get('period') === '1d');
  for (const h of REPORT_HEADINGS) await page.getByRole('heading', { level: 2, name: h, exact: true }).waitFor();
  await page.waitForFunction(() => !document.querySelector('.loading'));
  const charts = await page.locator('figure.report-chart canvas').count();
  check(charts >= minCharts, `the report draws ${charts} charts, want at least ${minCharts}`);
  check((await page.locator('table.report-table').count()) >= 4, 'the report has fewer than 4 tables');
  const text = await page.locator('main').innerText();
  check(/within ±\d+(\.\d+)?% of the exact value/.test(text), 'the page does not state the percentile error bound');
  for (const n of nodes) check(text.includes(n), `the report does not mention ${n}`);
  for (const n of hidden) check(!text.includes(n), `the report mentions another customer's node ${n}`);
  // Staff internals: the agent's own root, collector flags.
  const roots = await page.locator('[data-section=incidents] tbody tr td:nth-child(4)').allInnerTexts();
  check(!roots.includes('agent'), `the report lists incidents of the agent's own root: ${roots}`);
  check(!/--[a-z]+\.[a-z-]+/.test(text), `the report names a collector flag: ${text.match(/--[a-z]+\.[a-z-]+/)?.[0]}`);

  step('the JSON and CSV downloads hold the same scope');
  const jsonHref = await page.getByRole('link', { name: 'JSON', exact: true }).getAttribute('href');
  const csvHref = await page.getByRole('link', { name: 'CSV', exact: true }).getAttribute('href');
  const json = await page.request.get(base + jsonHref);
  check(json.ok(), `GET ${jsonHref}: ${json.status()}`);
  const body = await json.json();
  check(JSON.stringify([...(body.scope?.nodes ?? [])].sort()) === JSON.stringify([...nodes].sort()), `the JSON's scope is ${body.scope?.nodes}, want ${nodes}`);
  const csv = await page.request.get(base + csvHref);
  check(csv.ok() && /text\/csv/.test(csv.headers()['content-type'] ?? ''), `GET ${csvHref}: ${csv.status()} ${csv.headers()['content-type']}`);
  const csvText = await csv.text();
  check(csvText.split('\n')[0].startsWith('section'), `the CSV's header row is "${csvText.split('\n')[0]}"`);
  for (const n of hidden) check(!csvText.includes(n), `the CSV mentions another customer's node ${n}`);
  // Percentile columns in one order in every table (p50, p90, p99, max).
  const rank = { p50: 0, p90: 1, p99: 2, max: 3 };
  for (const header of csvText.split('\n').filter((l) => l.startsWith('section,'))) {
    const qs = header.split(',').map((c) => /^(p50|p90|p99|max)_(ms|us)$/.exec(c)?.[1]).filter(Boolean);
    check(qs.every((q, i) => i === 0 || rank[qs[i - 1]] < rank[q]), `the CSV's percentile columns are out of order: ${header}`);
  }

  step('every figure explains itself: empty is —, the data start to the minute, a root OK of the time it reported');
  await atWidths('report-figures', async (width) => {
    const main = await page.locator('main').innerText();
    check(!/no data\s*[\d.]+\s*%/.test(main), `at ${width} px a figure reads as "no data <share>": ${main.match(/.{0,40}no data\s*[\d.]+\s*%.{0,20}/)?.[0]}`);
    check(!/\(— of —\)|—\/s/.test(main), `at ${width} px an empty figure is shown beside another: ${main.match(/.{0,30}(\(— of —\)|—\/s).{0,10}/)?.[0]}`);
    for (const tile of await page.locator('.report-summary [data-root]').all()) {
      const ok = (await tile.locator('.headline-ok').innerText()).trim();
      check(/^(—|\d+(\.\d+)?%)$/.test(ok), `at ${width} px a root's tile reads "${ok}"`);
      const box = await tile.boundingBox();
      check(box && box.x >= 0 && box.x + box.width <= width + 1, `at ${width} px a root's tile is off-screen: ${JSON.stringify(box)}`);
    }
  });
  const notice = (await page.locator('.report-meta .notice').allInnerTexts()).join(' ');
  const starts = /Data starts at (\d{4}-\d\d-\d\d \d\d:\d\d) UTC/.exec(notice);
  if (body.data_from && starts) {
    const want = new Date(body.data_from).toISOString().slice(0, 16).replace('T', ' ');
    check(starts[1] === want, `the page says data starts at ${starts[1]}, the report's data_from is ${want}`);
    console.log(`  data starts at ${starts[1]} UTC (data_from ${body.data_from})`);
  } else console.log(`  no "data starts at" notice (data_from ${body.data_from})`);

  await setTheme('light');
  await page.waitForTimeout(300); // charts redraw in the theme's colours
  await shot('report');
  if (env.NBS_UPDATE_SCREENSHOTS === '1') {
    const dst = fileURLToPath(new URL('../../docs/screenshots/report.png', import.meta.url));
    copyFileSync(join(artifacts, 'report.png'), dst);
    console.log(`  updated ${dst}`);
  }

  step('the report fits the window at 390 and 1400 px');
  await checkNoOverflow('report', { axe: true });

  step('the report prints to PDF: the summary first, a page per section with data, legends');
  const withData = await page.locator('.report-section:not(.report-section-empty)').count();
  const pdfDir = mkdtempSync(join(tmpdir(), 'nbs-report-pdf-'));
  try {
    const pdf = join(artifacts, 'report.pdf');
    writeFileSync(pdf, await page.pdf({ format: 'A4', printBackground: true }));
    execFileSync(env.NBS_PDFTOPPM ?? 'pdftoppm', ['-png', '-r', '60', pdf, join(pdfDir, 'page')]);
    const pages = readdirSync(pdfDir).filter((f) => f.endsWith('.png')).sort();
    check(pages.length >= 2, `the PDF has ${pages.length} pages; sections should start new pages`);
    // The summary page, then a page per section with data (the summary is
    // one of them); a section's tables may run onto one more page.
    const most = 2 * withData;
    check(pages.length <= most, `the PDF has ${pages.length} pages for ${withData} sections with data, want at most ${most}`);
    for (const [i, f] of pages.entries()) {
      const ink = inkShare(join(pdfDir, f));
      check(ink > 0.005, `the PDF's page ${i + 1} of ${pages.length} is (nearly) empty: ${(ink * 100).toFixed(2)}% ink`);
    }
    const ink = inkShare(join(pdfDir, pages[0]));
    copyFileSync(join(pdfDir, pages[0]), join(artifacts, 'report-pdf-page1.png'));
    const text = (args) => execFileSync(env.NBS_PDFTOTEXT ?? 'pdftotext', [...args, '-layout', pdf, '-'], { encoding: 'utf8' });
    const pdfText = text([]);
    const first = text(['-f', '1', '-l', '1']);
    check(/Summary/.test(first) && /previous period/.test(first), `the PDF's first page is not the summary against the previous period: ${first.slice(0, 400)}`);
    for (const h of REPORT_HEADINGS) check(pdfText.includes(h), `the PDF lacks the heading "${h}"`);
    // Each chart's legend prints: its lines and the baseline.
    const charts = await page.locator('figure.report-chart').count();
    if (charts > 0) for (const l of ['p50', 'p99', 'median of the period']) check(pdfText.includes(l), `the PDF lacks the chart legend "${l}"`);
    for (const n of hidden) check(!pdfText.includes(n), `the PDF mentions another customer's node ${n}`);
    check(!pdfText.includes('Log out'), 'the PDF shows the header (the print stylesheet should hide it)');
    console.log(`  PDF: ${pages.length} pages for ${withData} sections with data, first page ${(ink * 100).toFixed(1)}% ink; ${pdf}`);
  } finally {
    rmSync(pdfDir, { recursive: true, force: true });
  }

  step("an incident opens the node's tree over the incident's window, the breach in sight");
  const incidentRow = page.locator('[data-section=incidents] tbody tr').filter({ has: page.locator('a[href*="from="]') }).first();
  if (env.NBS_REPORT_INCIDENT_NODE) {
    await incidentRow.waitFor();
    const incident = incidentRow.locator('a').first();
    const root = (await incidentRow.locator('td').nth(3).innerText()).trim();
    const href = await incident.getAttribute('href');
    const u = new URL(href, base);
    const [from, to] = [u.searchParams.get('from') ?? '', u.searchParams.get('to') ?? ''];
    check(u.pathname === hrefNode(env.NBS_REPORT_INCIDENT_NODE) && /^\d+$/.test(from) && /^\d+$/.test(to) && Number(from) < Number(to) && u.searchParams.get('metric') && !u.searchParams.has('at'), `incident link ${href}`);
    check(Number(to) <= Date.now() + 1000, `the incident's window ends at ${new Date(Number(to)).toISOString()}, in the future`);
    await incident.click();
    await page.waitForURL((x) => x.pathname === u.pathname && x.searchParams.get('from') === from && x.searchParams.get('to') === to);
    await row(root).waitFor();
    await page.locator('.viewing').waitFor();
    await atWidths('incident-tree', async (width) => {
      const st = await rowState(root);
      check(st === 'CRIT' || st === 'WARN', `at ${width} px the incident's tree shows ${root} ${st}: the breach is not in sight`);
      const bad = await treeLayout();
      check(bad.length === 0, `at ${width} px the tree's rows: ${bad.join('; ')}`);
    });
    console.log(`  followed ${href}: ${root} ${await rowState(root)}`);
  } else console.log('  no NBS_REPORT_INCIDENT_NODE: the incident link is not followed');
  await logout();
}

let failed = false;
try {
  if (scenarios.has('admin')) await adminScenario();
  if (!scenarios.has('operator')) console.log('  operator scenario not asked for');
  else if (env.NBS_OPERATOR_TOKEN) await operatorScenario();
  else console.log('  operator scenario skipped: no NBS_OPERATOR_TOKEN');
  if (!scenarios.has('customer')) console.log('  customer scenario not asked for');
  else if (env.NBS_CUSTOMER_TOKEN) await customerScenario();
  else console.log('  customer scenario skipped: no NBS_CUSTOMER_TOKEN');
  const reportToken = env.NBS_REPORT_TOKEN ?? env.NBS_CUSTOMER_TOKEN;
  if (!scenarios.has('report')) console.log('  report scenario not asked for');
  else if (reportToken) await reportScenario(reportToken);
  else console.log('  report scenario skipped: no NBS_REPORT_TOKEN or NBS_CUSTOMER_TOKEN');

  if (problems.length) throw new Error(`browser reported problems:\n  ${problems.join('\n  ')}`);
  console.log(`  the pages' checks at 1400 and 390 px took ${(atWidthsMs / 1000).toFixed(1)} s`);
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
