"""The shared vectors (testdata/vectors) through the Python validator, the Python reader,
and the Go CLI reading a file Python wrote."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import load_vectors

from hindsight_collect import ROW_CODES, Problem, Rollout, read_rollouts, record_batch, schema, validate_all

VECTORS = load_vectors()


def expected(v: dict[str, Any]) -> list[list[tuple[str, str, str]]]:
    return [[(p["code"], p["column"], p["reason"]) for p in row] for row in v["expect"]]


def by_row(problems: list[Problem], rows: int) -> list[list[tuple[str, str, str]]]:
    out: list[list[tuple[str, str, str]]] = [[] for _ in range(rows)]
    for p in problems:
        assert p.row is not None
        out[p.row].append((p.code, p.column, p.reason))
    return out


def write(path: Path, v: dict[str, Any], fmt: str = "file") -> None:
    batch = record_batch([Rollout.from_dict(r) for r in v["rollouts"]])
    with open(path, "wb") as f:
        w = pa.ipc.new_file(f, schema()) if fmt == "file" else pa.ipc.new_stream(f, schema())
        w.write_batch(batch)
        w.close()


def test_vectors_exist_and_cover_every_row_code() -> None:
    assert len(VECTORS) >= 20
    covered = {p["code"] for _, v in VECTORS for row in v["expect"] for p in row}
    assert ROW_CODES - {"E_DUP_ROLLOUT"} <= covered, sorted(ROW_CODES - covered)
    assert sum(1 for _, v in VECTORS if all(not row for row in v["expect"])) >= 3, "several valid shapes"


@pytest.mark.parametrize(("name", "v"), VECTORS, ids=[n for n, _ in VECTORS])
def test_validate(name: str, v: dict[str, Any]) -> None:
    opts = v.get("options", {})
    rollouts = [Rollout.from_dict(r) for r in v["rollouts"]]
    got = validate_all(rollouts, vocab_size=opts.get("vocab_size", 0), tokenizer=opts.get("tokenizer"))
    assert by_row(got, len(rollouts)) == expected(v), v["description"]


@pytest.mark.parametrize("fmt", ["file", "stream"])
@pytest.mark.parametrize(("name", "v"), VECTORS, ids=[n for n, _ in VECTORS])
def test_read_back(name: str, v: dict[str, Any], fmt: str, tmp_path: Path) -> None:
    path = tmp_path / "v.arrow"
    write(path, v, fmt)
    opts = v.get("options", {})
    rows = list(read_rollouts(path, vocab_size=opts.get("vocab_size", 0), tokenizer=opts.get("tokenizer")))
    assert [[(p.code, p.column, p.reason) for p in r.problems] for r in rows] == expected(v)
    for r, want in zip(rows, v["rollouts"]):
        assert r.rollout.rollout_id == (want.get("rollout_id") or "")
        assert r.rollout.tokens == want.get("tokens")


@pytest.mark.parametrize(("name", "v"), VECTORS, ids=[n for n, _ in VECTORS])
def test_go_reads_python_file(name: str, v: dict[str, Any], tmp_path: Path, go_bin: Path) -> None:
    """The Go CLI finds exactly the expected problems, worded as Problem.__str__ does."""
    path = tmp_path / f"{name}.arrow"
    write(path, v)
    opts = v.get("options", {})
    cmd = [str(go_bin / "hindsight"), "validate", "-vocab", str(opts.get("vocab_size", 0))]
    if opts.get("tokenizer"):
        cmd += ["-tokenizer", opts["tokenizer"]]
    res = subprocess.run(cmd + [str(path)], capture_output=True, text=True, timeout=60)
    want = []
    for row, (r, ps) in enumerate(zip(v["rollouts"], v["expect"])):
        for p in ps:
            want.append(str(Problem(p["code"], p["column"], p["reason"], rollout_id=r.get("rollout_id") or "",
                                    row=row, file=str(path))))
    assert res.stdout.splitlines() == want, res.stderr
    assert res.returncode == (1 if want else 0), res.stderr
