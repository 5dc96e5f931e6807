#!/bin/bash
# Clean repeated measurement for issue 42 item 4: hindsight (XLA CPU) against transformers on the
# same token ids, SmolLM2-135M-Instruct, 8 x 256 and 1 x 2,048, one thread each (taskset -c 0,
# -threads 1) and two threads each (no taskset: XLA CPU's pool takes both cores, -threads 2),
# ROUNDS rounds, the configurations alternated within a round (their order reversed every other
# round). Each bench/score run is hindsight's best of 3 then transformers' best of 3 (after a
# warm-up each), by the wall and by CPU seconds; summarize.py takes the rounds' min/median/max.
#
#   go build -o /tmp/score3-main ./bench/score
#   setsid bash -c 'echo -10 > /proc/self/autogroup; bench/score/results/clean-2026-12-05/run.sh /tmp/score3-main DIR 3'
#   /usr/bin/python3 bench/score/results/clean-2026-12-05/summarize.py DIR
set -u
BIN=$1 OUT=$2 ROUNDS=${3:-3}
export GOMLX_NO_AUTO_INSTALL=1 HINDSIGHT_XLA_CPU_PLUGIN=/root/.cache/hindsight/pjrt/xla-cpu/pjrt_c_api_cpu_plugin.so
M=/tmp/decode-models/smollm2-135m-instruct
PY=/tmp/torch2-venv/bin/python
mkdir -p "$OUT"
# CONFIGS (optional): "threads rollouts tokens" entries separated by commas, e.g. CONFIGS="2 8 256,2 1 2048"
IFS=, read -r -a configs <<< "${CONFIGS:-1 8 256,1 1 2048,2 8 256,2 1 2048}"
for round in $(seq 1 "$ROUNDS"); do
  order=("${configs[@]}")
  if (( round % 2 == 0 )); then order=(); for ((i = ${#configs[@]} - 1; i >= 0; i--)); do order+=("${configs[i]}"); done; fi
  for c in "${order[@]}"; do
    set -- $c
    th=$1 n=$2 t=$3
    pin=""; [[ $th == 1 ]] && pin="taskset -c 0"
    name=t${th}-${n}x${t}-r${round}
    lb=$(cut -d' ' -f1-3 /proc/loadavg)
    echo "== $name $(date -u +%H:%M:%S) load $lb"
    $pin "$BIN" -model $M -backend xla-cpu -rollouts $n -tokens $t -python $PY -peer transformers \
      -threads $th -json "$OUT/$name.json" 2>&1 | grep -E '^go |^pytorch|^go/pytorch'
    la=$(cut -d' ' -f1-3 /proc/loadavg)
    echo "   load after: $la"
    sed -i "1s/^{/{\"load_before\": \"$lb\", \"load_after\": \"$la\",/" "$OUT/$name.json"
  done
done
