import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Plugin } from 'vite';
import { defineConfig } from 'vitest/config';

// dist/.keep is committed so that `go build` (which embeds dist/) works
// before the UI is built; Vite empties dist/, so put it back.
const keepDist = (): Plugin => ({
  name: 'nbs-keep-dist',
  apply: 'build',
  closeBundle() {
    writeFileSync(fileURLToPath(new URL('./dist/.keep', import.meta.url)), '');
  },
});

// `npm run dev` proxies the API to a running collector (make run serves
// it on 127.0.0.1:7700; NBS_API points elsewhere).
const api = process.env.NBS_API ?? 'http://127.0.0.1:7700';

export default defineConfig({
  base: '/',
  plugins: [keepDist()],
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    target: 'es2022',
    sourcemap: false,
    chunkSizeWarningLimit: 300,
  },
  server: {
    proxy: { '/api': api, '/healthz': api, '/readyz': api },
  },
  test: {
    environment: 'happy-dom',
    include: ['src/**/*.test.{ts,tsx}'],
    // make test runs these beside the Go tests on two cores: a test that
    // takes 1 s alone can take 5 s there, which is not a failure.
    testTimeout: 30_000,
  },
});
