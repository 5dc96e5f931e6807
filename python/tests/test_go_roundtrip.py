"""Round trips with the real Go code: Python writes and Go reads; Go writes and Python reads."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest

from hindsight_collect import (
    BYTES_TOKENIZER,
    KINDS,
    POLICY_KINDS,
    RolloutBuilder,
    RolloutWriter,
    read_rollouts,
    schema,
    validate,
)
from hindsight_collect.rollout import Rollout


def agent_rollout(i: int, turns: int, rng: random.Random) -> Rollout:
    """agent_rollout is a byte-token agent trajectory built with RolloutBuilder."""
    b = RolloutBuilder()

    def text(n: int) -> list[int]:
        return [rng.randrange(32, 127) for _ in range(n)]

    def sampled(n: int) -> list[float | None]:
        return [-rng.expovariate(4.0) for _ in range(n)]

    b.add("system", text(60))
    b.add("user", text(40), feedback="the task was ambiguous" if i % 3 == 0 else None)
    for t in range(turns):
        hdr, body = text(3), text(rng.randrange(20, 200))
        b.add("reasoning", hdr + body, [None] * 3 + sampled(len(body)))
        call = text(30)
        b.add("tool_call", call, sampled(len(call)), tool="grep")
        b.add("tool_result", text(rng.randrange(50, 500)), tool="grep", status="error" if t % 2 else "ok")
    body = text(80)
    b.add("assistant", text(3) + body, [None] * 3 + sampled(len(body)))
    return b.build(f"py-{i:05d}", tokenizer=BYTES_TOKENIZER, task_id=f"task-{i // 2}", policy_version=i,
                   reward=[1.0, 0.0, None][i % 3], feedback=[None, 1, -1][i % 3])


def go_validate(go_bin: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(go_bin / "hindsight"), "validate", *args], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("fmt", ["file", "stream"])
def test_python_writes_go_reads(fmt: str, tmp_path: Path, go_bin: Path) -> None:
    rng = random.Random(7)
    rollouts = [agent_rollout(i, turns=1 + i % 5, rng=rng) for i in range(9)]
    with RolloutWriter(tmp_path, max_rows=4, batch_rows=3, format=fmt,  # type: ignore[arg-type]
                       vocab_size=256, tokenizer=BYTES_TOKENIZER) as w:
        for r in rollouts:
            w.write(r)
    assert len(w.published) == 3
    res = go_validate(go_bin, "-vocab", "256", "-tokenizer", BYTES_TOKENIZER, "-v", *map(str, w.published))
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.splitlines() == [f"{p}: ok ({n} rollouts)" for p, n in zip(w.published, [4, 4, 1])]


def test_python_writes_long_rollout_go_reads(tmp_path: Path, go_bin: Path) -> None:
    """One 120k-token rollout: large_list offsets, many segments, one Go read."""
    rng = random.Random(3)
    r = agent_rollout(0, turns=1, rng=rng)
    b = RolloutBuilder()
    for k in range(400):
        b.add("tool_result", [k % 256] * 200, tool="bash", status=0)
        b.add("tool_call", [7] * 100, [-0.5] * 100, tool="bash")
    r = b.build("long", tokenizer=BYTES_TOKENIZER)
    assert len(r.tokens or []) == 120_000
    with RolloutWriter(tmp_path) as w:
        w.write(r)
    res = go_validate(go_bin, "-vocab", "256", "-v", str(w.published[0]))
    assert res.returncode == 0, res.stdout + res.stderr


def test_go_rejects_what_python_refuses(tmp_path: Path, go_bin: Path) -> None:
    """A rollout the writer refuses, written anyway (validate=False), is rejected by Go
    with the same problem line."""
    bad = agent_rollout(0, turns=1, rng=random.Random(1))
    assert bad.segments is not None
    bad.segments[2].end = bad.segments[3].end + 5  # overlaps the tool call
    problems = validate(bad)
    assert [p.code for p in problems] == ["E_SEG_OVERLAP"]
    with RolloutWriter(tmp_path, validate=False) as w:
        w.write(bad)
    res = go_validate(go_bin, str(w.published[0]))
    assert res.returncode == 1
    problems[0].file, problems[0].row = str(w.published[0]), 0
    assert res.stdout.splitlines() == [str(problems[0])]


@pytest.mark.parametrize("fmt", ["file", "stream"])
def test_go_writes_python_reads(fmt: str, tmp_path: Path, go_bin: Path) -> None:
    out = tmp_path / "synth"
    res = subprocess.run([str(go_bin / "hindsight"), "synth", "-out", str(out), "-n", "4", "-tokens", "2000",
                          "-per-file", "2", "-format", fmt], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    files = sorted(out.glob("*.arrow"))
    assert [f.name for f in files] == ["synth-0000.arrow", "synth-0001.arrow"]
    if fmt == "file":
        assert pa.ipc.open_file(str(files[0])).schema.equals(schema(), check_metadata=True)
    rows = [row for f in files for row in read_rollouts(f, vocab_size=256, tokenizer=BYTES_TOKENIZER)]
    assert [r.rollout.rollout_id for r in rows] == [f"synth-{i:06d}" for i in range(4)]
    for row in rows:
        r = row.rollout
        assert row.problems == []
        assert validate(r, vocab_size=256, tokenizer=BYTES_TOKENIZER) == []
        assert r.tokenizer == BYTES_TOKENIZER and r.task_id == "synth-task-0000"
        assert r.tokens is not None and r.logprobs is not None and r.segments
        assert 1800 <= len(r.tokens) <= 2300 and len(r.logprobs) == len(r.tokens)
        kinds = [s.kind for s in r.segments]
        assert kinds[:2] == ["system", "user"] and kinds[-1] == "assistant" and set(kinds) <= set(KINDS)
        assert "tool_result" in kinds and "tool_call" in kinds
        # Segments tile the tokens; non-policy tokens and role headers are not sampled.
        assert r.segments[0].start == 0 and r.segments[-1].end == len(r.tokens)
        assert all(a.end == b.start for a, b in zip(r.segments, r.segments[1:]))
        for s in r.segments:
            lps = r.logprobs[s.start:s.end]
            if s.kind in POLICY_KINDS:
                assert any(x is not None for x in lps)
            else:
                assert all(x is None for x in lps)
            assert (s.status is not None) == (s.kind == "tool_result")
        assert bytes(r.tokens[:12]) == b"<|im_start|>"
        assert r.reward in (0.0, 1.0, None) and r.feedback in (-1, 1, None)
