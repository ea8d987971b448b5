#!/usr/bin/env bash
# Installs the TypeScript SDK's pinned dev dependencies (`npm ci` in sdk/js) when node_modules is
# missing or package-lock.json changed since the last install; otherwise does nothing.
set -euo pipefail
cd "$(dirname "$0")/../sdk/js"
stamp=node_modules/.package-lock.sha256
want="$(sha256sum package-lock.json | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "sdk/js: npm ci"
  npm ci --no-audit --no-fund --loglevel=error
  echo "$want" >"$stamp"
fi
