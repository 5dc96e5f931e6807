"""Building rollouts from messages + server token ids, and from raw token ids with roles."""

from __future__ import annotations

from typing import Any

import pytest

from hindsight_collect import (
    Boundary,
    ConvertError,
    RolloutBuilder,
    Segment,
    Turn,
    from_messages,
    from_role_boundaries,
    validate,
)

# A ChatML-like vocabulary: <|im_start|> role \n … <|im_end|> \n
IM_START, IM_END, NL, THINK_END = 1, 2, 3, 5
SYSTEM, USER, ASSISTANT = 10, 11, 12
HEADER = [IM_START, ASSISTANT, NL]


def msg(role: int, *body: int) -> list[int]:
    return [IM_START, role, NL, *body, IM_END, NL]


MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are an agent."},
    {"role": "user", "content": "Fix the test."},
    {"role": "assistant", "content": "", "reasoning_content": "look for it",
     "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "grep", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "no such file", "status": "error",
     "feedback": "grep needs a path that exists; search_code was available"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c2", "function": {"name": "read_file", "arguments": "{}"}},
        {"id": "c3", "function": {"name": "search_code", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "c2", "content": "…"},
    {"role": "tool", "tool_call_id": "c3", "content": "…", "is_error": False},
    {"role": "assistant", "content": "Done."},
]

PROMPT0 = msg(SYSTEM, 20, 21) + msg(USER, 22, 23, 24) + HEADER
COMP0 = [30, 31, THINK_END, 40, 41, 42, IM_END]
PROMPT1 = PROMPT0 + COMP0 + [NL] + msg(USER, 50, 51) + HEADER
COMP1 = [43, 44, 45, 46, IM_END]
PROMPT2 = PROMPT1 + COMP1 + [NL] + msg(USER, 60, 61, 62, 63) + HEADER  # two tool results, one rendered turn
COMP2 = [70, 71, 72, IM_END]


def turns() -> list[Turn]:
    return [
        Turn(PROMPT0, COMP0, [-0.1] * len(COMP0), tool_call_spans=[(3, 6)]),
        Turn(PROMPT1, COMP1, [-0.2] * len(COMP1), tool_call_spans=[(0, 2), (2, 4)]),
        Turn(PROMPT2, COMP2, [-0.3] * len(COMP2)),
    ]


def test_from_messages() -> None:
    r = from_messages(MESSAGES, turns(), rollout_id="ep-1", tokenizer="bytes-v1", message_start_ids={IM_START},
                      think_end_id=THINK_END, task_id="t", reward=1.0)
    assert r.tokens == PROMPT2 + COMP2
    assert r.segments == [
        Segment(0, 7, "system"),
        Segment(7, 15, "user"),
        Segment(15, 21, "reasoning"),  # the assistant header joins the turn's first segment
        Segment(21, 26, "tool_call", tool="grep"),  # the "\n" after <|im_end|> closes it
        Segment(26, 33, "tool_result", tool="grep", status=1,
                feedback="grep needs a path that exists; search_code was available"),
        Segment(33, 38, "tool_call", tool="read_file"),
        Segment(38, 42, "tool_call", tool="search_code"),
        Segment(42, 51, "tool_result", tool="read_file,search_code", status=0),  # one turn, two results
        Segment(51, 58, "assistant"),
    ]
    assert r.logprobs is not None
    # Only sampled tokens carry log-probs; headers and prompts are null.
    sampled = [i for i, x in enumerate(r.logprobs) if x is not None]
    assert sampled == list(range(18, 25)) + list(range(36, 41)) + list(range(54, 58))
    assert all(r.trainable(i) for i in sampled)
    assert not r.trainable(15)
    assert validate(r, tokenizer="bytes-v1") == []


def test_prompt_rebuilt_is_refused() -> None:
    ts = turns()
    # The harness dropped turn 0's reasoning from turn 1's prompt.
    ts[1].prompt_token_ids = PROMPT0 + COMP0[3:] + [NL] + msg(USER, 50, 51) + HEADER
    with pytest.raises(ConvertError, match=r"turn 1: prompt_token_ids does not extend the tokens before it: "
                                           r"first difference at position 18 \(has 40; the earlier turns have 30\)"):
        from_messages(MESSAGES, ts, rollout_id="x", tokenizer=None, message_start_ids={IM_START})
    ts = turns()
    ts[2].prompt_token_ids = PROMPT1[:20]
    with pytest.raises(ConvertError, match=r"turn 2: .* position 20 \(ends there"):
        from_messages(MESSAGES, ts, rollout_id="x", tokenizer=None)


def test_without_split_ids_and_with_trailing_messages() -> None:
    msgs = MESSAGES[:4]
    with pytest.raises(ConvertError, match="follow the last assistant turn"):
        from_messages(msgs, turns()[:1], rollout_id="x", tokenizer=None)
    final = PROMPT1[:-3]  # the tool result, no next header
    ts = turns()[:1]
    ts[0].tool_call_spans = None
    r = from_messages(msgs, ts, rollout_id="x", tokenizer=None, final_token_ids=final)
    assert r.tokens == final
    # Without message_start_ids the first prompt (system + user + header) is one segment
    # and the turn starts at its completion.
    assert r.segments == [
        Segment(0, 18, "user"),
        Segment(18, 25, "tool_call", tool="grep"),  # no content, one call, no spans
        Segment(25, 33, "tool_result", tool="grep", status=1,
                feedback="grep needs a path that exists; search_code was available"),
    ]
    assert validate(r) == []


def test_message_turn_mismatch() -> None:
    with pytest.raises(ConvertError, match="3 assistant messages but 2 turns"):
        from_messages(MESSAGES, turns()[:2], rollout_id="x", tokenizer=None)
    ts = turns()
    ts[0].completion_logprobs = [-0.1]
    with pytest.raises(ConvertError, match="turn 0: 7 completion token ids but 1 log-probs"):
        from_messages(MESSAGES, ts, rollout_id="x", tokenizer=None)
    ts = turns()
    ts[1].tool_call_spans = [(0, 2)]
    with pytest.raises(ConvertError, match="1 tool_call_spans but the message has 2 tool_calls"):
        from_messages(MESSAGES, ts, rollout_id="x", tokenizer=None)
    with pytest.raises(ConvertError, match="unknown role 'robot'"):
        from_messages([{"role": "robot"}], [], rollout_id="x", tokenizer=None)


def test_builder_and_boundaries() -> None:
    b = RolloutBuilder()
    b.add("system", [1, 2, 3])
    b.add("user", [4, 5])
    b.add("assistant", [6, 7, 8], [None, -0.5, -0.25])
    b.add("tool_call", [9], [-1.0], tool="grep")
    b.add("tool_result", [10, 11], tool="grep", status="error", feedback="wrong path")
    b.add("user", [])  # empty: no segment
    r = b.build("b-1", tokenizer="bytes-v1", reward=0.0, feedback=-1)
    assert r.segments == [Segment(0, 3, "system"), Segment(3, 5, "user"), Segment(5, 8, "assistant"),
                          Segment(8, 9, "tool_call", tool="grep"),
                          Segment(9, 11, "tool_result", tool="grep", status=1, feedback="wrong path")]
    assert validate(r) == []
    with pytest.raises(ConvertError):
        b.add("bot", [1])
    with pytest.raises(ConvertError):
        b.add("user", [1, 2], [-1.0])

    r2 = from_role_boundaries("b-1", r.tokens or [], r.logprobs,
                              [(0, "system"), (3, "user"), (5, "assistant"), Boundary(8, "tool_call", tool="grep"),
                               Boundary(9, "tool_result", tool="grep", status=1, feedback="wrong path")],
                              tokenizer="bytes-v1", reward=0.0, feedback=-1)
    assert r2 == r
    with pytest.raises(ConvertError, match="not increasing"):
        from_role_boundaries("x", [1, 2], None, [(1, "user"), (0, "user")], tokenizer=None)
