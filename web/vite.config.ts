// Builds the page that `switchboard serve` embeds (cmake/web.cmake runs `npm run build`).
// `npm run dev` serves it with hot reload and forwards the API to a running switchboard
// (SWITCHBOARD_URL, default http://127.0.0.1:4096).
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

const target = process.env.SWITCHBOARD_URL ?? 'http://127.0.0.1:4096';
const api = ['/session', '/event', '/client-tools', '/permission', '/question', '/provider', '/config', '/tool', '/health'];

export default defineConfig({
  esbuild: { jsx: 'automatic', jsxImportSource: 'preact' },
  resolve: {
    // The TypeScript SDK of this repository, from source: one build, no publishing step.
    alias: { '@switchboard/sdk': fileURLToPath(new URL('../sdk/js/src/index.ts', import.meta.url)) },
  },
  build: {
    target: 'es2022',
    assetsDir: 'assets',
    modulePreload: { polyfill: false },
    reportCompressedSize: false,
  },
  server: {
    proxy: Object.fromEntries(api.map((path) => [path, { target, ws: path === '/client-tools' }])),
  },
});
