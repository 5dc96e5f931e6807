#!/bin/bash
# bench/score/results/smollm2-session13-threads.log: tokens per CPU-second at 1 and 2 CPUs, hindsight (be408ce) and transformers
# (tokens.json: 8 random rollouts of 256 ids beside links to the model's files in /tmp/score-meas/model)
echo -10 > /proc/self/autogroup
export GOMLX_NO_AUTO_INSTALL=1 HINDSIGHT_XLA_CPU_PLUGIN=/root/.cache/hindsight/pjrt/xla-cpu/pjrt_c_api_cpu_plugin.so
M=/tmp/decode-models/smollm2-135m-instruct
S=/work/wt/score/bench/score/transformers_score.py
uptime
cp /tmp/score-meas/tok-8x256.json /tmp/score-meas/model/tokens.json
for rep in 1 2; do
  echo "go 2cpu: $(/tmp/score-final -model $M -backend xla-cpu -rollouts 8 -tokens 256 -python "" 2>&1 | grep 'go (' | sed 's/.*://')"
  echo "go 1cpu: $(taskset -c 0 /tmp/score-final -model $M -backend xla-cpu -rollouts 8 -tokens 256 -python "" 2>&1 | grep 'go (' | sed 's/.*://')"
  /tmp/torch2-venv/bin/python $S /tmp/score-meas/model 2 2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin); print('torch 2 threads: %.0f tok/s %.0f per CPU-s'%(2048/d['seconds'],2048/d['cpu_seconds']))"
  taskset -c 0 /tmp/torch2-venv/bin/python $S /tmp/score-meas/model 1 2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin); print('torch 1 thread: %.0f tok/s %.0f per CPU-s'%(2048/d['seconds'],2048/d['cpu_seconds']))"
done
uptime
