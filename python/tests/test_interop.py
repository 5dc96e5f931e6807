"""The interop suite (rollout/testdata/interop, docs/rollouts.md "Interop") read by this package:
the same verdicts as the Go reader's TestInterop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import REPO
from hindsight_collect import RolloutFileError, read_rollouts

INTEROP = REPO / "rollout" / "testdata" / "interop"
SPEC = json.loads((INTEROP / "cases.json").read_text())
CODES = {m["name"]: m["code"] for m in SPEC["malformed"]}
FILES = sorted(p for p in INTEROP.glob("*/*.arrow") if "node_modules" not in p.parts)
PYARROW_CANNOT = {
    "java/valid.file.lz4.arrow": "pyarrow 26 cannot decompress the LZ4 buffers Arrow Java 18.3 writes for a batch "
                                 "whose lists are empty or null ('Lz4 compressed input contains less than one frame'); "
                                 "the Go reader reads them",
}
PYARROW_CANNOT["java/valid.stream.lz4.arrow"] = PYARROW_CANNOT["java/valid.file.lz4.arrow"]


def test_suite_is_there() -> None:
    writers = {p.parent.name for p in FILES}
    assert {"pyarrow", "js", "arrow-go", "polars", "duckdb", "java", "arrow-rs"} <= writers


@pytest.mark.parametrize("path", FILES, ids=[f"{p.parent.name}/{p.name}" for p in FILES])
def test_interop_file(path: Path) -> None:
    why = PYARROW_CANNOT.get(f"{path.parent.name}/{path.name}")
    if why is not None:
        with pytest.raises(RolloutFileError, match="less than one frame"):
            list(read_rollouts(path))
        pytest.xfail(why)
    rows = list(read_rollouts(path, vocab_size=512, tokenizer="bytes-v1"))
    assert len(rows) == len(SPEC["rollouts"])
    case = path.name.split(".")[0]
    if case.startswith("valid"):
        want = list(read_rollouts(INTEROP / "pyarrow" / "valid.file.arrow"))
        assert [r.problems for r in rows] == [[]] * len(rows)
        assert [r.rollout for r in rows] == [r.rollout for r in want]
        return
    for r in rows:
        if r.row != SPEC["row"]:
            assert r.problems == [], r.problems
        else:
            assert r.problems and {p.code for p in r.problems} == {CODES[case]}, r.problems
