"""pyarrow reads the credit files (schema v4) that the real hindsightd writes: a run with
credit.distill.mode topk records, per hint, what the teacher saw, the loss it trained
with, the teacher's log-prob of each sampled token and its top alternatives (v3), and
per rollout the sampling temperature the collector wrote, which it was scored at (v4)."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from test_daemon_e2e import Daemon, wait_files
from test_go_roundtrip import agent_rollout

from hindsight_collect import BYTES_TOKENIZER, RolloutWriter

HINT_V3_FIELDS = {
    "context": pa.string(),
    "loss_mode": pa.string(),
    "divergence": pa.string(),
    "jsd_alpha": pa.float32(),
    "teacher_logprobs": pa.list_(pa.float32()),
    "top_ids": pa.list_(pa.list_(pa.int32())),
    "top_logprobs": pa.list_(pa.list_(pa.float32())),
}


def read_credit(path: Path) -> pa.Table:
    with pa.memory_map(str(path)) as src:
        return ipc.open_file(src).read_all()


def test_daemon_writes_credit_v3(tmp_path: Path, go_bin: Path) -> None:
    data = tmp_path / "data"
    cfg = tmp_path / "hindsightd.yaml"
    cfg.write_text("train:\n  token_budget: 256\n  idle_flush: 500ms\n  checkpoint:\n    every_steps: 1\n"
                   "credit:\n  distill:\n    mode: topk\n    top_k: 8\n    topk_ids: teacher\n")
    # Teacher-side ids, so the recorded alternatives are the teacher's own top k and the
    # taken token's teacher log-prob is at most the best of them (checked below); the
    # student-side default is checked by Go's TestDistillTopKCreditFiles.
    d = Daemon(go_bin / "hindsightd", data, "-config", str(cfg))
    try:
        d.wait_ready()
        rng = random.Random(11)
        with RolloutWriter(data / "spool", prefix="v3", tokenizer=BYTES_TOKENIZER, vocab_size=256) as w:
            for i in range(3):
                ro = agent_rollout(i, turns=2, rng=rng)
                ro.temperature = [0.7, None, 0.0][i]  # the request's; unknown; greedy
                w.write(ro)
        wait_files(data / "spool" / "done", 1, d)  # its credit file is published first
    finally:
        code = d.stop()
    assert code == 0, d.log()

    names = sorted(p.name for p in (data / "outputs").glob("*.credit.arrow"))
    assert len(names) == 1, names
    table = read_credit(data / "outputs" / names[0])
    assert table.schema.metadata[b"hindsight.credit_schema_version"] == b"4"
    assert table.schema.field("temperature").type == pa.float32()
    temps = dict(zip(table.column("rollout_id").to_pylist(), table.column("temperature").to_pylist()))
    # Scored at the collector's temperature; at 1 without one, and for greedy (0).
    assert temps == {"py-00000": pytest.approx(0.7), "py-00001": 1.0, "py-00002": 1.0}, temps
    hint_type = table.schema.field("hints").type.value_type
    for name, typ in HINT_V3_FIELDS.items():
        assert hint_type.field(name).type == typ, name
    rows: list[dict[str, Any]] = table.to_pylist()
    assert len(rows) == 3
    hinted = 0
    for r in rows:
        for h in r["hints"]:
            hinted += 1
            span = h["end"] - h["insert_at"]
            assert h["context"] and set(h["context"].split("+")) <= {"sibling", "feedback", "hint"}, h["context"]
            assert (h["loss_mode"], h["divergence"], h["jsd_alpha"]) == ("topk", "reverse_kl", None)
            assert len(h["teacher_logprobs"]) == span
            assert len(h["top_ids"]) == span and len(h["top_logprobs"]) == span
            for i in range(span):
                tok, q = r["tokens"][h["insert_at"] + i], h["teacher_logprobs"][i]
                ids, lps = h["top_ids"][i], h["top_logprobs"][i]
                assert len(ids) == 5 and all(0 <= x < 512 for x in ids)
                assert lps == sorted(lps, reverse=True), "most likely first"
                assert q <= lps[0] + 1e-4
                assert sum(math.exp(x) for x in lps) <= 1 + 1e-4, "probabilities of distinct tokens"
                if tok in ids:
                    assert abs(lps[ids.index(tok)] - q) < 1e-3, "the sampled token's two log-probs agree"
    assert hinted > 0, "the rules teacher hinted the tool errors"
