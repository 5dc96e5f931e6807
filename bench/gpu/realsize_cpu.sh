#!/usr/bin/env bash
# Real size on CPU (issue 18 item 5): a Qwen3-0.6B-shaped model (random weights,
# f32, 2.4 GB) scores one 3,233-token rollout on XLA CPU, and PyTorch eager scores
# the same tokens on the same weights and cores. One process at a time, each under
# /usr/bin/time -v (peak RSS), `uptime` noted before each:
#
#   bench/gpu/realsize_cpu.sh OUTDIR [BASE_REV]
#
# 1. BASE_REV (optional; a commit that has the bench-gpu profile stage): that
#    revision's GPU run program (bench/gpu, or `hindsight bench-gpu` before it stood
#    apart), built from `git archive`, as the "before";
# 2. this working tree's, the "after";
# 3. bench/gpu/torch_peer.py score under $HINDSIGHT_BENCH_PYTHON (default
#    /usr/bin/python3) with 2 threads and, when $HINDSIGHT_OPENBLAS names a
#    directory holding OpenBLAS's libblas.so.3, that BLAS (Debian's torch otherwise
#    uses the reference BLAS, ~2 GFLOP/s: half an hour at this size).
#
# Each hindsight run is `hindsight-bench-gpu -cpu -stages profile -pprof` (load, a cold pass
# with its compiles, a warm pass; compile/execute/copy breakdown; OUT/<name>/
# profile-cpu.pprof, profile-heap.pprof). OUTDIR/summary.md is the table
# (bench/gpu/realsize_summary.py). The model is written once to
# $HINDSIGHT_REALSIZE_MODELS (default /tmp/hindsight-realsize-models).
# Env: REALSIZE_T (3233), REALSIZE_PRESET (qwen3-0.6b), REALSIZE_REPS (1 warm pass),
# REALSIZE_BACKEND (xla-cpu: the fetched plugin with shared buffers, as users run it;
# xla:<abs path> runs it without, as a GPU plugin has none).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: bench/gpu/realsize_cpu.sh OUTDIR [BASE_REV]}
base=${2:-}
T=${REALSIZE_T:-3233}
preset=${REALSIZE_PRESET:-qwen3-0.6b}
reps=${REALSIZE_REPS:-1}
models=${HINDSIGHT_REALSIZE_MODELS:-/tmp/hindsight-realsize-models}
py=${HINDSIGHT_BENCH_PYTHON:-/usr/bin/python3}
export GOMLX_NO_AUTO_INSTALL=1
mkdir -p "$out/bin" "$models"
out=$(cd "$out" && pwd)

# benchbuild SRC NAME builds the GPU run's program of the source tree SRC as
# $out/bin/bench-NAME and writes how to call it to $out/bin/bench-NAME.cmd: the
# program in bench/gpu, or, in a revision from before it stood apart, `hindsight
# bench-gpu`.
benchbuild() {
  if [ -f "$1/bench/gpu/main.go" ]; then
    (cd "$1" && go build -o "$out/bin/bench-$2" ./bench/gpu)
    echo "$out/bin/bench-$2" >"$out/bin/bench-$2.cmd"
  else
    (cd "$1" && go build -o "$out/bin/bench-$2" ./cmd/hindsight)
    echo "$out/bin/bench-$2 bench-gpu" >"$out/bin/bench-$2.cmd"
  fi
}
go build -o "$out/bin/hindsight" ./cmd/hindsight
[ -n "${HINDSIGHT_XLA_CPU_PLUGIN:-}" ] || "$out/bin/hindsight" fetch-xla-cpu >/dev/null  # xla-cpu resolves to it
if [ ! -f "$models/$preset/config.json" ]; then
  "$out/bin/hindsight" init-model -preset "$preset" -dtype float32 -out "$models/$preset" -force
fi
runs=()
if [ -n "$base" ]; then
  src=$(mktemp -d)
  git archive "$base" | tar -x -C "$src"
  benchbuild "$src" before
  rm -rf "$src"
  git rev-parse "$base" >"$out/bin/before.rev"
  runs+=(before)
fi
benchbuild . after
git rev-parse HEAD >"$out/bin/after.rev"
git status --porcelain >"$out/bin/after.dirty"
runs+=(after)

for name in "${runs[@]}"; do
  mkdir -p "$out/$name"
  uptime >"$out/$name/uptime.txt"
  echo "== $name: $(cat "$out/$name/uptime.txt")" >&2
  read -r -a bench <"$out/bin/bench-$name.cmd"
  /usr/bin/time -v -o "$out/$name/time.txt" "${bench[@]}" -cpu -stages profile -pprof \
    -profile-preset "$preset" -profile-t "$T" -reps "$reps" -budget-scale 30 \
    -backend "${REALSIZE_BACKEND:-xla-cpu}" -python "" -model-dir "$models" -out "$out/$name" >"$out/$name/stdout.txt" || true
done

if "$py" -c 'import torch, numpy' 2>/dev/null; then
  mkdir -p "$out/torch"
  uptime >"$out/torch/uptime.txt"
  echo "== torch: $(cat "$out/torch/uptime.txt")" >&2
  env ${HINDSIGHT_OPENBLAS:+LD_LIBRARY_PATH=$HINDSIGHT_OPENBLAS OPENBLAS_NUM_THREADS=2} \
    /usr/bin/time -v -o "$out/torch/time.txt" "$py" bench/gpu/torch_peer.py score --model "$models/$preset" \
    --tokens "$out/after/profile-tokens.json" --device cpu --threads 2 --reps 0 >"$out/torch/score.json" || true
  echo "${HINDSIGHT_OPENBLAS:-system libblas.so.3}" >"$out/torch/blas.txt"
else
  echo "realsize_cpu.sh: $py has no torch: no PyTorch peer" >&2
fi
python3 bench/gpu/realsize_summary.py "$out" | tee "$out/summary.md"
