#!/usr/bin/env bash
# Installs what building and testing Switchboard needs on Debian 12, as root. Skips packages
# that are already installed, so a second run takes a second.
set -euo pipefail

packages=(
  g++ cmake ninja-build pkg-config ccache git
  libboost1.81-dev libboost-json1.81-dev libboost-url1.81-dev
  libvalijson-dev libsqlite3-dev libssl-dev libgtest-dev libgmock-dev libxml2-dev
  ripgrep procps
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The TypeScript SDK (sdk/js) is built and tested with Node.js 20+ and npm. The machine image
# normally has them; Debian's own packages are the fallback when `node` is missing.
if ! command -v node >/dev/null 2>&1; then
  echo "setup: installing nodejs npm"
  export DEBIAN_FRONTEND=noninteractive
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends nodejs npm
fi
"$(dirname "$0")/sdk-js-deps.sh"
