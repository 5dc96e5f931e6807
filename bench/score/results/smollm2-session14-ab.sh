#!/bin/bash
# bench/score/results/smollm2-session14-ab.log: main before session 14 (/tmp/score2-base, 6c81620) and the
# head in 128-position pieces (/tmp/score2-new), alternated; one CPU each side (taskset -c 0), the new one
# with the transformers peer (-threads 1). SmolLM2-135M-Instruct, XLA CPU, tokens per CPU-second.
# Run in its own session (setsid) so that its autogroup is its own.
echo -10 > /proc/self/autogroup
export GOMLX_NO_AUTO_INSTALL=1 HINDSIGHT_XLA_CPU_PLUGIN=/root/.cache/hindsight/pjrt/xla-cpu/pjrt_c_api_cpu_plugin.so
M=/tmp/decode-models/smollm2-135m-instruct
R=$(dirname "$0")
PY=/tmp/torch2-venv/bin/python
for rep in 1 2; do
  for shape in "8 256" "1 2048"; do
    set -- $shape
    echo "$(uptime | sed 's/.*load/load/') | main ${1}x${2}: $(taskset -c 0 /tmp/score2-base -model $M -backend xla-cpu -rollouts $1 -tokens $2 -python "" -json $R/smollm2-session14-main-${1}x${2}-$rep.json 2>&1 | grep 'go (' | sed 's/.*plugin.so[^:]*://')"
    echo "$(uptime | sed 's/.*load/load/') | new  ${1}x${2}:"
    taskset -c 0 /tmp/score2-new -model $M -backend xla-cpu -rollouts $1 -tokens $2 -python $PY -peer transformers -threads 1 -json $R/smollm2-session14-new-${1}x${2}-$rep.json 2>&1 | grep -E '^go |^pytorch|^go/pytorch'
  done
done
uptime
