"""Drives hindsight's gateway A/B test with the official openai package
(cmd/hindsightd's TestGatewayAB runs it). The plan (JSON file) lists sessions:
each is sent its turns under its X-Hindsight-Session id, then optionally rated
(POST /v1/feedback: rating, comment) and closed with a reward (POST
/v1/sessions/{id}/close). Writes per session the system_fingerprint of every
answer (hindsight-step-N: the checkpoint that sampled it) and what was sent.

usage: ab_client.py BASE_URL API_KEY PLAN.json OUT.json

plan: {"sessions": [{"id": "ab-1", "turns": 2, "rating": 1, "comment": "…",
                     "reward": 0.5, "close": true}, …]}
"""

import json
import sys
import urllib.request

import openai

base, key, plan_path, out = sys.argv[1:5]
client = openai.OpenAI(base_url=base, api_key=key, max_retries=0, timeout=300)
plan = json.load(open(plan_path))


def post(path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", "Authorization": "Bearer " + key})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


record = {}
for s in plan["sessions"]:
    sid = s["id"]
    msgs = s.get("messages") or []
    fps = []
    for n in range(s["turns"]):
        msgs.append({"role": "user", "content": f"{sid} turn {len(msgs) // 2 + 1}: list the files"})
        raw = client.chat.completions.with_raw_response.create(
            model="hindsight", messages=msgs, max_tokens=4, temperature=1, seed=n + 1,
            extra_headers={"X-Hindsight-Session": sid})
        assert raw.headers["x-hindsight-session"] == sid
        r = raw.parse()
        fps.append(r.system_fingerprint)
        msgs.append({"role": "assistant", "content": r.choices[0].message.content or ""})
    got = {"fingerprints": fps, "messages": msgs}
    if s.get("rating") is not None or s.get("comment"):
        body = {"session_id": sid}
        if s.get("rating") is not None:
            body["rating"] = s["rating"]
        if s.get("comment"):
            body["comment"] = s["comment"]
        got["feedback"] = post("/feedback", body)
    if s.get("close"):
        body = {"task_id": "ab"}
        if s.get("reward") is not None:
            body["reward"] = s["reward"]
        got["close"] = post(f"/sessions/{sid}/close", body)
    record[sid] = got

json.dump(record, open(out, "w"), indent=1)
