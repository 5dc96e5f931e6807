#!/bin/bash
# bench/score/results/smollm2-session13-old-new.log: main before session 13 (OLD, 5bbced0) and the branch with
# the blocked log-sum-exp and the own keys in halves (NEW, be408ce), alternating; NEW with the transformers peer.
# go build -o /tmp/score-base ./bench/score (at 5bbced0); go build -o /tmp/score-final ./bench/score (at be408ce)
# bash bench/score/results/smollm2-session13-old-new.sh /tmp/score-base /tmp/score-final bench/score/results  (then renamed smollm2-session13-*)
# Old and new bench/score binaries alternated, SmolLM2, XLA CPU; the new one with the transformers peer.
# usage: final.sh OLD NEW OUTDIR
echo -10 > /proc/self/autogroup
export GOMLX_NO_AUTO_INSTALL=1 HINDSIGHT_XLA_CPU_PLUGIN=/root/.cache/hindsight/pjrt/xla-cpu/pjrt_c_api_cpu_plugin.so
OLD=$1 NEW=$2 OUT=$3
M=/tmp/decode-models/smollm2-135m-instruct
PEER="-python /tmp/torch2-venv/bin/python -peer transformers -threads 2"
for shape in "8 256" "1 2048"; do set -- $shape
  for rep in 1 2; do
    echo "== $(date -u +%T) $(uptime | sed 's/.*load/load/')"
    echo "+ old ${1}x$2 rep $rep"; $OLD -model $M -backend xla-cpu -rollouts $1 -tokens $2 -python "" -json $OUT/old-${1}x$2-$rep.json 2>&1 | grep -v Loading
    echo "== $(date -u +%T) $(uptime | sed 's/.*load/load/')"
    echo "+ new ${1}x$2 rep $rep"; $NEW -model $M -backend xla-cpu -rollouts $1 -tokens $2 $PEER -json $OUT/new-${1}x$2-$rep.json 2>&1 | grep -v Loading
  done
done
echo "== $(date -u +%T) $(uptime | sed 's/.*load/load/')"
