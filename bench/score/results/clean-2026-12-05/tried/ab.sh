#!/bin/bash
# A/B: main vs experimental switches, hindsight alone, one CPU (taskset -c 0), 8 x 256, SmolLM2, XLA CPU.
echo -10 > /proc/self/autogroup
export GOMLX_NO_AUTO_INSTALL=1 HINDSIGHT_XLA_CPU_PLUGIN=/root/.cache/hindsight/pjrt/xla-cpu/pjrt_c_api_cpu_plugin.so
M=/tmp/decode-models/smollm2-135m-instruct
ROUNDS=${ROUNDS:-3}
for r in $(seq 1 $ROUNDS); do
  for v in "$@"; do
    bin=${v%%:*} envs=${v#*:}
    echo "$(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg) | $v r$r: $(env $envs taskset -c 0 $bin -model $M -backend xla-cpu -rollouts ${N:-8} -tokens ${T:-256} -python "" 2>&1 | grep '^go (' | sed 's/.*plugin.so[^:]*://')"
  done
done
