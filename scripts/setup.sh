#!/usr/bin/env bash
# Installs what building and testing Switchboard needs on Debian 12, as root. Skips packages
# that are already installed, so a second run takes a second.
set -euo pipefail

packages=(
  g++ cmake ninja-build pkg-config ccache git
  libboost1.81-dev libboost-json1.81-dev libboost-url1.81-dev
  libvalijson-dev libsqlite3-dev libssl-dev libgtest-dev libgmock-dev libxml2-dev
  libre2-dev  # tool schemas' regular expressions
  libmimalloc-dev  # the server's allocator (not in sanitizer builds)
  ripgrep procps
  tmux  # OpenCode's TUI in a pseudo-terminal (tests/opencode/tui.test.mjs)
  chromium  # the web page's end-to-end tests (web/e2e)
  clang-14 libclang-rt-14-dev  # libFuzzer targets (fuzz/, docs/fuzzing.md)
  libpq-dev  # the PostgreSQL store's client library
  postgresql-15  # throwaway servers for the PostgreSQL tests (scripts/test-services.sh)
  libhiredis-dev  # the cluster's Redis codec (src/cluster/redis.cpp)
  redis-server  # throwaway servers for the cluster's Redis tests (scripts/test-services.sh)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# Node.js 20+ and npm build and test the TypeScript SDK and the web page. The machine image
# normally has them; Debian's own packages are the fallback when `node` is missing.
command -v node >/dev/null 2>&1 || missing+=(nodejs npm)

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  # The tests run their own throwaway PostgreSQL servers (scripts/test-services.sh) and never use
  # the cluster "15/main" that installing postgresql-15 creates and starts on port 5432. On a
  # first install, tell the package not to create it: that saves the install an initdb, and
  # leaves no idle server on 5432. createcluster.conf itself is managed by ucf (writing it before
  # the package would make ucf ask about it); the include dir it reads is ours to add to. Not
  # done when PostgreSQL is already installed, to leave a developer's own setup alone.
  if [[ " ${missing[*]} " == *" postgresql-15 "* ]] &&
      ! dpkg-query -W -f='${Status}' postgresql-common 2>/dev/null | grep -q "install ok installed"; then
    "${sudo_cmd[@]}" mkdir -p /etc/postgresql-common/createcluster.d
    echo "create_main_cluster = false  # written by switchboard's scripts/setup.sh" |
      "${sudo_cmd[@]}" tee /etc/postgresql-common/createcluster.d/switchboard.conf >/dev/null
  fi
  # Likewise the redis-server package starts a system Redis on port 6379, which the tests never
  # use: a policy-rc.d that refuses every service start keeps the install from starting it.
  # Only when none is there already (a container's own stays), and removed afterwards, even when
  # the install fails.
  policy=/usr/sbin/policy-rc.d policy_written=""
  if [[ " ${missing[*]} " == *" redis-server "* ]] && [ ! -e "$policy" ]; then
    policy_written=1
    trap '"${sudo_cmd[@]}" rm -f "$policy"' EXIT
    printf '#!/bin/sh\n# written by switchboard scripts/setup.sh, removed after the install\nexit 101\n' |
      "${sudo_cmd[@]}" tee "$policy" >/dev/null
    "${sudo_cmd[@]}" chmod 755 "$policy"
  fi
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
  if [ -n "$policy_written" ]; then
    "${sudo_cmd[@]}" rm -f "$policy"
    trap - EXIT
  fi
fi

# The web page (web/, built into the server) needs Node.js 20.19+ for Vite 7; Debian 12's own
# nodejs is 18, so a newer Node.js that is already there is what builds it.
node_version="$(node --version | sed 's/^v//')"
if [ "$(printf '%s\n20.19\n' "$node_version" | sort -V | head -1)" != "20.19" ]; then
  echo "setup: Node.js $node_version is older than 20.19, which the web page's build (Vite 7) needs;" >&2
  echo "setup: install a newer Node.js, or configure with -DSWITCHBOARD_WEB=OFF" >&2
fi
"$(dirname "$0")/npm-deps.sh" sdk/js
"$(dirname "$0")/npm-deps.sh" web
"$(dirname "$0")/npm-deps.sh" tests/mcp  # MCP servers the MCP client tests run (tests/mcp/README.md)
