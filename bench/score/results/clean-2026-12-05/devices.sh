#!/bin/bash
# Two threads each, 8 x 256: hindsight on one device (-devices 1, as run.sh) and on two virtual
# devices of xla-cpu,devices=2 at once (-devices 2: 4 rollouts each, as train.devices: 2 scores),
# each run with the transformers peer at 2 threads on the same token ids; alternated ROUNDS rounds.
#
#   go build -o /tmp/score3-dev ./bench/score
#   setsid bash -c 'echo -10 > /proc/self/autogroup; bench/score/results/clean-2026-12-05/devices.sh /tmp/score3-dev DIR 3'
#   /usr/bin/python3 bench/score/results/clean-2026-12-05/summarize.py DIR   # t2-… rows; d2 in the file names
set -u
BIN=$1 OUT=$2 ROUNDS=${3:-3}
export GOMLX_NO_AUTO_INSTALL=1 HINDSIGHT_XLA_CPU_PLUGIN=/root/.cache/hindsight/pjrt/xla-cpu/pjrt_c_api_cpu_plugin.so
M=/tmp/decode-models/smollm2-135m-instruct
PY=/tmp/torch2-venv/bin/python
mkdir -p "$OUT"/d1 "$OUT"/d2
for round in $(seq 1 "$ROUNDS"); do
  order="1 2"; (( round % 2 == 0 )) && order="2 1"
  for d in $order; do
    name=d$d/t2-8x256-r$round
    lb=$(cut -d' ' -f1-3 /proc/loadavg)
    echo "== $name $(date -u +%H:%M:%S) load $lb"
    "$BIN" -model $M -backend xla-cpu -devices $d -rollouts 8 -tokens 256 -python $PY -peer transformers \
      -threads 2 -json "$OUT/$name.json" 2>&1 | grep -E '^go |^pytorch|^go/pytorch'
    la=$(cut -d' ' -f1-3 /proc/loadavg)
    echo "   load after: $la"
    sed -i "1s/^{/{\"load_before\": \"$lb\", \"load_after\": \"$la\",/" "$OUT/$name.json"
  done
done
