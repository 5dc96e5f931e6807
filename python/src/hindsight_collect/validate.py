"""Validation of rollouts: the checks of Go's rollout.Validate and its reader, with the
same codes, columns and reason wording, so a collector learns about a bad rollout when
it writes it, not when the daemon rejects it.

Token and log-prob checks run vectorised on Arrow arrays (rollouts are 100k+ tokens);
segments are few and are checked in Python.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute

from ._gofmt import f32, go_float32, go_quote
from .problem import (
    E_DUP_ID,
    E_EMPTY_ID,
    E_FEEDBACK_RANGE,
    E_LEN_MISMATCH,
    E_LOGPROB_INF,
    E_LOGPROB_NAN,
    E_LOGPROB_POSITIVE,
    E_NULL_TOKENS,
    E_REWARD_NAN,
    E_SEG_KIND,
    E_SEG_ORDER,
    E_SEG_OVERLAP,
    E_SEG_RANGE,
    E_SEG_STATUS,
    E_TEMPERATURE,
    E_TOKEN_RANGE,
    E_TOKENIZER,
    Problem,
)
from .rollout import KINDS, Rollout, Segment

_INT32_MAX = 2**31 - 1

pc: Any = pyarrow.compute  # the stubs' overloads do not cover array-vs-int comparisons


@dataclass
class _Row:
    """_Row is a rollout as validation sees it: token and log-prob columns as Arrow
    arrays (float32 values, nulls kept), reward rounded to float32."""

    rollout_id: str
    tokenizer: str | None
    tokens: pa.Array[Any] | None  # int32, may hold nulls when read from a file
    logprobs: pa.Array[Any] | None  # float32
    segments: list[Segment] | None
    reward: float | None
    feedback: int | None
    temperature: float | None = None
    bad_tokens: list[tuple[int, int]] | None = None  # (position, id) of ids outside int32
    decode_problems: list[Problem] | None = None  # what reading the Arrow data found (segment bounds beyond int32)


def _tokens_array(tokens: Sequence[int] | None) -> tuple[pa.Array[Any] | None, list[tuple[int, int]] | None]:
    """_tokens_array converts token ids to an int32 array. Ids that do not fit int32
    are returned apart (as E_TOKEN_RANGE) and written as 0 in the array."""
    if tokens is None:
        return None, None
    if isinstance(tokens, pa.Array):
        return _tokens_int32(tokens if pa.types.is_int32(tokens.type) else tokens.cast(pa.int64()))
    try:
        return pa.array(tokens, pa.int32()), None
    except (pa.ArrowInvalid, OverflowError):
        pass
    bad: list[tuple[int, int]] = []
    fixed: list[int | None] = []
    for i, t in enumerate(tokens):
        if t is not None and not -_INT32_MAX - 1 <= int(t) <= _INT32_MAX:
            bad.append((i, int(t)))
            fixed.append(0)
        else:
            fixed.append(t)
    return pa.array(fixed, pa.int32()), bad


def _tokens_int32(t: pa.Array[Any]) -> tuple[pa.Array[Any], list[tuple[int, int]] | None]:
    """_tokens_int32 returns int32 or int64 token ids as int32, as the Go reader converts
    them: int32 as it is; int64 range-checked, with the ids that do not fit int32
    returned apart (E_TOKEN_RANGE) and read as 0."""
    if pa.types.is_int32(t.type):
        return t, None
    mask = pc.fill_null(pc.or_(pc.less(t, -_INT32_MAX - 1), pc.greater(t, _INT32_MAX)), False)
    if not pc.any(mask).as_py():
        return t.cast(pa.int32()), None
    bad = [(i, int(t[i].as_py())) for i, m in enumerate(mask.to_pylist()) if m]
    return pc.if_else(mask, 0, t).cast(pa.int32()), bad


def _logprobs_array(logprobs: Sequence[float | None] | None) -> pa.Array[Any] | None:
    if logprobs is None:
        return None
    if isinstance(logprobs, pa.Array):
        return logprobs if logprobs.type == pa.float32() else logprobs.cast(pa.float32())
    return pa.array(logprobs, pa.float32(), from_pandas=False)


def _row(r: Rollout) -> _Row:
    toks, bad = _tokens_array(r.tokens)
    return _Row(rollout_id=r.rollout_id or "", tokenizer=r.tokenizer, tokens=toks,
                logprobs=_logprobs_array(r.logprobs), segments=r.segments,
                reward=None if r.reward is None else f32(r.reward), feedback=r.feedback,
                temperature=None if r.temperature is None else f32(r.temperature), bad_tokens=bad)


def validate(rollout: Rollout, *, vocab_size: int = 0, tokenizer: str | None = None) -> list[Problem]:
    """validate checks one rollout as the daemon does and returns its problems (empty
    when it is valid), each with code, column, reason and rollout_id.

    vocab_size > 0 rejects token ids ≥ it (negative ids are always rejected); a
    non-empty tokenizer is the model's fingerprint, which a non-null tokenizer value
    must equal. E_DUP_ID needs more than one rollout: see validate_all."""
    return _check(_row(rollout), vocab_size, tokenizer or "")


def validate_all(rollouts: Iterable[Rollout], *, vocab_size: int = 0,
                 tokenizer: str | None = None) -> list[Problem]:
    """validate_all checks rollouts as the rows of one file: each problem carries its
    row, and a rollout_id seen before is E_DUP_ID on its second and later rows."""
    out: list[Problem] = []
    seen: dict[str, int] = {}
    for row, r in enumerate(rollouts):
        ps = validate(r, vocab_size=vocab_size, tokenizer=tokenizer)
        dup = _dup_problem(r.rollout_id, row, seen)
        if dup is not None:
            ps.append(dup)
        for p in ps:
            p.row = row
        out.extend(ps)
    return out


def _dup_problem(rollout_id: str, row: int, seen: dict[str, int]) -> Problem | None:
    if not rollout_id:
        return None
    first = seen.setdefault(rollout_id, row)
    if first == row:
        return None
    return Problem(E_DUP_ID, "rollout_id", f"rollout_id {go_quote(rollout_id)} already appeared at row {first}",
                   rollout_id=rollout_id)


class _Problems:
    """_Problems collects problems; like Go's validation, a code reported through hit
    gives one problem naming its first occurrence and counting the rest."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.more: dict[str, int] = {}

    def add(self, code: str, column: str, reason: str) -> None:
        self.problems.append(Problem(code, column, reason))

    def hit(self, code: str, column: str, reason: str) -> None:
        if any(p.code == code for p in self.problems):
            self.more[code] = self.more.get(code, 0) + 1
        else:
            self.add(code, column, reason)

    def finish(self) -> None:
        for p in self.problems:
            n = self.more.pop(p.code, 0)
            if n:
                p.reason += f" (and {n} more)"


