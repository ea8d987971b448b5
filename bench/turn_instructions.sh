#!/usr/bin/env bash
# Instructions a turn costs the server, noise-free (docs/benchmarks.md): for each BINARY and kind,
# (a 140-turn run - a 40-turn run) / 100 under callgrind. STORE=postgres (the default): each run
# on a fresh schema of one PostgreSQL of its own (scripts/test-services.sh); STORE=sqlite: each
# in a data directory of its own. Needs valgrind and a built agent_turns (AGENT_TURNS, default
# build/bench/agent_turns).
#
#   [STORE=sqlite] bench/turn_instructions.sh BINARY...
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
agent_turns=${AGENT_TURNS:-$root/build/bench/agent_turns}
store=${STORE:-postgres}
dir=$(mktemp -d) out=$(mktemp -d)
trap '"$root/scripts/test-services.sh" stop postgres "$dir" 2>/dev/null || true; rm -rf "$dir" "$out"' EXIT
if [ "$store" = postgres ]; then
  "$root/scripts/test-services.sh" start postgres "$dir" 2>/dev/null
  url=$(cat "$dir/postgres.url")
fi
run=0
for kind in read client; do
  for bin in "$@"; do
    declare -A total
    for turns in 40 140; do
      run=$((run + 1))
      env=()
      if [ "$store" = postgres ]; then
        psql -q "$url" -c "CREATE SCHEMA s$run"
        env=(--server-env "SWITCHBOARD_DATABASE_URL=$url?options=-csearch_path%3Ds$run")
      fi
      rm -f "$out"/cg.*
      "$agent_turns" --server "$(realpath "$bin")" --scenarios latency --kinds "$kind" \
        --warmup-turns 0 --turns "$turns" --op-timeout 60000 \
        --server-prefix "valgrind --tool=callgrind --callgrind-out-file=$out/cg.%p" \
        "${env[@]}" >/dev/null
      total[$turns]=$(cat "$out"/cg.* | awk '/^totals:/ { s += $2 } END { print s }')
    done
    echo "$store $kind $bin: $(((total[140] - total[40]) / 100)) instructions per turn"
  done
done
