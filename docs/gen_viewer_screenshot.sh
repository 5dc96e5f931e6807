#!/usr/bin/env bash
# Regenerates docs/credit-viewer.png, the picture of the credit viewer in docs/teacher-and-credit.md:
# a hindsightd -demo run, its credit files through `hindsight inspect`, and a
# screenshot in headless Chromium (viewer/testdata/browser/check.mjs) of the first
# hinted rollout, coloured by Δ_t, with its first token that has a Δ focused. Needs
# chromium and node.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOMLX_NO_AUTO_INSTALL=1
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
go run ./cmd/hindsightd -demo -data-dir "$tmp/demo" >/dev/null
ckpt="$(ls -d "$tmp"/demo/checkpoints/step-* | sort | tail -1)"
go run ./cmd/hindsight inspect -model "$ckpt" -html "$tmp/page.html" "$tmp"/demo/outputs/*.credit.arrow
# The first rollout with a hint, and its first token with a Δ.
read -r rollout t < <(python3 -c '
import json, re, sys
s = open(sys.argv[1]).read()
d = json.loads(re.search(r"id=\"credit-data\">(.*?)</script>", s, re.S).group(1))
i = next(i for i, r in enumerate(d["rollouts"]) if r["hints"])
r = d["rollouts"][i]
print(i, next(t for t in range(r["hints"][0]["insert_at"], len(r["ids"])) if r["delta"][t] is not None))' "$tmp/page.html")
printf '{"screenshot": {"page": "%s", "out": "%s", "rollout": %d, "t": %d, "by": "delta"}}\n' \
  "$tmp/page.html" "$PWD/docs/credit-viewer.png" "$rollout" "$t" >"$tmp/spec.json"
node viewer/testdata/browser/check.mjs "${HINDSIGHT_CHROMIUM:-chromium}" "$tmp/spec.json"
