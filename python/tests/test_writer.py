"""RolloutWriter: atomic publication, rolling, refusal of invalid rollouts."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

from hindsight_collect import (
    BYTES_TOKENIZER,
    Rollout,
    RolloutError,
    RolloutBuilder,
    RolloutWriter,
    Segment,
    read_rollouts,
    schema,
)


def rollout(i: int, n: int = 64) -> Rollout:
    toks = [(i + j) % 256 for j in range(n)]
    lps: list[float | None] = [None] * 4 + [-0.5] * (n - 4)
    return Rollout(rollout_id=f"r-{i:04d}", tokens=toks, logprobs=lps,
                   segments=[Segment(0, 4, "user"), Segment(4, n, "assistant")], task_id=f"t-{i // 4}",
                   policy_version=7, tokenizer=BYTES_TOKENIZER, reward=float(i % 2), feedback=None)


def names(d: Path) -> list[str]:
    return sorted(os.listdir(d))


def test_publish_on_close(tmp_path: Path) -> None:
    with RolloutWriter(tmp_path, prefix="c1", batch_rows=2) as w:
        for i in range(5):
            w.write(rollout(i))
        inc = tmp_path / "incoming"
        # Batches are on disk, but only under the .tmp name the daemon ignores.
        assert [n for n in names(inc) if not n.endswith(".arrow.tmp")] == []
        assert len(names(inc)) == 1
    assert [p.name for p in w.published] == names(inc)
    assert names(inc)[0].startswith("c1-") and names(inc)[0].endswith(".arrow")
    rows = list(read_rollouts(w.published[0], tokenizer=BYTES_TOKENIZER, vocab_size=256))
    assert [r.rollout.rollout_id for r in rows] == [f"r-{i:04d}" for i in range(5)]
    assert all(r.problems == [] for r in rows)
    assert rows[1].rollout == rollout(1)
    assert w.rows_written == 5
    w.close()  # twice is fine


def test_schema_is_canonical(tmp_path: Path) -> None:
    with RolloutWriter(tmp_path) as w:
        w.write(rollout(0))
    s = pa.ipc.open_file(str(w.published[0])).schema
    assert s.equals(schema(), check_metadata=True)
    assert s.metadata == {b"hindsight.schema_version": b"1"}
    assert str(s.field("tokens").type) == "large_list<item: int32>"
    assert str(s.field("logprobs").type) == "large_list<item: float>"
    assert not s.field("rollout_id").nullable


def test_roll_by_rows_and_bytes(tmp_path: Path) -> None:
    with RolloutWriter(tmp_path, max_rows=3, batch_rows=2) as w:
        for i in range(7):
            w.write(rollout(i))
    assert [sum(1 for _ in read_rollouts(p)) for p in w.published] == [3, 3, 1]

    d2 = tmp_path / "b"
    with RolloutWriter(d2, max_bytes=3000, batch_rows=1) as w2:
        for i in range(6):
            w2.write(rollout(i, n=400))  # ~3.2 kB of tokens and log-probs each
    assert len(w2.published) == 6
    assert len({p.name for p in w2.published}) == 6


def test_roll_by_age_and_explicit(tmp_path: Path) -> None:
    w = RolloutWriter(tmp_path, max_seconds=0.0)
    w.write(rollout(0))
    assert len(w.published) == 1
    w.max_seconds = None
    w.write(rollout(1))
    assert w.roll() is not None and w.roll() is None
    w.close()
    assert len(w.published) == 2


def test_stream_format(tmp_path: Path) -> None:
    with RolloutWriter(tmp_path, format="stream") as w:
        w.write(rollout(0))
        w.write(rollout(1))
    assert w.published[0].read_bytes()[:4] == b"\xff\xff\xff\xff"
    assert [r.rollout.rollout_id for r in read_rollouts(w.published[0])] == ["r-0000", "r-0001"]


def test_invalid_rollout_is_refused(tmp_path: Path) -> None:
    w = RolloutWriter(tmp_path, vocab_size=200, tokenizer=BYTES_TOKENIZER)
    bad = rollout(0, n=256)
    bad.logprobs = list(bad.logprobs or [])
    bad.logprobs[10] = float("nan")
    with pytest.raises(RolloutError) as e:
        w.write(bad)
    assert (e.value.code, e.value.column) == ("E_TOKEN_RANGE", "tokens")  # ids up to 255 ≥ 200
    assert [p.code for p in e.value.problems] == ["E_TOKEN_RANGE", "E_LOGPROB_NAN"]
    assert e.value.reason == "tokens[200] = 200 is not below the vocabulary size 200 (56 token ids out of range)"
    assert 'rollout_id "r-0000": column tokens: E_TOKEN_RANGE' in str(e.value)
    assert names(tmp_path / "incoming") == []  # nothing was written
    w.close()
    assert w.published == []


def test_duplicate_ids(tmp_path: Path) -> None:
    with RolloutWriter(tmp_path, prefix="dup") as w:
        w.write(rollout(0))
        w.write(rollout(1))
        with pytest.raises(RolloutError) as e:
            w.write(rollout(0))
        assert e.value.code == "E_DUP_ID"
        assert e.value.reason == 'rollout_id "r-0000" already appeared at row 0'
        first = w.roll()
        with pytest.raises(RolloutError) as e:
            w.write(rollout(1))
        assert e.value.code == "E_DUP_ROLLOUT"
        assert first is not None and first.name in e.value.reason
    assert len(w.published) == 1


def test_exception_in_block_publishes_written_rollouts(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError):
        with RolloutWriter(tmp_path) as w:
            w.write(rollout(0))
            raise RuntimeError("harness crashed")
    assert [n.endswith(".arrow") for n in names(tmp_path / "incoming")] == [True]


def test_abort_and_io_failure_leave_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = RolloutWriter(tmp_path, batch_rows=1)
    w.write(rollout(0))
    assert len(names(tmp_path / "incoming")) == 1  # the .tmp file
    w.abort()
    assert names(tmp_path / "incoming") == []

    w = RolloutWriter(tmp_path, batch_rows=1)
    w.write(rollout(0))

    def fail(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", fail)
    with pytest.raises(OSError):
        w.close()
    assert names(tmp_path / "incoming") == []
    monkeypatch.undo()
    # The id of a discarded file may be written again.
    with RolloutWriter(tmp_path) as w2:
        w2.write(rollout(0))
    assert len(w2.published) == 1


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        RolloutWriter(tmp_path, format="parquet")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        RolloutWriter(tmp_path, prefix="a/b")
    with RolloutWriter(tmp_path) as w:
        pass
    with pytest.raises(ValueError):
        w.write(rollout(0))


def test_caller_may_reuse_objects(tmp_path: Path) -> None:
    with RolloutWriter(tmp_path) as w:
        r = rollout(0)
        w.write(r)
        assert r.segments is not None and isinstance(r.tokens, list)
        r.segments[0].kind = "assistant"
        r.tokens[0] = 99
        r.rollout_id = "changed"
    got = next(read_rollouts(w.published[0])).rollout
    assert got == rollout(0)


def test_temperature(tmp_path: Path) -> None:
    """The sampling temperature is written as the optional temperature column (float32,
    null when unknown); a file without the column reads as None (scored at 1); a bad
    value is refused with the daemon's code and reason."""
    b = RolloutBuilder()
    b.add("user", [1, 2, 3])
    b.add("assistant", [4, 5, 6], [-0.1, -0.2, -0.3])
    with RolloutWriter(tmp_path) as w:
        w.write(b.build("t-07", tokenizer=BYTES_TOKENIZER, temperature=0.7))
        w.write(b.build("t-greedy", tokenizer=BYTES_TOKENIZER, temperature=0))
        w.write(b.build("t-none", tokenizer=BYTES_TOKENIZER))
    t = pa.ipc.open_file(str(w.published[0])).read_all()
    assert t.schema.field("temperature").type == pa.float32()
    assert t.column("temperature").to_pylist() == [pytest.approx(0.7), 0.0, None]
    rows = list(read_rollouts(w.published[0]))
    assert [r.problems for r in rows] == [[], [], []]
    assert [r.rollout.temperature for r in rows] == [pytest.approx(0.7), 0.0, None]

    old = t.drop_columns(["temperature"])  # a file written before the column
    path = tmp_path / "old.arrow"
    with pa.ipc.new_file(str(path), old.schema) as f:
        f.write_table(old)
    rows = list(read_rollouts(path))
    assert [r.problems for r in rows] == [[], [], []]
    assert [r.rollout.temperature for r in rows] == [None, None, None]

    with RolloutWriter(tmp_path / "bad") as w:
        for bad, shown in [(-0.5, "-0.5"), (float("nan"), "NaN"), (float("inf"), "+Inf")]:
            with pytest.raises(RolloutError) as e:
                w.write(b.build("t-bad", tokenizer=BYTES_TOKENIZER, temperature=bad))
            assert e.value.code == "E_TEMPERATURE" and e.value.column == "temperature"
            assert e.value.reason == f"temperature is {shown}; want a finite value ≥ 0 (0: greedy)"
