"""Validation details the vectors cannot hold, and file-level problems."""

from __future__ import annotations

import subprocess
from array import array
from pathlib import Path

import pyarrow as pa
import pytest

from hindsight_collect import (
    Rollout,
    RolloutFileError,
    Segment,
    read_rollouts,
    record_batch,
    schema,
    validate,
)
from hindsight_collect._gofmt import go_float32, go_quote


@pytest.mark.parametrize(("x", "want"), [
    (0.5, "0.5"), (2.0, "2"), (1e-45, "1e-45"), (1234567.0, "1.234567e+06"), (123456.0, "123456"),
    (0.0001, "0.0001"), (0.00001, "1e-05"), (-0.0, "-0"), (3.4028234663852886e38, "3.4028235e+38"),
    (0.1, "0.1"), (float("inf"), "+Inf"), (float("-inf"), "-Inf"), (float("nan"), "NaN"),
])
def test_go_float32(x: float, want: str) -> None:
    assert go_float32(x) == want


def test_go_quote() -> None:
    assert go_quote('a"b\\c\n\x01é😀\u200b') == '"a\\"b\\\\c\\n\\x01é😀\\u200b"'


def test_inputs_of_other_types() -> None:
    r = Rollout("x", tokens=array("i", [1, 2, 3]), logprobs=pa.array([None, -1.0, -2.0], pa.float64()),  # type: ignore[arg-type]
                segments=[Segment(0, 3, "assistant")])
    assert validate(r) == []
    r.tokens = pa.array([1, -2, 3], pa.int64())  # type: ignore[assignment]
    assert [p.reason for p in validate(r)] == ["tokens[1] = -2 is negative"]


def test_token_ids_beyond_int32() -> None:
    r = Rollout("x", tokens=[1, 2**31, 5, -(2**40)])
    ps = validate(r, vocab_size=4)
    assert [(p.code, p.reason) for p in ps] == [
        ("E_TOKEN_RANGE", "tokens[1] = 2147483648 does not fit in int32 (3 token ids out of range)")]


def test_problem_text() -> None:
    ps = validate(Rollout("", tokens=None))
    assert [str(p) for p in ps] == ["column rollout_id: E_EMPTY_ID: rollout_id is null or empty",
                                    "column tokens: E_NULL_TOKENS: tokens is null"]
    ps = validate(Rollout("r", tokens=[1], feedback=3))
    assert str(ps[0]) == 'rollout_id "r": column feedback: E_FEEDBACK_RANGE: feedback is 3; want -1, 0 or +1'


def write_table(path: Path, table: pa.Table) -> None:
    with pa.ipc.new_file(str(path), table.schema) as w:
        w.write_table(table)


def file_cases(tmp_path: Path) -> list[tuple[Path, str, str]]:
    """file_cases writes files with file-level problems: (path, code, reason or "")."""
    good = pa.Table.from_batches([record_batch([Rollout("a", tokens=[1])])])
    cases = []
    p = tmp_path / "missing.arrow"
    write_table(p, good.drop_columns(["logprobs"]))
    cases.append((p, "E_MISSING_COLUMN", "column logprobs (large_list<float32>) is missing"))
    p = tmp_path / "type.arrow"
    t = good.set_column(4, pa.field("tokens", pa.list_(pa.float32())), pa.array([[1]], pa.list_(pa.float32())))
    write_table(p, t)
    cases.append((p, "E_COLUMN_TYPE", "column tokens: expected large_list<int32> (or list, large_list, list_view or "
                  "large_list_view of int32 or int64), found list<float32>"))
    p = tmp_path / "idtype.arrow"
    write_table(p, good.set_column(0, pa.field("rollout_id", pa.binary()), pa.array([b"a"], pa.binary())))
    cases.append((p, "E_COLUMN_TYPE", "column rollout_id: expected utf8 (or utf8, large_utf8, utf8_view or a "
                  "dictionary of these), found binary"))
    p = tmp_path / "equivalent.arrow"
    write_table(p, good.set_column(4, pa.field("tokens", pa.list_(pa.int64())), pa.array([[1]], pa.list_(pa.int64()))))
    cases.append((p, "", ""))  # list<int64> tokens are read as large_list<int32>
    p = tmp_path / "version.arrow"
    write_table(p, good.replace_schema_metadata({"hindsight.schema_version": "2"}))
    cases.append((p, "E_SCHEMA_VERSION", 'schema metadata hindsight.schema_version is "2", this reader reads "1"'))
    p = tmp_path / "noversion.arrow"
    write_table(p, good.replace_schema_metadata(None))
    cases.append((p, "", ""))  # read as version 1
    p = tmp_path / "text.arrow"
    p.write_text("rollout_id,tokens\n")
    cases.append((p, "E_NOT_ARROW", ""))
    p = tmp_path / "empty.arrow"
    p.write_bytes(b"")
    cases.append((p, "E_NOT_ARROW", "file is empty"))
    p = tmp_path / "cut.arrow"
    write_table(p, good)
    p.write_bytes(p.read_bytes()[:-40])
    cases.append((p, "E_TRUNCATED", ""))
    return cases


def test_file_level_problems(tmp_path: Path) -> None:
    for path, code, reason in file_cases(tmp_path):
        if not code:
            assert [r.problems for r in read_rollouts(path)] == [[]]
            continue
        with pytest.raises(RolloutFileError) as e:
            list(read_rollouts(path))
        assert e.value.code == code, path
        if reason:
            assert e.value.reason == reason


def test_file_level_problems_match_go(tmp_path: Path, go_bin: Path) -> None:
    for path, code, reason in file_cases(tmp_path):
        res = subprocess.run([str(go_bin / "hindsight"), "validate", str(path)], capture_output=True, text=True,
                             timeout=60)
        if not code:
            assert res.returncode == 0, res.stdout
            continue
        assert f": {code}: " in res.stdout, (path, res.stdout)
        if reason:
            assert res.stdout.rstrip("\n").endswith(f"{code}: {reason}"), res.stdout


def test_schema_matches_go_field_by_field() -> None:
    s = schema()
    assert s.names == ["rollout_id", "task_id", "policy_version", "tokenizer", "tokens", "logprobs", "segments",
                       "reward", "feedback", "temperature"]
    assert str(s.field("segments").type) == (
        "list<item: struct<start: int32, end: int32, kind: string, tool: string, status: int8, feedback: string>>")
