"""Shared fixtures: the repository, the shared vectors, and the real Go binaries."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
VECTORS = REPO / "testdata" / "vectors"


def load_vectors() -> list[tuple[str, dict[str, Any]]]:
    """load_vectors returns (name, vector) for every shared vector."""
    return [(p.stem, json.loads(p.read_text())) for p in sorted(VECTORS.glob("*.json"))]


@pytest.fixture(scope="session")
def go_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """go_bin builds hindsight and hindsightd once per session and returns their folder;
    tests that need them are skipped when go is not on PATH."""
    go = shutil.which("go")
    if go is None:
        pytest.skip("go is not on PATH: the Go round-trip and daemon tests need it")
    out = tmp_path_factory.mktemp("bin")
    env = dict(os.environ, GOMLX_NO_AUTO_INSTALL="1")
    res = subprocess.run([go, "build", "-o", str(out), "./cmd/hindsight", "./cmd/hindsightd"], cwd=REPO,
                         env=env, capture_output=True, text=True, timeout=900)
    if res.returncode != 0:
        pytest.fail(f"go build ./cmd/hindsight ./cmd/hindsightd failed:\n{res.stderr}")
    return out
