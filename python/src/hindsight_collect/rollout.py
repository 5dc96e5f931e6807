"""The rollout row of docs/design.md ("Rollout file") as Python values, and its JSON form."""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

SCHEMA_VERSION_KEY: Final = "hindsight.schema_version"
"""SCHEMA_VERSION_KEY is the schema metadata key that carries the file format version."""
SCHEMA_VERSION: Final = "1"
"""SCHEMA_VERSION is the file format version this package writes."""

BYTES_TOKENIZER: Final = "bytes-v1"
"""BYTES_TOKENIZER is the fingerprint of hindsight's embedded byte tokenizer (ids 0–255 are bytes, 256–264 specials)."""

KINDS: Final = ("system", "user", "assistant", "reasoning", "tool_call", "tool_result")
"""KINDS are the segment kinds of docs/design.md."""
POLICY_KINDS: Final = frozenset({"assistant", "reasoning", "tool_call"})
"""POLICY_KINDS are the kinds the policy produced: only they hold trainable tokens."""

STATUS_OK: Final = 0
"""STATUS_OK is the status of a tool segment that succeeded."""
STATUS_ERROR: Final = 1
"""STATUS_ERROR is the status of a tool segment that failed."""


_BYTES_TOKENIZER_JSON_SHA256: Final = "28a5a82ed9279ca8169aa1d78c94281eab51d970cfbb5d72759f18c0a75cce8b"
"""_BYTES_TOKENIZER_JSON_SHA256 is the sha256 of the tokenizer.json that hindsight writes
for its byte tokenizer (Go: data.BytesTokenizerJSON()); the daemon reads that file as
the byte tokenizer, whose fingerprint is bytes-v1."""


def fingerprint(tokenizer_json: str | os.PathLike[str] | bytes) -> str:
    """fingerprint returns the tokenizer fingerprint of docs/design.md that the daemon
    computes: "sha256:" + the hex sha256 of the tokenizer.json bytes, or "bytes-v1" for
    the tokenizer.json of hindsight's byte tokenizer. Pass a tokenizer.json path, a
    model directory holding one, or the file's bytes (never a re-serialised JSON: the
    hash is of the exact bytes)."""
    if isinstance(tokenizer_json, bytes):
        raw = tokenizer_json
    else:
        path = os.fspath(tokenizer_json)
        if os.path.isdir(path):
            path = os.path.join(path, "tokenizer.json")
        with open(path, "rb") as f:
            raw = f.read()
    digest = hashlib.sha256(raw).hexdigest()
    return BYTES_TOKENIZER if digest == _BYTES_TOKENIZER_JSON_SHA256 else "sha256:" + digest


@dataclass
class Segment:
    """Segment is a half-open token range [start, end) of a rollout with its role.

    status is 0 (ok) or 1 (error) for a tool segment, None otherwise. A null start or
    end read from a file is -1 and a null kind is "", as in the Go reader."""

    start: int
    end: int
    kind: str
    tool: str | None = None
    status: int | None = None
    feedback: str | None = None

    def __len__(self) -> int:
        return self.end - self.start


@dataclass
class Rollout:
    """Rollout is one row of a rollout file (docs/design.md, "Rollout file").

    tokens are the whole token sequence exactly as sampled; logprobs hold the sampler
    log-prob (nats) of each token, None where the policy did not sample it (role
    headers, prompts, tool output). tokens and logprobs may be any sequence pyarrow
    converts (lists, array.array, numpy arrays). None in an optional field is a null.
    temperature is the sampling temperature the policy's tokens were drawn at (0:
    greedy; None: unknown, which the trainer scores as 1): pass the request's."""

    rollout_id: str
    tokens: Sequence[int] | None
    logprobs: Sequence[float | None] | None = None
    segments: list[Segment] | None = field(default_factory=list)
    task_id: str | None = None
    policy_version: int | None = None
    tokenizer: str | None = None
    reward: float | None = None
    feedback: int | None = None
    temperature: float | None = None

    def trainable(self, i: int) -> bool:
        """trainable reports whether token i is a training target: inside an assistant,
        reasoning or tool_call segment and with a non-null log-prob."""
        if self.logprobs is None or self.logprobs[i] is None:
            return False
        for s in self.segments or ():
            if s.start <= i < s.end:
                return s.kind in POLICY_KINDS
        return False

    def to_dict(self) -> dict[str, Any]:
        """to_dict returns the JSON form of the rollout (the form of the shared test
        vectors): NaN and ±Inf as the strings "NaN", "Infinity", "-Infinity"."""
        return {
            "rollout_id": self.rollout_id,
            "task_id": self.task_id,
            "policy_version": self.policy_version,
            "tokenizer": self.tokenizer,
            "tokens": None if self.tokens is None else list(self.tokens),
            "logprobs": None if self.logprobs is None else [_json_float(x) for x in self.logprobs],
            "segments": None if self.segments is None else [
                {"start": s.start, "end": s.end, "kind": s.kind, "tool": s.tool, "status": s.status,
                 "feedback": s.feedback} for s in self.segments],
            "reward": _json_float(self.reward),
            "feedback": self.feedback,
            "temperature": _json_float(self.temperature),
        }

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> Rollout:
        """from_dict builds a rollout from its JSON form (to_dict). A missing key is a
        null; a null rollout_id becomes "" (the Go reader reads it so)."""
        segs = d.get("segments")
        return Rollout(
            rollout_id=d.get("rollout_id") or "",
            task_id=d.get("task_id"),
            policy_version=d.get("policy_version"),
            tokenizer=d.get("tokenizer"),
            tokens=d.get("tokens"),
            logprobs=None if d.get("logprobs") is None else [_from_json_float(x) for x in d["logprobs"]],
            segments=None if segs is None else [_segment_from_dict(s) for s in segs],
            reward=_from_json_float(d.get("reward")),
            feedback=d.get("feedback"),
            temperature=_from_json_float(d.get("temperature")),
        )


def _segment_from_dict(s: Mapping[str, Any] | None) -> Segment:
    if s is None:  # a null struct element reads as an all-null segment
        return Segment(-1, -1, "")
    start, end = s.get("start"), s.get("end")
    return Segment(start=-1 if start is None else int(start), end=-1 if end is None else int(end),
                   kind=s.get("kind") or "", tool=s.get("tool"), status=s.get("status"),
                   feedback=s.get("feedback"))


def _json_float(x: float | None) -> float | str | None:
    if x is None:
        return None
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def _from_json_float(x: float | str | None) -> float | None:
    if x is None:
        return None
    if isinstance(x, str):
        if x not in ("NaN", "Infinity", "-Infinity"):
            raise ValueError(f"parse float: {x!r} is not a number, NaN, Infinity or -Infinity")
        return float(x.replace("Infinity", "inf"))
    return float(x)
