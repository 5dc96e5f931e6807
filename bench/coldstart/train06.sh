#!/bin/sh
# train06.sh: the qwen3-0.6b shape's training step after a restart (docs/performance.md
# "Cold start").
#
#   bench/coldstart/train06.sh OUT_DIR [EXTRA_FLAGS]   (from the repository root)
#
# Runs hindsight-bench-gpu's profile stage on XLA CPU three times on one
# compiled-program cache (OUT_DIR/programs): process 1 starts with an empty cache,
# process 2 is the restart, process 3 the restart as before issue 42's restart work
# (-profile-no-prepare: the first step places the weights and makes the optimizer's
# moments itself, where 1 and 2 do that in xla.Trainer.Prepare before it, as the
# daemon does at start). Each process trains one 256-token step cold (its first:
# compiles, or loads from the cache) and one warm (the "profile train memory" row:
# prepare_cpu_seconds, cold_seconds, cold_cpu_seconds, cold_compile, warm_seconds,
# warm_cpu_seconds), then scores 64 tokens. summary06.py prints the rows and the
# ratios. RESTARTS=N (default 1) repeats the two restarts N times, interleaved. The f32 step peaks near 10 GiB:
# run it alone (flock /work/wt/bigmem.lock on a shared machine). HINDSIGHT_COLDSTART_BIN
# names a hindsight-bench-gpu binary built beforehand (else it is built into OUT_DIR/bin).
set -eu
out=$1
extra=${2:-}
export GOMLX_NO_AUTO_INSTALL=1
mkdir -p "$out"
out=$(cd "$out" && pwd -P)
bin=${HINDSIGHT_COLDSTART_BIN:-}
if [ -z "$bin" ]; then
	go build -o "$out/bin/gpu" ./bench/gpu
	bin=$out/bin/gpu
fi
rm -rf "$out/programs" "$out/first" "$out"/again* "$out"/unprepared*
uptime >"$out/uptime.txt"
runs=first
i=1
while [ "$i" -le "${RESTARTS:-1}" ]; do
	runs="$runs again$i unprepared$i"
	i=$((i + 1))
done
dirs=
for r in $runs; do
	dirs="$dirs $out/$r"
	flags=$extra
	if [ "${r#unprepared}" != "$r" ]; then
		flags="$extra -profile-no-prepare"
	fi
	# shellcheck disable=SC2086
	"$bin" -out "$out/$r" -cpu -backend xla-cpu -stages profile -profile-preset qwen3-0.6b \
		-profile-t 64 -profile-train-t 256 -precisions f32 -reps 1 -budget-scale 30 \
		-model-dir "$out/models" -compile-cache "$out/programs" $flags >"$out/$r.out" 2>&1
	uptime >>"$out/uptime.txt"
done
# shellcheck disable=SC2086
python3 "$(dirname "$0")/summary06.py" $dirs | tee "$out/summary.md"
