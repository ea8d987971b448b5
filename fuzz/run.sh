#!/usr/bin/env bash
# Runs one libFuzzer target for a while over its seed corpus (read only) and a scratch corpus in
# the build tree (where new inputs go), saving any crashing input in the build tree.
# A dictionary fuzz/NAME.dict beside the seed directory fuzz/corpus/NAME is used when present.
# Usage: fuzz/run.sh BINARY SEED_DIR WORK_DIR SECONDS
set -euo pipefail
bin=$1 seeds=$2 work=$3 seconds=$4
mkdir -p "$work/corpus" "$work/artifacts"
dict=()
name=$(basename "$seeds")
[ -f "$seeds/../../$name.dict" ] && dict=(-dict="$seeds/../../$name.dict")
# A fixed seed (FUZZ_SEED, default 1) makes a test run repeat the same inputs, so a failure in CI
# can be reproduced; longer runs by hand vary it.
exec "$bin" -seed="${FUZZ_SEED:-1}" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -max_len=8192 \
  -print_final_stats=1 "${dict[@]}" -artifact_prefix="$work/artifacts/" "$work/corpus" "$seeds"
