#!/bin/bash
# bench/products/results/smollm2-session14.log: SmolLM2-135M's scoring products alone, one CPU (taskset -c 0),
# XLA CPU's GEMM libraries (YNNPACK, hindsight's default; oneDNN; XNNPACK) against PyTorch 2.15 (MKL).
# Run in its own session (setsid) so that its autogroup is its own.
echo -10 > /proc/self/autogroup
export GOMLX_NO_AUTO_INSTALL=1 HINDSIGHT_XLA_CPU_PLUGIN=/root/.cache/hindsight/pjrt/xla-cpu/pjrt_c_api_cpu_plugin.so
R=$(dirname "$0")
go build -o /tmp/bench-products ./bench/products
uptime
taskset -c 0 /tmp/bench-products -backend xla-cpu -python /tmp/torch2-venv/bin/python -threads 1 -json $R/smollm2-session14-ynnpack.json 2>&1 | grep -v "^[IW]0"
XLA_FLAGS="--xla_cpu_experimental_ynn_fusion_type= --xla_cpu_use_onednn=true --xla_cpu_experimental_onednn_fusion_type=individual_dot" \
  taskset -c 0 /tmp/bench-products -backend xla-cpu -json $R/smollm2-session14-onednn.json 2>&1 | grep -v "^[IW]0"
XLA_FLAGS="--xla_cpu_experimental_ynn_fusion_type= --xla_cpu_experimental_xnn_fusion_type=individual_dot" \
  taskset -c 0 /tmp/bench-products -backend xla-cpu -json $R/smollm2-session14-xnnpack.json 2>&1 | grep -v "^[IW]0"
uptime
