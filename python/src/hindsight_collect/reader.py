"""Reading rollout files (Arrow IPC file or stream format) record batch by record batch,
with the Go reader's row-level problems."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ._gofmt import f32
from .problem import E_IO, E_NOT_ARROW, E_SEG_RANGE, E_TRUNCATED, Problem, RolloutFileError
from .rollout import Rollout, Segment
from .schema import check_schema
from .validate import _check, _dup_problem, _Row, _tokens_int32

_FILE_MAGIC = b"ARROW1"
_STREAM_CONTINUATION = b"\xff\xff\xff\xff"


@dataclass
class Row:
    """Row is one rollout read from a file: its 0-based row, the rollout (token ids and
    log-probs as Python lists; a null token id reads as None) and its problems (empty
    when the daemon would accept it, E_DUP_ROLLOUT aside)."""

    row: int
    rollout: Rollout
    problems: list[Problem]


def read_rollouts(path: str | os.PathLike[str], *, vocab_size: int = 0,
                  tokenizer: str | None = None) -> Iterator[Row]:
    """read_rollouts yields the rows of the rollout file at path, one record batch in
    memory at a time, each with the problems the Go reader finds. It raises
    RolloutFileError for a file-level problem (E_NOT_ARROW, E_TRUNCATED,
    E_MISSING_COLUMN, E_COLUMN_TYPE, E_SCHEMA_VERSION, E_IO)."""
    name = os.fspath(path)

    def fail(code: str, reason: str, column: str = "") -> RolloutFileError:
        return RolloutFileError(Problem(code, column, reason, file=name))

    try:
        with open(name, "rb") as f:
            head = f.read(8)
    except OSError as e:
        raise fail(E_IO, f"open file: {e}") from e
    if not head:
        raise fail(E_NOT_ARROW, "file is empty")
    try:
        source = pa.memory_map(name)
    except OSError as e:
        raise fail(E_IO, f"open file: {e}") from e
    with source:
        try:
            if head.startswith(_FILE_MAGIC):
                reader: Any = pa.ipc.open_file(source)
                batches: Iterator[pa.RecordBatch] = (reader.get_batch(i) for i in range(reader.num_record_batches))
            elif head.startswith(_STREAM_CONTINUATION):
                reader = pa.ipc.open_stream(source)
                batches = iter(reader)
            else:
                raise fail(E_NOT_ARROW, f"leading bytes {head!r} are neither the Arrow file magic nor a stream message")
        except (pa.ArrowInvalid, OSError) as e:
            raise fail(E_TRUNCATED, f"open arrow file: {e}") from e
        p = check_schema(reader.schema)
        if p is not None:
            p.file = name
            raise RolloutFileError(p)

        seen: dict[str, int] = {}
        base = 0
        while True:
            try:
                batch = next(batches)
            except StopIteration:
                return
            except (pa.ArrowInvalid, OSError) as e:
                raise fail(E_TRUNCATED, f"read batch after row {base}: {e}") from e
            for i, (ro, arrow_row) in enumerate(_decode(batch)):
                row = base + i
                ps = _check(arrow_row, vocab_size, tokenizer or "")
                dup = _dup_problem(ro.rollout_id, row, seen)
                if dup is not None:
                    ps.append(dup)
                for q in ps:
                    q.file, q.row = name, row
                yield Row(row, ro, ps)
            base += batch.num_rows


_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def _segment(s: dict[str, Any] | None, k: int, pre: list[Problem]) -> Segment:
    """_segment returns one segment struct as a Segment; a start or end beyond int32 is
    E_SEG_RANGE (in pre) and reads as -1, as the Go reader has it."""
    if s is None:
        return Segment(-1, -1, "")
    bounds = []
    for name in ("start", "end"):
        v = s[name]
        if v is not None and not _INT32_MIN <= v <= _INT32_MAX:
            pre.append(Problem(E_SEG_RANGE, "segments", f"segment {k}: {name} {v} does not fit in int32"))
            v = None
        bounds.append(-1 if v is None else v)
    return Segment(start=bounds[0], end=bounds[1], kind=s["kind"] or "", tool=s["tool"], status=s["status"],
                   feedback=s["feedback"])


def _decode(batch: pa.RecordBatch) -> Iterator[tuple[Rollout, _Row]]:
    """_decode yields each row of batch as a Rollout and as validation's _Row. Columns
    of any type check_schema accepts are read as the canonical ones: token ids as
    int32 (zero-copy slices of the batch when they are int32), log-probs as float32,
    reward rounded to float32."""
    col = batch.column
    ids, tasks, policy, toks = col("rollout_id"), col("task_id"), col("policy_version"), col("tokenizer")
    tokens, logprobs, segs = col("tokens"), col("logprobs"), col("segments")
    reward, feedback = col("reward"), col("feedback")
    temp = col("temperature") if "temperature" in batch.schema.names else None
    for i in range(batch.num_rows):
        t = tokens[i].values if tokens[i].is_valid else None
        lp = logprobs[i].values if logprobs[i].is_valid else None
        t32, bad = (None, None) if t is None else _tokens_int32(t)
        if lp is not None and not pa.types.is_float32(lp.type):
            lp = lp.cast(pa.float32(), safe=False)
        seg_list = segs[i].as_py()
        pre: list[Problem] = []
        segments = None if seg_list is None else [_segment(s, k, pre) for k, s in enumerate(seg_list)]
        rw = reward[i].as_py()
        tv = None if temp is None else temp[i].as_py()
        ro = Rollout(
            rollout_id=ids[i].as_py() or "", task_id=tasks[i].as_py(), policy_version=policy[i].as_py(),
            tokenizer=toks[i].as_py(), tokens=None if t is None else t.to_pylist(),
            logprobs=None if lp is None else lp.to_pylist(), segments=segments,
            reward=None if rw is None else f32(rw), feedback=feedback[i].as_py(),
            temperature=None if tv is None else f32(tv))
        yield ro, _Row(rollout_id=ro.rollout_id, tokenizer=ro.tokenizer, tokens=t32, logprobs=lp,
                       segments=segments, reward=ro.reward, feedback=ro.feedback,
                       temperature=ro.temperature, bad_tokens=bad,
                       decode_problems=pre)
