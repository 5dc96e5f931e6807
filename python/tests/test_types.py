"""The equivalent column types other Arrow writers produce: read as the canonical
schema, by this package and by the Go reader alike."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from hindsight_collect import Rollout, Segment, read_rollouts, record_batch


def rollouts() -> list[Rollout]:
    segs = [Segment(0, 2, "user"), Segment(2, 5, "assistant"), Segment(5, 6, "tool_result", tool="grep", status=1)]
    return [Rollout("a", task_id="t", policy_version=3, tokens=[1, 2, 3, 4, 5, 6],
                    logprobs=[None, None, -0.5, -0.25, -1.0, None], segments=segs, reward=0.5, feedback=-1),
            Rollout("b", tokens=[7, 8], logprobs=None, segments=[Segment(0, 2, "assistant")])]


def retyped(table: pa.Table, types: dict[str, pa.DataType]) -> pa.Table:
    """retyped casts the columns named in types (dictionary types by encoding)."""
    for name, t in types.items():
        i = table.schema.get_field_index(name)
        col: Any = table.column(i)
        if pa.types.is_dictionary(t):
            col = col.cast(t.value_type).dictionary_encode()
        elif pa.types.is_list_view(t) or pa.types.is_large_list_view(t):  # arrow does not cast lists to views
            col = pa.array(col.to_pylist(), t)
        else:
            col = col.cast(t)
        table = table.set_column(i, pa.field(name, col.type), col)
    return table


def seg_type(it: pa.DataType, st: pa.DataType) -> pa.DataType:
    return pa.struct([pa.field("start", it), pa.field("end", it), pa.field("kind", st), pa.field("tool", st),
                      pa.field("status", it), pa.field("feedback", st)])


EQUIVALENT: dict[str, dict[str, pa.DataType]] = {
    "pyarrow defaults": {"tokens": pa.list_(pa.int64()), "logprobs": pa.list_(pa.float64()), "reward": pa.float64(),
                         "feedback": pa.int64(), "segments": pa.list_(seg_type(pa.int64(), pa.utf8()))},
    "large": {"rollout_id": pa.large_utf8(), "task_id": pa.large_utf8(), "tokens": pa.large_list(pa.int64()),
              "segments": pa.large_list(seg_type(pa.int32(), pa.large_utf8()))},
    "views": {"rollout_id": pa.string_view(), "tokens": pa.list_view(pa.int32()),
              "logprobs": pa.large_list_view(pa.float64()), "policy_version": pa.uint32()},
    "dictionary": {"rollout_id": pa.dictionary(pa.int32(), pa.utf8()), "tokenizer": pa.dictionary(pa.int8(), pa.large_utf8()),
                   "feedback": pa.int16()},
}


def write(path: Path, table: pa.Table, stream: bool) -> None:
    with (pa.ipc.new_stream if stream else pa.ipc.new_file)(str(path), table.schema) as w:
        w.write_table(table, max_chunksize=1)


@pytest.mark.parametrize("name", sorted(EQUIVALENT))
@pytest.mark.parametrize("stream", [False, True])
def test_equivalent_types(tmp_path: Path, name: str, stream: bool) -> None:
    table = pa.Table.from_batches([record_batch(rollouts())])
    want = [(r.rollout, r.problems) for r in read_rollouts(write_and(tmp_path / "c.arrow", table, stream))]
    got = [(r.rollout, r.problems) for r in read_rollouts(write_and(tmp_path / "t.arrow", retyped(table, EQUIVALENT[name]),
                                                                   stream))]
    assert got == want
    assert all(not p for _, p in got)


def write_and(path: Path, table: pa.Table, stream: bool) -> Path:
    write(path, table, stream)
    return path


def test_int64_token_beyond_int32(tmp_path: Path, go_bin: Path) -> None:
    table = retyped(pa.Table.from_batches([record_batch(rollouts())]), EQUIVALENT["pyarrow defaults"])
    toks = pa.array([[1, 2, 2**32, 4, 5, 6], [7, 8]], pa.list_(pa.int64()))
    table = table.set_column(table.schema.get_field_index("tokens"), pa.field("tokens", toks.type), toks)
    path = write_and(tmp_path / "big.arrow", table, False)
    rows = list(read_rollouts(path))
    assert [(p.code, p.row, p.reason) for p in rows[0].problems] == [
        ("E_TOKEN_RANGE", 0, "tokens[2] = 4294967296 does not fit in int32")]
    assert rows[1].problems == []
    res = subprocess.run([str(go_bin / "hindsight"), "validate", str(path)], capture_output=True, text=True, timeout=60)
    assert "row 0" in res.stdout and "E_TOKEN_RANGE: tokens[2] = 4294967296 does not fit in int32" in res.stdout, res.stdout
