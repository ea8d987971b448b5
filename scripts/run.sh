#!/usr/bin/env bash
# Sets up the machine, builds the release binary and runs `switchboard serve` (arguments are
# passed on, e.g. --port 4096 --hostname 127.0.0.1 --config my.json).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cmake --preset release -DSWITCHBOARD_TESTS=OFF -DSWITCHBOARD_BENCH=OFF >/dev/null
cmake --build --preset release --target switchboard
exec ./build/release/switchboard serve "$@"