def _check(r: _Row, vocab_size: int, tokenizer: str) -> list[Problem]:
    # What the Go reader finds while decoding the Arrow data, before Validate runs.
    pre: list[Problem] = []
    if r.tokens is not None and r.tokens.null_count > 0:
        nulls = pc.fill_null(pc.is_null(r.tokens), False)
        first = pc.index(nulls, True).as_py()
        pre.append(Problem(E_TOKEN_RANGE, "tokens", f"tokens[{first}] is null ({r.tokens.null_count} null token ids)"))
    pre.extend(r.decode_problems or ())
    for k, s in enumerate(r.segments or ()):
        if s.status == -1:
            pre.append(Problem(E_SEG_STATUS, "segments",
                               f"segment {k} [{s.start}, {s.end}): status -1; want null, 0 (ok) or 1 (error)"))

    v = _Problems()
    if not r.rollout_id:
        v.add(E_EMPTY_ID, "rollout_id", "rollout_id is null or empty")
    if r.tokenizer and tokenizer and r.tokenizer != tokenizer:
        v.add(E_TOKENIZER, "tokenizer", f"tokenizer is {go_quote(r.tokenizer)}, the model's is {go_quote(tokenizer)}: "
              "its token ids would mean other text to this model")
    if r.tokens is None:
        v.add(E_NULL_TOKENS, "tokens", "tokens is null")
    if r.tokens is not None and r.logprobs is not None and len(r.logprobs) != len(r.tokens):
        v.add(E_LEN_MISMATCH, "logprobs", f"tokens has {len(r.tokens)} elements, logprobs has {len(r.logprobs)}")
    _check_tokens(v, r, vocab_size)
    _check_logprobs(v, r.logprobs)
    _check_segments(v, r)
    if r.feedback is not None and not -1 <= r.feedback <= 1:
        v.add(E_FEEDBACK_RANGE, "feedback", f"feedback is {r.feedback}; want -1, 0 or +1")
    if r.reward is not None and (math.isnan(r.reward) or math.isinf(r.reward)):
        v.add(E_REWARD_NAN, "reward", f"reward is {go_float32(r.reward)}")
    t = r.temperature
    if t is not None and (math.isnan(t) or math.isinf(t) or t < 0):
        v.add(E_TEMPERATURE, "temperature", f"temperature is {go_float32(t)}; want a finite value ≥ 0 (0: greedy)")
    out = pre + v.problems
    for p in out:
        p.rollout_id = r.rollout_id
    return out


