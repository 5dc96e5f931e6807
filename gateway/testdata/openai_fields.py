"""Drives hindsight's gateway's sampling fields with the official openai package
(cmd/hindsightd's TestGatewaySamplingFields runs it against the real daemon with the
tiny byte model, on the unrecorded model): /v1/models/{id}, top_logprobs,
logit_bias, stop_token_ids (extra_body), the refusals by param, the context limit,
and a streamed reply the client walks away from. Asserts what it can itself and
writes what the Go test checks as JSON.

usage: openai_fields.py BASE_URL API_KEY OUT.json
"""

import json
import sys

import openai

base, key, out = sys.argv[1], sys.argv[2], sys.argv[3]
c = openai.OpenAI(base_url=base, api_key=key, max_retries=0, timeout=300)
msgs = [{"role": "user", "content": "count to ten"}]
# The byte tokenizer's ids 256.. are its special tokens, the turn ends among them:
# banned, the tiny model never stops before max_tokens.
no_end = {str(i): -100 for i in range(256, 265)}
res = {}

m = c.models.retrieve("hindsight")
res["max_model_len"] = m.model_extra["max_model_len"]
try:
    c.models.retrieve("gpt-4o")
    res["missing_model"] = "found"
except openai.NotFoundError as e:
    res["missing_model"] = e.code

r = c.chat.completions.create(model="policy", messages=msgs, max_tokens=6, temperature=1.0, seed=3,
                              logprobs=True, top_logprobs=3, logit_bias=no_end)
for e in r.choices[0].logprobs.content:
    top = [t.logprob for t in e.top_logprobs]
    assert len(top) == 3 and top == sorted(top, reverse=True), top
    assert e.logprob <= top[0] + 1e-6, (e.logprob, top)
    assert e.model_extra["token_id"] < 256, "a banned special token was sampled"
res["top_logprobs"] = len(r.choices[0].logprobs.content)

g = c.chat.completions.create(model="policy", messages=msgs, max_tokens=6, temperature=0, logprobs=True, logit_bias=no_end)
greedy = [e.model_extra["token_id"] for e in g.choices[0].logprobs.content]
banned = dict(no_end, **{str(greedy[0]): -100})
b = c.chat.completions.create(model="policy", messages=msgs, max_tokens=6, temperature=0, logprobs=True, logit_bias=banned)
assert greedy[0] not in [e.model_extra["token_id"] for e in b.choices[0].logprobs.content]
s = c.chat.completions.create(model="policy", messages=msgs, max_tokens=6, temperature=0, logprobs=True, logit_bias=no_end,
                              extra_body={"stop_token_ids": [greedy[2]]})
stopped = [e.model_extra["token_id"] for e in s.choices[0].logprobs.content]
res["stop"] = {"greedy": greedy, "stopped": stopped, "finish": s.choices[0].finish_reason}

tools = [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object", "properties": {}}}}]
res["refused"] = {}
for name, kw in [
    ("tool_choice", {"tools": tools, "tool_choice": "required"}),
    ("response_format", {"response_format": {"type": "json_object"}}),
    ("reasoning_effort", {"reasoning_effort": "low"}),
    ("presence_penalty", {"presence_penalty": 5}),
]:
    try:
        c.chat.completions.create(model="policy", messages=msgs, max_tokens=2, **kw)
        res["refused"][name] = None
    except openai.BadRequestError as e:
        res["refused"][name] = e.param
try:
    c.chat.completions.create(model="policy", messages=[{"role": "user", "content": "a" * 9000}], max_tokens=2)
    res["too_long"] = None
except openai.BadRequestError as e:
    res["too_long"] = e.code

# A long streamed reply the client leaves after two pieces of content.
stream = c.chat.completions.create(model="policy", messages=msgs, max_tokens=4000, stream=True, logit_bias=no_end)
pieces = 0
for chunk in stream:
    if chunk.choices and chunk.choices[0].delta.content:
        pieces += 1
    if pieces >= 2:
        break
stream.close()
res["left_after"] = pieces

with open(out, "w") as f:
    json.dump(res, f)
