#!/usr/bin/env bash
# Usage: npm-deps.sh DIR — installs DIR's pinned npm packages (`npm ci`) when node_modules is
# missing or package-lock.json changed since the last install; otherwise does nothing. Used for
# sdk/js and web/ by scripts/setup.sh, CTest and the web build. Never downloads a browser:
# the browser tests use Debian's chromium.
set -euo pipefail
cd "$(dirname "$0")/../$1"
stamp=node_modules/.package-lock.sha256
want="$(sha256sum package-lock.json | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "$1: npm ci"
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error
  echo "$want" >"$stamp"
fi
touch "$stamp"  # the web build's dependency on the install is this file's time
