// The Chromium every browser script of web/e2e runs: headless, in a fresh
// profile, one viewport, UTC and en-GB so dates and numbers read the same
// on every machine.
import { mkdtempSync } from 'node:fs';
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
