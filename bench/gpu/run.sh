#!/usr/bin/env bash
# The GPU run and its CPU rehearsal: every stage of hindsight-bench-gpu (peak,
# parity, speed, generate, long, memory), each under its own time budget, writing
# OUTDIR/results.json and OUTDIR/bench.log as it goes.
#
#   bench/gpu/run.sh OUTDIR [bench flags]        # on the GPU machine (~6 min)
#   bench/gpu/run.sh --cpu OUTDIR [bench flags]  # rehearsal on XLA CPU, tiny sizes
#
# GPU: the binary is bench/gpu/bin/hindsight-bench-gpu (bench/gpu/build.sh, from the
# program in bench/gpu; the GPU machine has no Go), the backend JAX's CUDA PJRT
# plugin, the peer python3's torch on cuda.
# CPU: builds the binary if Go is here, takes the XLA CPU plugin from
# $HINDSIGHT_XLA_CPU_PLUGIN or `go run ./cmd/hindsight fetch-xla-cpu`, and runs the
# peer with $HINDSIGHT_BENCH_PYTHON (default /usr/bin/python3, Debian's python3-torch)
# when it imports torch, else records the PyTorch measurements as skipped.
set -uo pipefail
cd "$(dirname "$0")/../.."
cpu=0
if [ "${1:-}" = --cpu ]; then cpu=1; shift; fi
out=${1:?usage: bench/gpu/run.sh [--cpu] OUTDIR [bench flags]}
shift
mkdir -p "$out"
export GOMLX_NO_AUTO_INSTALL=1
bin=${HINDSIGHT_BENCH_BIN:-bench/gpu/bin/hindsight-bench-gpu}
if command -v go >/dev/null 2>&1 && [ -z "${HINDSIGHT_BENCH_BIN:-}" ]; then
  bench/gpu/build.sh || exit 1
fi
if [ ! -x "$bin" ]; then
  echo "run.sh: no $bin: build it with bench/gpu/build.sh where Go is, and carry bench/gpu/bin" >&2
  exit 1
fi

if [ $cpu = 1 ]; then
  plugin=${HINDSIGHT_XLA_CPU_PLUGIN:-$(go run ./cmd/hindsight fetch-xla-cpu)} || {
    echo "run.sh: no XLA CPU plugin (set HINDSIGHT_XLA_CPU_PLUGIN, or run where Go is)" >&2; exit 1; }
  py=${HINDSIGHT_BENCH_PYTHON:-/usr/bin/python3}
  if ! "$py" -c 'import torch, numpy' 2>/dev/null; then
    echo "run.sh: $py has no torch: the PyTorch measurements are skipped (recorded in results.json)" >&2
    py=""
  fi
  exec "$bin" -cpu -out "$out" -backend "xla:$plugin" -python "$py" -peer bench/gpu/torch_peer.py "$@"
fi

dir=$(python3 -c 'import jax_plugins.xla_cuda13 as p, os; print(os.path.dirname(p.__file__))') || {
  echo "run.sh: python3 has no jax_plugins.xla_cuda13 (JAX's CUDA PJRT plugin)" >&2; exit 1; }
plugin="$dir/xla_cuda_plugin.so"
{ nvidia-smi; python3 -c 'import torch, jax; print("torch", torch.__version__, "cuda", torch.version.cuda); print("jax", jax.__version__)'; ls -l "$plugin"; } >"$out/env.txt" 2>&1
# The plugin's own directory on the library path too, for libraries it loads from beside it.
export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exec "$bin" -out "$out" -backend "xla:$plugin" -client-options preallocate=false \
  -python python3 -peer bench/gpu/torch_peer.py -model-dir "${TMPDIR:-/tmp}/hindsight-bench-models" "$@"