def _check_tokens(v: _Problems, r: _Row, vocab_size: int) -> None:
    toks = r.tokens
    if toks is None or (len(toks) == 0 and not r.bad_tokens):
        return
    limit = vocab_size if 0 < vocab_size < _INT32_MAX else 2**31
    mm = pc.min_max(toks).as_py()
    in_range = mm["min"] is None or (mm["min"] >= 0 and mm["max"] < limit)
    if in_range and not r.bad_tokens:
        return
    mask = pc.fill_null(pc.or_(pc.less(toks, 0), pc.greater_equal(toks, limit)), False)
    count = int(pc.sum(mask).as_py() or 0)
    first = int(pc.index(mask, True).as_py()) if count else -1
    t = toks[first].as_py() if count else 0
    for i, big in r.bad_tokens or ():  # ids beyond int32: only a Python caller can make them
        count += 1
        if first < 0 or i < first:
            first, t = i, big
    if t > _INT32_MAX or t < -_INT32_MAX - 1:
        reason = f"tokens[{first}] = {t} does not fit in int32"
    elif t < 0:
        reason = f"tokens[{first}] = {t} is negative"
    else:
        reason = f"tokens[{first}] = {t} is not below the vocabulary size {vocab_size}"
    if count > 1:
        reason += f" ({count} token ids out of range)"
    v.add(E_TOKEN_RANGE, "tokens", reason)


def _check_logprobs(v: _Problems, lp: pa.Array[Any] | None) -> None:
    if lp is None or len(lp) == 0:
        return
    nan = pc.fill_null(pc.is_nan(lp), False)
    inf = pc.fill_null(pc.is_inf(lp), False)
    pos = pc.fill_null(pc.and_(pc.greater(lp, 0), pc.invert(inf)), False)
    found: list[tuple[int, int, str, str]] = []  # first position, count, code, reason
    for mask, code in ((nan, E_LOGPROB_NAN), (inf, E_LOGPROB_INF), (pos, E_LOGPROB_POSITIVE)):
        n = int(pc.sum(mask).as_py() or 0)
        if n == 0:
            continue
        i = int(pc.index(mask, True).as_py())
        x = lp[i].as_py()
        reason = {E_LOGPROB_NAN: f"logprobs[{i}] = NaN", E_LOGPROB_INF: f"logprobs[{i}] = {go_float32(x)}",
                  E_LOGPROB_POSITIVE: f"logprobs[{i}] = {go_float32(x)} is positive"}[code]
        if n > 1:
            reason += f" (and {n - 1} more)"
        found.append((i, n, code, reason))
    for _, _, code, reason in sorted(found):  # in order of first occurrence, as Go reports them
        v.add(code, "logprobs", reason)


def _check_segments(v: _Problems, r: _Row) -> None:
    segs = r.segments or []
    n = len(r.tokens) if r.tokens is not None else 0
    max_end, max_end_seg = -(2**31), -1
    for k, s in enumerate(segs):
        span = f"segment {k} [{s.start}, {s.end})"
        if s.start < 0:
            v.hit(E_SEG_RANGE, "segments", f"{span}: start < 0 (or null)")
        elif r.tokens is not None and s.end > n:
            v.hit(E_SEG_RANGE, "segments", f"{span}: end > {n} tokens")
        elif s.start >= s.end:
            v.hit(E_SEG_RANGE, "segments", f"{span}: start >= end")
        if k > 0:
            prev = segs[k - 1]
            if s.start < prev.start:
                v.hit(E_SEG_ORDER, "segments", f"{span} starts before segment {k - 1} [{prev.start}, {prev.end})")
            elif s.start < max_end:
                o = segs[max_end_seg]
                v.hit(E_SEG_OVERLAP, "segments", f"{span} overlaps segment {max_end_seg} [{o.start}, {o.end})")
        if s.end > max_end:
            max_end, max_end_seg = s.end, k
        if not s.kind:
            v.hit(E_SEG_KIND, "segments", f"{span}: kind is null")
        elif s.kind not in KINDS:
            v.hit(E_SEG_KIND, "segments", f"{span}: unknown kind {go_quote(s.kind)}")
        if s.status not in (None, -1, 0, 1):
            v.hit(E_SEG_STATUS, "segments", f"{span}: status {s.status}; want null, 0 (ok) or 1 (error)")
    v.finish()
