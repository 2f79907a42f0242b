#!/usr/bin/env bash
# ensure.sh GROUP... — make sure the Debian packages that tools/deps/packages.txt
# lists for any of GROUP (run, test, generate, or all) are installed.
#
# As root with apt-get it installs what is missing (one `apt-get update` first);
# otherwise it stops at once and prints the exact command to run. Nothing is
# installed when everything is already there, so it is cheap to call every time.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
list="$here/packages.txt"

if [ $# -eq 0 ]; then
  echo "usage: $0 run|test|generate|all ..." >&2
  exit 2
fi

wanted=()
while read -r pkg groups; do
  case "$pkg" in ''|'#'*) continue ;; esac
  for g in "$@"; do
    if [ "$g" = all ] || [[ " $groups " == *" $g "* ]]; then
      wanted+=("$pkg")
      break
    fi
  done
done < <(awk '!/^[[:space:]]*(#|$)/ { printf "%s", $1; for (i = 2; i <= NF && $i ~ /^(run|test|generate)$/; i++) printf " %s", $i; print "" }' "$list")

installed() {
  [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = installed ]
}

missing=()
if command -v dpkg-query >/dev/null 2>&1; then
  for p in "${wanted[@]}"; do installed "$p" || missing+=("$p"); done
else
  echo "deps: dpkg-query not found: this is not a Debian-like machine; install the equivalents of: ${wanted[*]}" >&2
  exit 1
fi
[ ${#missing[@]} -eq 0 ] && exit 0

cmd="apt-get update && apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "deps: missing Debian packages: ${missing[*]}" >&2
  echo "deps: install them, then run make again:" >&2
  echo "      sudo sh -c '$cmd'" >&2
  exit 1
fi

echo "deps: installing ${missing[*]} (apt-get; one-time)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
for p in "${missing[@]}"; do
  if ! installed "$p"; then
    echo "deps: $p is still not installed after apt-get; run: $cmd" >&2
    exit 1
  fi
done
echo "deps: installed ${missing[*]}" >&2
