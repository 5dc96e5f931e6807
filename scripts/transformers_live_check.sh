#!/bin/sh
# transformers_live_check.sh: load the newest checkpoint of a trained run with
# transformers and compare its per-token log-probs with `hindsight score`'s (≤ 1e-5
# nats), through the same Go test that checks the committed goldens.
#
#   scripts/transformers_live_check.sh DIR [PYTHON]
#
# DIR is a data directory (DIR/checkpoints/latest), a checkpoints directory
# (DIR/latest) or a model directory. PYTHON is an interpreter with torch and
# transformers (default $HINDSIGHT_TRANSFORMERS_PYTHON, else /work/venvs/tf/bin/python;
# scripts/transformers_goldens.py says how to make one). Not part of .ci/run: PyPI
# torch is several GB. Run from the repository root.
set -eu
dir=${1:?usage: $0 DATA_DIR|CHECKPOINTS_DIR|MODEL_DIR [PYTHON]}
py=${2:-${HINDSIGHT_TRANSFORMERS_PYTHON:-/work/venvs/tf/bin/python}}
if [ -e "$dir/checkpoints/latest" ]; then
	model=$dir/checkpoints/latest
elif [ -e "$dir/latest" ]; then
	model=$dir/latest
else
	model=$dir
fi
model=$(cd "$model" && pwd -P)
[ -f "$model/config.json" ] || { echo "$model: no config.json, not a model directory" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "model: $model"
ls -p "$model" | sed 's/^/  /'
"$py" scripts/transformers_goldens.py --any-version --model "$model" --out "$tmp/goldens.json"
rc=0
GOMLX_NO_AUTO_INSTALL=1 HINDSIGHT_TRANSFORMERS_GOLDENS="$tmp/goldens.json" \
	go test ./cmd/hindsight -run '^TestTransformersGoldens$' -count=1 -v >"$tmp/test.log" 2>&1 || rc=$?
if [ "$rc" = 0 ]; then grep -E 'max \||^ok' "$tmp/test.log"; else cat "$tmp/test.log"; fi
exit "$rc"
