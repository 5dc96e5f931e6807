#!/usr/bin/env bash
# Builds the one binary the GPU run carries (bench/gpu/bin/hindsight-bench-gpu, the
# program in bench/gpu: stripped (no -trimpath, so that it reuses the test builds'
# compile cache),
# linux/amd64, cgo for the PJRT loader) and checks that it and the scripts fit the
# device's carry limit for built files (45 MB).
#
#   bench/gpu/build.sh        # then carry bench/gpu/bin to the GPU machine
set -euo pipefail
cd "$(dirname "$0")/../.."
export GOMLX_NO_AUTO_INSTALL=1
mkdir -p bench/gpu/bin
GOOS=linux GOARCH=amd64 go build -ldflags='-s -w' -o bench/gpu/bin/hindsight-bench-gpu ./bench/gpu
limit=$((45 * 1000 * 1000))
size=$(du -cb bench/gpu/bin/hindsight-bench-gpu bench/gpu/*.sh bench/gpu/*.py | tail -1 | cut -f1)
echo "bench/gpu: binary + scripts = $size bytes (limit $limit)"
if [ "$size" -gt "$limit" ]; then
  echo "bench/gpu: over the carry limit" >&2
  exit 1
fi
