set -e
cd /tmp/cold-exp/q06
export GOMLX_NO_AUTO_INSTALL=1
uptime > uptime.txt
for r in first again; do
  /tmp/cold-exp/bin/gpu -out $r -cpu -backend xla-cpu -stages profile -profile-preset qwen3-0.6b -profile-t 1024 -reps 1 -budget-scale 30 -model-dir /tmp/cold-exp/q06/models -compile-cache /tmp/cold-exp/q06/programs > $r.out 2>&1
  uptime >> uptime.txt
done
