#!/bin/sh
# run.sh: a restarted daemon's first step against a warm step (docs/performance.md
# "Cold start").
#
#   bench/coldstart/run.sh MODEL_DIR OUT_DIR [TRAIN_YAML_LINES]   (from the repository root)
#
# Run 1 starts hindsightd on XLA CPU with an empty data directory (so an empty
# compiled-program cache) and trains three files of 4 rollouts each (the same synthetic
# content under new ids, so every step runs the same programs; `hindsight synth
# -tokenizer MODEL_DIR`: the model's own tokenizer where the directory has a
# tokenizer.json, else byte ids): step 1 is cold, steps 2–3 warm. Run 2 restarts it on
# the same data directory and trains two more such files: its step 1 loads its programs
# from <data_dir>/state/programs. summary.py prints each step's took, CPU time, compile
# and load time and the ratios (summary.md, summary.json). Set XLA_FLAGS as for any run;
# HINDSIGHT_COLDSTART_NOCACHE=1 turns the cache off (run 2 then compiles again);
# HINDSIGHT_COLDSTART_NOWARM=1 keeps it but sets compile_cache.warm: false (the
# restarts' programs are loaded at start, not executed until their first step).
# RESTARTS=N (default 1) restarts N times (again.log, again2.log, …), each on the
# cache the runs before it left; uptime.txt has the load before and after each run.
set -eu
model=$1
out=$2
extra=${3:-}
export GOMLX_NO_AUTO_INSTALL=1
mkdir -p "$out"
out=$(cd "$out" && pwd -P)
go build -o "$out/bin/" ./cmd/hindsightd ./cmd/hindsight
data=$out/data
rm -rf "$data"
mkdir -p "$data/spool/incoming"
cache=true
[ "${HINDSIGHT_COLDSTART_NOCACHE:-}" = 1 ] && cache=false
warm=true
[ "${HINDSIGHT_COLDSTART_NOWARM:-}" = 1 ] && warm=false
cat >"$out/hindsightd.yaml" <<YAML
data_dir: $data
listen: 127.0.0.1:0
model: {dir: $model}
compile_cache: {enabled: $cache, warm: $warm}
train:
  token_budget: 100000
  max_batch_rollouts: 4
  idle_flush: 1s
  checkpoint: {every_steps: 1000, keep: 1}
$extra
YAML
tok=bytes
[ -f "$model/tokenizer.json" ] && tok=$model
files() { # files PREFIX N: N files of 4 rollouts, 256 tokens before hints, seed 4
	i=0
	while [ $i -lt "$2" ]; do
		"$out/bin/hindsight" synth -out "$data/spool/incoming" -n 4 -tokens 256 -per-file 4 -seed 4 -prefix "$1$i" -tokenizer "$tok" >/dev/null
		i=$((i + 1))
	done
}
run() { # run NAME STEPS: start the daemon, wait for STEPS step lines, stop it
	: >"$out/$1.log" # there before the first grep: the daemon's redirect may come later
	"$out/bin/hindsightd" -config "$out/hindsightd.yaml" -backend xla-cpu >"$out/$1.log" 2>&1 &
	pid=$!
	while [ "$(grep -c '"message":"step\( without update[^"]*\)\{0,1\}"' "$out/$1.log")" -lt "$2" ]; do
		kill -0 $pid 2>/dev/null || { echo "daemon exited early, see $out/$1.log"; exit 1; }
		sleep 5
	done
	kill -TERM $pid
	wait $pid || true
}
: >"$out/uptime.txt"
files first 3
echo "first: $(uptime)" >>"$out/uptime.txt"
run first 3
logs=$out/first.log
k=1
while [ $k -le "${RESTARTS:-1}" ]; do
	name=again
	[ $k -gt 1 ] && name=again$k
	files "$name" 2
	echo "$name: $(uptime)" >>"$out/uptime.txt"
	run "$name" 2
	logs="$logs $out/$name.log"
	k=$((k + 1))
done
echo "end: $(uptime)" >>"$out/uptime.txt"
# shellcheck disable=SC2086 # $logs is a list of paths without spaces
python3 "$(dirname "$0")/summary.py" $logs "$out/summary.json" | tee "$out/summary.md"
