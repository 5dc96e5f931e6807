#!/bin/bash
# 2 threads (no taskset): default flags vs the concurrency-optimised scheduler on; hindsight alone, 8 x 256.
echo -10 > /proc/self/autogroup
export GOMLX_NO_AUTO_INSTALL=1 HINDSIGHT_XLA_CPU_PLUGIN=/root/.cache/hindsight/pjrt/xla-cpu/pjrt_c_api_cpu_plugin.so
M=/tmp/decode-models/smollm2-135m-instruct
for r in 1 2 3; do
  for f in "" "--xla_cpu_experimental_ynn_fusion_type=individual_dot --xla_cpu_enable_concurrency_optimized_scheduler=true"; do
    echo "$(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg) | XLA_FLAGS='$f' r$r: $(XLA_FLAGS="$f" /tmp/score3-main -model $M -backend xla-cpu -rollouts 8 -tokens 256 -python "" 2>&1 | grep '^go (' | sed 's/.*plugin.so[^:]*://')"
  done
done
