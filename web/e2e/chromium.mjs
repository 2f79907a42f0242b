// The Chromium every browser script of web/e2e runs: headless, in a fresh
// profile, one viewport, UTC and en-GB so dates and numbers read the same
// on every machine.
import { mkdtempSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

export function launchChromium(env) {
  return chromium.launchPersistentContext(mkdtempSync(join(tmpdir(), 'nbs-chromium-')), {
    executablePath: env.NBS_CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: { width: 1400, height: 900 },
    timezoneId: 'UTC',
    locale: 'en-GB',
  });
}

// screenshotter returns shot(name): a screenshot of the page as it is into
// artifacts, then axe-core (from web/node_modules, no network) on it; its
// serious and critical findings go into problems, so they fail the run.
export function screenshotter(page, artifacts, problems) {
  const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
  return async (name) => {
    await page.screenshot({ path: join(artifacts, `${name}.png`) });
    if (!(await page.evaluate(() => typeof window.axe === 'object'))) await page.evaluate(axeSource);
    const bad = await page.evaluate(async () =>
      (await window.axe.run(document, { resultTypes: ['violations'] })).violations
        .filter((v) => v.impact === 'serious' || v.impact === 'critical')
        .map((v) => `${v.impact} ${v.id}: ${v.help} at ${v.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(', ')}`),
    );
    console.log(`  screenshot ${join(artifacts, `${name}.png`)}; axe: ${bad.length} serious or critical`);
    problems.push(...bad.map((b) => `axe on ${name}: ${b}`));
  };
}
