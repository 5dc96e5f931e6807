"""Building rollouts from what collectors have, without ever re-tokenising text:

- RolloutBuilder / from_role_boundaries: raw token ids with role boundaries.
- from_messages: an OpenAI-style message list (with tool calls) plus, per sampled
  assistant turn, the prompt token ids and the completion token ids and log-probs that
  vLLM or SGLang returned.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from .rollout import KINDS, STATUS_ERROR, STATUS_OK, Rollout, Segment


class ConvertError(ValueError):
    """ConvertError is raised when the inputs cannot form one rollout, e.g. a turn's
    prompt does not extend the tokens before it."""


def _status(status: int | str | None) -> int | None:
    if isinstance(status, str):
        try:
            return {"ok": STATUS_OK, "error": STATUS_ERROR}[status]
        except KeyError:
            raise ConvertError(f"tool status {status!r}: want 'ok', 'error', 0, 1 or None") from None
    return status


class RolloutBuilder:
    """RolloutBuilder appends segments of token ids one after the other and builds a
    Rollout; each add() is one segment.

        b = RolloutBuilder()
        b.add("system", sys_ids)
        b.add("user", user_ids)
        b.add("assistant", header_ids + reply_ids, [None] * len(header_ids) + reply_logprobs)
        b.add("tool_call", call_ids, call_logprobs, tool="grep")
        b.add("tool_result", result_ids, tool="grep", status="error")
        rollout = b.build("run-7/ep-3", tokenizer=fingerprint("tokenizer.json"), reward=1.0)
    """

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.logprobs: list[float | None] = []
        self.segments: list[Segment] = []

    def add(self, kind: str, token_ids: Sequence[int], logprobs: Sequence[float | None] | None = None, *,
            tool: str | None = None, status: int | str | None = None, feedback: str | None = None) -> Segment:
        """add appends token_ids as one segment of kind. logprobs, one per token, are
        the sampler's (None for a token the policy did not sample); None means none was
        sampled (prompts, tool output). status is "ok"/"error" (or 0/1) for tools."""
        if kind not in KINDS:
            raise ConvertError(f"add segment: unknown kind {kind!r}; want one of {', '.join(KINDS)}")
        if logprobs is not None and len(logprobs) != len(token_ids):
            raise ConvertError(f"add {kind} segment: {len(token_ids)} token ids but {len(logprobs)} log-probs")
        start = len(self.tokens)
        self.tokens.extend(token_ids)
        self.logprobs.extend(logprobs if logprobs is not None else [None] * len(token_ids))
        seg = Segment(start, len(self.tokens), kind, tool=tool, status=_status(status), feedback=feedback)
        if len(seg) > 0:
            self.segments.append(seg)
        return seg

    def build(self, rollout_id: str, *, tokenizer: str | None, task_id: str | None = None,
              policy_version: int | None = None, reward: float | None = None,
              feedback: int | None = None, temperature: float | None = None) -> Rollout:
        """build returns the rollout (it copies the builder's lists). temperature is the
        sampling temperature of the request that sampled it (0: greedy; None: unknown,
        scored as 1)."""
        return Rollout(rollout_id=rollout_id, tokens=list(self.tokens), logprobs=list(self.logprobs),
                       segments=list(self.segments), task_id=task_id, policy_version=policy_version,
                       tokenizer=tokenizer, reward=reward, feedback=feedback, temperature=temperature)


class Boundary(NamedTuple):
    """Boundary starts a segment at token position start; it runs to the next
    boundary's start (or the end of the tokens)."""

    start: int
    kind: str
    tool: str | None = None
    status: int | str | None = None
    feedback: str | None = None


def from_role_boundaries(rollout_id: str, tokens: Sequence[int], logprobs: Sequence[float | None] | None,
                         boundaries: Sequence[Boundary | tuple[int, str]], *, tokenizer: str | None,
                         task_id: str | None = None, policy_version: int | None = None,
                         reward: float | None = None, feedback: int | None = None,
                         temperature: float | None = None) -> Rollout:
    """from_role_boundaries builds a rollout from the whole token sequence, its
    log-probs (None where not sampled) and where each role starts: boundaries are
    (start, kind) pairs or Boundary values, in increasing start order. temperature is
    the sampling temperature (RolloutBuilder.build)."""
    bs = [b if isinstance(b, Boundary) else Boundary(*b) for b in boundaries]
    segs: list[Segment] = []
    for i, b in enumerate(bs):
        end = bs[i + 1].start if i + 1 < len(bs) else len(tokens)
        if b.kind not in KINDS:
            raise ConvertError(f"boundary {i} at {b.start}: unknown kind {b.kind!r}; want one of {', '.join(KINDS)}")
        if not 0 <= b.start <= end <= len(tokens):
            raise ConvertError(f"boundary {i} at {b.start}: starts are not increasing within the "
                               f"{len(tokens)} tokens (next starts at {end})")
        if end > b.start:
            segs.append(Segment(b.start, end, b.kind, tool=b.tool, status=_status(b.status), feedback=b.feedback))
    if logprobs is not None and len(logprobs) != len(tokens):
        raise ConvertError(f"{len(tokens)} tokens but {len(logprobs)} log-probs")
    return Rollout(rollout_id=rollout_id, tokens=list(tokens),
                   logprobs=list(logprobs) if logprobs is not None else None, segments=segs, task_id=task_id,
                   policy_version=policy_version, tokenizer=tokenizer, reward=reward, feedback=feedback,
                   temperature=temperature)


@dataclass
class Turn:
    """Turn is one sampled assistant turn as the inference server returned it.

    prompt_token_ids is the whole prompt the server saw (vLLM: `prompt_token_ids`;
    SGLang: `input_ids`/`prompt_tokens`), completion_token_ids and completion_logprobs
    the sampled tokens and their log-probs (vLLM/OpenAI: `logprobs.content[i].logprob`;
    SGLang: `meta_info.output_token_logprobs`). The optional boundaries are positions in
    the completion: reasoning_end ends the reasoning block (its end tag included), and
    tool_call_spans are the [start, end) of each tool call, in the order of the
    message's tool_calls."""

    prompt_token_ids: Sequence[int]
    completion_token_ids: Sequence[int]
    completion_logprobs: Sequence[float | None] | None
    reasoning_end: int | None = None
    tool_call_spans: Sequence[tuple[int, int]] | None = None


_ROLE_KIND = {"system": "system", "developer": "system", "user": "user", "tool": "tool_result",
              "function": "tool_result", "ipython": "tool_result"}


class _Acc:
    """_Acc accumulates the growing token sequence and its segments."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.logprobs: list[float | None] = []
        self.segments: list[Segment] = []

    def push(self, ids: Sequence[int], lps: Sequence[float | None] | None = None) -> None:
        self.tokens.extend(ids)
        self.logprobs.extend(lps if lps is not None else [None] * len(ids))

    def seg(self, start: int, end: int, kind: str, tool: str | None = None, status: int | None = None,
            feedback: str | None = None) -> None:
        if end > start:
            self.segments.append(Segment(start, end, kind, tool=tool, status=status, feedback=feedback))


def _message_segment(msgs: Sequence[Mapping[str, Any]], tool_names: Mapping[str, str]) -> tuple[
        str, str | None, int | None, str | None]:
    """_message_segment returns kind, tool, status and feedback of the segment holding
    msgs (one message, or several whose tokens could not be told apart)."""
    kinds = [_ROLE_KIND[m["role"]] for m in msgs]
    if all(k == "tool_result" for k in kinds):
        names = []
        for m in msgs:
            n = m.get("name") or tool_names.get(str(m.get("tool_call_id", "")), "")
            if n and n not in names:
                names.append(n)
        status = STATUS_ERROR if any(_is_error(m) for m in msgs) else STATUS_OK
        kind, tool = "tool_result", (",".join(names) or None)
    else:
        kind = "user" if "user" in kinds or "tool_result" in kinds else "system"
        tool, status = None, None
    fb = [str(m["feedback"]) for m in msgs if m.get("feedback")]
    return kind, tool, status, ("\n".join(fb) or None)


def _is_error(m: Mapping[str, Any]) -> bool:
    """_is_error reads a tool message's outcome: `"status": "error"` or `"is_error": true`."""
    st = m.get("status")
    if st is not None and st not in ("ok", "error", 0, 1):
        raise ConvertError(f"tool message status {st!r}: want 'ok' or 'error'")
    return st in ("error", 1) or bool(m.get("is_error"))


def from_messages(messages: Sequence[Mapping[str, Any]], turns: Sequence[Turn], *, rollout_id: str,
                  tokenizer: str | None, message_start_ids: Collection[int] | None = None,
                  think_end_id: int | None = None, final_token_ids: Sequence[int] | None = None,
                  task_id: str | None = None, policy_version: int | None = None, reward: float | None = None,
                  feedback: int | None = None, temperature: float | None = None) -> Rollout:
    """from_messages builds one rollout from an OpenAI-style conversation and the token
    ids the server saw and sampled, never re-tokenising text.

    messages are dicts with "role" (system, developer, user, assistant, tool), assistant
    ones optionally with "tool_calls" ([{"id", "function": {"name", …}}]), tool ones
    with "tool_call_id" or "name", and "status": "error" (or "is_error": true) for a
    failed tool call. Any message may carry "feedback": a person's comment on it. Each
    assistant message is one sampled turn: turns[i] belongs to the i-th assistant
    message; the messages before it are in turns[i].prompt_token_ids.

    The turns must form one growing sequence: turns[i].prompt_token_ids must start
    with all tokens of turn i-1 (prompt + completion); when a harness rebuilt the prompt
    (e.g. dropped earlier reasoning), this raises ConvertError naming the turn and the
    first differing position. final_token_ids, when messages follow the last assistant
    message, is the whole final sequence and must extend the last turn likewise.

    Segments: each non-assistant message gets a segment of its kind. To tell the
    messages in a prompt apart, pass message_start_ids, the token ids that begin a
    rendered message (ChatML/Qwen: {<|im_start|>}; Llama 3: {<|start_header_id|>}):
    the new prompt tokens of a turn are split before each, the last piece being the
    assistant header, which joins the turn (null log-probs). If the pieces do not match
    the messages one to one (a template that renders two tool results as one turn),
    the messages share one segment. Without message_start_ids every turn's new prompt
    tokens form one segment and the turn starts at the completion. In a completion,
    reasoning_end (or the first think_end_id, e.g. </think>) ends a reasoning segment,
    tool_call_spans give tool_call segments (named from the message's tool_calls; what
    follows the last call joins it), and the rest is assistant; an assistant message with
    tool calls, no content and no spans is one tool_call segment.
    """
    for i, m in enumerate(messages):
        role = m.get("role")
        if role != "assistant" and role not in _ROLE_KIND:
            raise ConvertError(f"message {i}: unknown role {role!r}")
    asst = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    if len(asst) != len(turns):
        raise ConvertError(f"{len(asst)} assistant messages but {len(turns)} turns: each assistant message "
                           "must be one sampled turn")
    tail = list(messages[asst[-1] + 1:]) if asst else list(messages)
    if tail and final_token_ids is None:
        raise ConvertError(f"messages {len(messages) - len(tail)}..{len(messages) - 1} follow the last assistant "
                           "turn but have no token ids: pass final_token_ids (the whole final sequence) or "
                           "leave them out")
    starts = frozenset(message_start_ids or ())
    tool_names: dict[str, str] = {}
    acc = _Acc()

    def extend(k: int, what: str, ids: Sequence[int]) -> list[int]:
        """extend checks that ids start with the sequence so far and returns the rest."""
        ids = list(ids)
        n = len(acc.tokens)
        if ids[:n] != acc.tokens:
            pos = next((j for j in range(min(n, len(ids))) if ids[j] != acc.tokens[j]), min(n, len(ids)))
            found = f"has {ids[pos]}" if pos < len(ids) else "ends there"
            raise ConvertError(
                f"turn {k}: {what} does not extend the tokens before it: first difference at position {pos} "
                f"({found}; the earlier turns have {acc.tokens[pos]}). The harness rebuilt the prompt (e.g. "
                "dropped earlier reasoning); send the sampled tokens back unchanged, or write each turn as its own "
                "rollout")
        return ids[n:]

    def place(delta: list[int], msgs: Sequence[Mapping[str, Any]], header_expected: bool) -> int:
        """place appends the new prompt tokens delta, one segment per message of msgs
        where message_start_ids tell them apart; it returns where the assistant header
        starts (the end of delta when there is none or it cannot be found)."""
        base = len(acc.tokens)
        acc.push(delta)
        end = len(acc.tokens)
        cuts = [base + j for j, t in enumerate(delta) if t in starts]
        header = end
        if header_expected and cuts:
            header = cuts[-1]
        elif header_expected and not msgs:
            header = base  # nothing but the header is new
        if not msgs:  # template tokens only: they close the previous segment
            if acc.segments:
                acc.segments[-1].end = header
            return header
        body = [c for c in cuts if c < header] or [base]
        if body[0] > base:  # e.g. "\n" after the previous turn's end token, or a BOS
            if acc.segments:
                acc.segments[-1].end = body[0]
            else:
                body[0] = base
        bounds = body + [header]
        pieces = list(zip(bounds, bounds[1:]))
        if len(pieces) == len(msgs):
            for (s, e), m in zip(pieces, msgs):
                acc.seg(s, e, *_message_segment([m], tool_names))
        else:
            acc.seg(body[0], header, *_message_segment(msgs, tool_names))
        return header

    prev = -1
    for k, (ai, turn) in enumerate(zip(asst, turns)):
        msg = messages[ai]
        delta = extend(k, "prompt_token_ids", turn.prompt_token_ids)
        header = place(delta, messages[prev + 1:ai], header_expected=True)
        prev = ai
        comp = list(turn.completion_token_ids)
        lps = turn.completion_logprobs
        if lps is not None and len(lps) != len(comp):
            raise ConvertError(f"turn {k}: {len(comp)} completion token ids but {len(lps)} log-probs")
        c0 = len(acc.tokens)
        acc.push(comp, lps)
        calls = list(msg.get("tool_calls") or [])
        names = [str((c.get("function") or {}).get("name") or c.get("name") or "") for c in calls]
        for c, n in zip(calls, names):
            if c.get("id"):
                tool_names[str(c["id"])] = n
        r = turn.reasoning_end
        if r is None and think_end_id is not None and think_end_id in comp:
            r = comp.index(think_end_id) + 1
        r = r or 0
        pieces: list[tuple[int, int, str, str | None]] = []  # completion-relative start, end, kind, tool
        if r:
            pieces.append((0, r, "reasoning", None))
        spans = list(turn.tool_call_spans or [])
        if spans and len(spans) != len(calls):
            raise ConvertError(f"turn {k}: {len(spans)} tool_call_spans but the message has {len(calls)} tool_calls")
        pos = r
        for (s, e), n in zip(spans, names):
            if not pos <= s < e <= len(comp):
                raise ConvertError(f"turn {k}: tool call span [{s}, {e}) is not after position {pos} and within "
                                   f"the {len(comp)} completion tokens")
            if s > pos:
                pieces.append((pos, s, "assistant", None))
            pieces.append((s, e, "tool_call", n or None))
            pos = e
        if pos < len(comp):
            if spans:
                s0, _, kind, tool = pieces[-1]
                pieces[-1] = (s0, len(comp), kind, tool)
            elif calls and not msg.get("content"):
                pieces.append((pos, len(comp), "tool_call", ",".join(n for n in names if n) or None))
            else:
                pieces.append((pos, len(comp), "assistant", None))
        fb = str(msg["feedback"]) if msg.get("feedback") else None
        if not pieces:
            acc.seg(header, c0, "assistant", feedback=fb)
            continue
        for j, (s, e, kind, tool) in enumerate(pieces):
            acc.seg(header if j == 0 else c0 + s, c0 + e, kind, tool=tool,
                    feedback=fb if j == len(pieces) - 1 else None)

    if final_token_ids is not None:
        delta = extend(len(turns), "final_token_ids", final_token_ids)
        place(delta, tail, header_expected=False)

    return Rollout(rollout_id=rollout_id, tokens=acc.tokens, logprobs=acc.logprobs, segments=acc.segments,
                   task_id=task_id, policy_version=policy_version, tokenizer=tokenizer, reward=reward,
                   feedback=feedback, temperature=temperature)
