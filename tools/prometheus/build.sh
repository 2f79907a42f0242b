#!/usr/bin/env bash
# build.sh — build Prometheus 3 (the OTLP receiver and remote write 2.0 the
# export tests push to) from its Go module pinned in this directory's go.mod,
# once per version, into a cache outside the repository; print the binary's
# path. Debian's prometheus is 2.x, which has neither.
#
# The cache is keyed by this module's go.sum, so bumping the version builds
# anew and every worktree and CI run on the machine share one binary.
# Service discovery is left out (-tags remove_all_sd): the tests push to
# Prometheus and scrape nothing, and it halves the build.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
GO="${GO:-go}"
key="$(cat "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-16)"
version="$(awk '$1 == "github.com/prometheus/prometheus" { print $2 }' "$here/go.mod")"
dir="${NBS_TOOLS_CACHE:-${XDG_CACHE_HOME:-${HOME:-/var/tmp}/.cache}/nbs-tools}/prometheus-$version-$key"
bin="$dir/prometheus"
if [ ! -x "$bin" ]; then
  echo "prometheus: building $version from its Go module into $dir (one-time, minutes)" >&2
  mkdir -p "$dir"
  # -C: the module here, never the repository's root go.mod.
  "$GO" build -C "$here" -trimpath -tags remove_all_sd -o "$bin.tmp" github.com/prometheus/prometheus/cmd/prometheus
  mv "$bin.tmp" "$bin"
fi
echo "$bin"
