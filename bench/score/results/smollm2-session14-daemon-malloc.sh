#!/bin/bash
# bench/score/results/smollm2-session14-daemon-malloc.log: main and the head in pieces (as smollm2-session14-ab.sh)
# under the malloc thresholds a training process sets (xla.MallocThreshold, 128 KiB: every block above it mapped
# afresh), as the daemon scores; hindsight alone, one CPU, 8 x 256, alternated. Run under setsid.
echo -10 > /proc/self/autogroup
export GOMLX_NO_AUTO_INSTALL=1 HINDSIGHT_XLA_CPU_PLUGIN=/root/.cache/hindsight/pjrt/xla-cpu/pjrt_c_api_cpu_plugin.so
export MALLOC_MMAP_THRESHOLD_=131072 MALLOC_TRIM_THRESHOLD_=131072
M=/tmp/decode-models/smollm2-135m-instruct
for rep in 1 2; do
  for b in base new; do
    echo "$(uptime | sed 's/.*load/load/') | $b: $(taskset -c 0 /tmp/score2-$b -model $M -backend xla-cpu -rollouts 8 -tokens 256 -python "" 2>&1 | grep 'go (' | sed 's/.*plugin.so[^:]*://')"
  done
done
