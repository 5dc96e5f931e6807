"""Drives hindsight's gateway with the official openai package (cmd/hindsightd's
gateway end-to-end test runs it): a multi-turn tool-calling conversation matched by
its message prefix, and a streamed one under an X-Hindsight-Session header; both
sessions are closed with a task id and a reward. Writes what the client received
(per turn: content, finish reason, sampled token ids and log-probs) as JSON.

usage: openai_client.py BASE_URL API_KEY OUT.json
"""

import json
import sys

import urllib.request

import openai

base, key, out = sys.argv[1], sys.argv[2], sys.argv[3]
client = openai.OpenAI(base_url=base, api_key=key, max_retries=0, timeout=120)
TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current temperature of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}]
record = {"models": [m.id for m in client.models.list().data], "sessions": {}}


def turn_of(choice):
    lp = choice.logprobs.content if choice.logprobs else []
    return {
        "content": choice.message.content or "",
        "finish_reason": choice.finish_reason,
        "tool_calls": [tc.model_dump() for tc in (choice.message.tool_calls or [])],
        "token_ids": [t.model_extra["token_id"] for t in lp],
        "logprobs": [t.logprob for t in lp],
    }


# A tool-calling conversation, no session header: the gateway matches each follow-up
# by its message prefix. No temperature: OpenAI's default 1, which the rollout records.
messages = [
    {"role": "system", "content": "You can call get_weather."},
    {"role": "user", "content": "How warm is it in Oslo?"},
]
turns = []
session = None
for step in range(3):
    raw = client.chat.completions.with_raw_response.create(
        model="hindsight", messages=messages, tools=TOOLS, top_p=1.0,
        max_tokens=16, seed=7 + step, logprobs=True, metadata={"task_id": "weather-oslo"})
    sid = raw.headers["x-hindsight-session"]
    assert session in (None, sid), f"turn {step} went to session {sid}, not {session}"
    session = sid
    resp = raw.parse()
    choice = resp.choices[0]
    turns.append(turn_of(choice))
    messages.append(choice.message.model_dump(exclude_none=True))
    if step == 0:
        if choice.message.tool_calls:
            call_id = choice.message.tool_calls[0].id
        else:
            # The tiny random model seldom calls the tool: the harness makes the call
            # itself (an assistant message of its own), so the tool message answers
            # a call by its id, as OpenAI requires.
            call_id = "call_harness_0"
            messages.append({"role": "assistant", "content": None, "tool_calls": [{
                "id": call_id, "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]})
        messages.append({"role": "tool", "tool_call_id": call_id, "name": "get_weather", "content": '{"celsius": 21}'})
    elif step == 1:
        messages.append({"role": "user", "content": "Thanks. And tomorrow?"})
record["sessions"][session] = {"turns": turns, "kind": "tools"}

# A streamed conversation under an explicit session id, sampled at temperature 0.5.
messages = [{"role": "user", "content": "Tell me a story."}]
turns = []
for step in range(2):
    stream = client.chat.completions.create(
        model="hindsight", messages=messages, temperature=0.5, max_tokens=12, seed=100 + step,
        logprobs=True, stream=True, stream_options={"include_usage": True},
        extra_headers={"X-Hindsight-Session": "streamed-1"})
    content, ids, lps, finish, usage = "", [], [], None, None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage.completion_tokens
        for c in chunk.choices:
            content += c.delta.content or ""
            if c.logprobs and c.logprobs.content:
                ids += [t.model_extra["token_id"] for t in c.logprobs.content]
                lps += [t.logprob for t in c.logprobs.content]
            finish = c.finish_reason or finish
    assert usage == len(ids), f"usage says {usage} completion tokens, the stream carried {len(ids)}"
    turns.append({"content": content, "finish_reason": finish, "tool_calls": [], "token_ids": ids, "logprobs": lps})
    messages += [{"role": "assistant", "content": content}, {"role": "user", "content": "Go on."}]
record["sessions"]["streamed-1"] = {"turns": turns, "kind": "stream"}

for sid, reward in ((session, 1.0), ("streamed-1", 0.0)):
    req = urllib.request.Request(
        f"{base}/sessions/{sid}/close", method="POST",
        data=json.dumps({"task_id": "task-" + sid, "reward": reward}).encode(),
        headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        record["sessions"][sid]["closed"] = json.load(r)

with open(out, "w") as f:
    json.dump(record, f)
