"""Drives hindsight's gateway with the OpenAI Agents SDK (openai-agents, pinned in
.ci/requirements.txt; cmd/hindsightd's TestGatewayAgentsSDK runs it): an agent with a
function tool on OpenAIChatCompletionsModel, run twice in one session (the second run
continues the first's conversation) and once streamed in another; each session is
closed with a reward. Writes each session's final outputs as JSON.

usage: agents_client.py BASE_URL API_KEY OUT.json
"""

import asyncio
import json
import sys
import urllib.request

from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

base, key, out = sys.argv[1], sys.argv[2], sys.argv[3]
set_tracing_disabled(True)
# A fixed seed: the tiny random model sometimes ends a reply at once, and the SDK's
# to_input_list() leaves an empty assistant message out of the history, which then
# does not extend the recorded session (400 session_mismatch). With this seed every
# reply has text.
SEED = int(sys.argv[4]) if len(sys.argv) > 4 else 5


@function_tool
def get_weather(city: str) -> str:
    """Current temperature of a city."""
    return json.dumps({"city": city, "celsius": 21})


def agent_for(session):
    client = AsyncOpenAI(base_url=base, api_key=key, max_retries=0, timeout=120,
                         default_headers={"X-Hindsight-Session": session})
    return Agent(name="weather", instructions="You can call get_weather.", tools=[get_weather],
                 model=OpenAIChatCompletionsModel(model="hindsight", openai_client=client),
                 model_settings=ModelSettings(max_tokens=12, temperature=1.0, top_p=1.0, extra_body={"seed": SEED}))


def close(session, reward):
    req = urllib.request.Request(f"{base}/sessions/{session}/close", data=json.dumps({"reward": reward}).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(req) as r:
        return json.load(r)


async def main():
    record = {}
    agent = agent_for("agents-1")
    first = await Runner.run(agent, "How warm is it in Oslo?", max_turns=4)
    second = await Runner.run(agent, first.to_input_list() + [{"role": "user", "content": "And in Bergen?"}], max_turns=4)
    record["agents-1"] = {"outputs": [first.final_output, second.final_output], "close": close("agents-1", 1.0)}

    streamed = Runner.run_streamed(agent_for("agents-2"), "Tell me about the weather.", max_turns=4)
    deltas = []
    async for ev in streamed.stream_events():
        if ev.type == "raw_response_event" and getattr(ev.data, "type", "") == "response.output_text.delta":
            deltas.append(ev.data.delta)
    record["agents-2"] = {"outputs": [streamed.final_output], "deltas": "".join(deltas), "close": close("agents-2", 0.0)}
    with open(out, "w") as f:
        json.dump(record, f)


asyncio.run(main())
