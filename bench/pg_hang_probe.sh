#!/usr/bin/env bash
# What a server does while its PostgreSQL hangs (docs/benchmarks.md, "A PostgreSQL that hangs"):
# starts a PostgreSQL of its own (scripts/test-services.sh) and BINARY on it, freezes PostgreSQL
# (SIGSTOP: its kernel still accepts and acknowledges, nothing answers), times requests that
# need the store and one that does not, thaws it and checks that the server is back.
#
#   bench/pg_hang_probe.sh BINARY [PORT]
set -euo pipefail
bin=$(realpath "$1") port=${2:-4777}
services="$(cd "$(dirname "$0")/.." && pwd)/scripts/test-services.sh"
dir=$(mktemp -d)
cleanup() {
  pkill -f "serve --port $port" 2>/dev/null || true
  "$services" stop postgres "$dir" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
"$services" start postgres "$dir" 2>/dev/null
url=$(cat "$dir/postgres.url")
mkdir -p "$dir/data" "$dir/project"
(cd "$dir/project" && SWITCHBOARD_DATABASE_URL=$url "$bin" serve --port "$port" \
  --data-dir "$dir/data" >"$dir/server.log" 2>&1 &)
for _ in $(seq 100); do curl -s -o /dev/null "localhost:$port/health" && break; sleep 0.1; done
get() { curl -s -m 40 -o /dev/null -w "$1: %{http_code} after %{time_total} s\n" "localhost:$port$2"; }
curl -s -o /dev/null -X POST "localhost:$port/session" -H 'content-type: application/json' -d '{}'
"$services" freeze postgres "$dir" 2>/dev/null
# The first request that needs the store waits for the hung server; /config is asked meanwhile.
get "frozen, first GET /session" /session &
sleep 0.5
get "frozen, GET /config while the first GET /session waits" /config
wait
for _ in 1 2 3; do
  get "frozen, GET /session" /session
  get "frozen, GET /config" /config
done
"$services" thaw postgres "$dir" 2>/dev/null
for _ in $(seq 300); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "localhost:$port/health")" = 200 ] && break
  sleep 0.1
done
get "thawed, GET /session" /session
