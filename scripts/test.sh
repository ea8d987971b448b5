#!/usr/bin/env bash
# Sets up the machine, builds everything with AddressSanitizer + UndefinedBehaviorSanitizer and
# runs every test (unit tests and black-box tests against the real server binary). Ends with
# ctest's summary line.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# Black-box tests open many sockets; the soft limit is often 1024.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
# The fuzz targets too (a nested clang build, run for SWITCHBOARD_FUZZ_SECONDS each): a plain
# asan build leaves them out.
cmake --preset asan -DSWITCHBOARD_FUZZ_TARGETS=ON >/dev/null
cmake --build --preset asan
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
ctest --preset asan --parallel 2
