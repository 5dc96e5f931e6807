"""End to end: the real hindsightd ingests files that RolloutWriter wrote into its spool,
and status() reports them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import random
import threading
import time
from pathlib import Path

from test_go_roundtrip import agent_rollout

from hindsight_collect import BYTES_TOKENIZER, RolloutError, RolloutWriter, fingerprint, status


class Daemon:
    """Daemon runs hindsightd and collects its JSON log lines from stderr."""

    def __init__(self, binary: Path, data: Path, *args: str) -> None:
        env = dict(os.environ, GOMLX_NO_AUTO_INSTALL="1")
        # Pure Go unless the run names a backend: hindsightd's default (auto) would take
        # a fetched XLA plugin; the daemon logs its choice ("backend chosen").
        env["GOMLX_BACKEND"] = env.get("GOMLX_BACKEND") or "go:parallelism=-1"
        self.proc = subprocess.Popen([str(binary), "-data-dir", str(data), "-listen", "127.0.0.1:0", *args],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        self.lines: list[str] = []
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def log(self) -> str:
        return "".join(self.lines)

    def wait_ready(self, timeout: float = 60) -> str:
        """wait_ready returns the status address from the "ready" log line."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if entry.get("message") == "ready" and entry.get("listen"):
                    return str(entry["listen"])
            if self.proc.poll() is not None:
                raise AssertionError(f"hindsightd exited ({self.proc.returncode}) before ready:\n{self.log()}")
            time.sleep(0.02)
        raise AssertionError(f"hindsightd not ready in {timeout}s:\n{self.log()}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        finally:
            self._t.join(timeout=5)


def test_daemon_ingests_python_rollouts(tmp_path: Path, go_bin: Path) -> None:
    data = tmp_path / "data"
    d = Daemon(go_bin / "hindsightd", data)
    try:
        addr = d.wait_ready()
        before = status(addr)
        assert before["state"] == "STATE_READY"

        rng = random.Random(5)
        spool = data / "spool"
        with RolloutWriter(spool, prefix="e2e", max_rows=4, tokenizer=BYTES_TOKENIZER, vocab_size=256) as w:
            for i in range(10):
                w.write(agent_rollout(i, turns=2, rng=rng))
        # A file with one bad row, written past validation: the daemon rejects that row only.
        bad = agent_rollout(100, turns=1, rng=rng)
        assert bad.logprobs is not None
        bad.logprobs = list(bad.logprobs)
        bad.logprobs[-1] = float("nan")
        with RolloutWriter(spool, prefix="e2e-bad", validate=False) as wb:
            wb.write(agent_rollout(101, turns=1, rng=rng))
            wb.write(bad)
        files = w.published + wb.published
        assert len(files) == 4

        deadline = time.monotonic() + 300  # training, then a checkpoint, before done/
        done: list[str] = []
        while time.monotonic() < deadline:
            done = sorted(os.listdir(spool / "done"))
            if len(done) == len(files):
                break
            time.sleep(0.05)
        assert len(done) == len(files), d.log()
        assert sorted(n.split("-", 1)[1] for n in done) == sorted(p.name for p in files)

        # Status is a snapshot the daemon republishes on its own cadence: a file can reach
        # done/ before the snapshot that counts it. Wait for the snapshot, not the clock.
        deadline = time.monotonic() + 60
        st = status(addr)
        while st["spool"].get("done") != "4" and time.monotonic() < deadline:
            time.sleep(0.1)
            st = status(addr)
        assert st["spool"].get("done") == "4" and st["spool"].get("incoming", "0") == "0", st
        assert st["total"]["rolloutsAccepted"] == "11"
        assert st["total"]["rolloutsRejected"] == "1"
        assert st["session"]["filesDone"] == "4"
        errors = [p for p in os.listdir(spool / "failed") if p.endswith(".error")]
        assert len(errors) == 1
        assert "E_LOGPROB_NAN" in (spool / "failed" / errors[0]).read_text()

        cli = subprocess.run([sys.executable, "-m", "hindsight_collect", "status", "--addr", addr],
                             capture_output=True, text=True, timeout=60)
        assert cli.returncode == 0, cli.stderr
        assert json.loads(cli.stdout)["total"]["rolloutsAccepted"] == "11"
    finally:
        code = d.stop()
    assert code == 0, d.log()


def wait_files(d: Path, n: int, daemon: Daemon) -> list[str]:
    deadline = time.monotonic() + 300  # training, then a checkpoint, before done/
    names: list[str] = []
    while time.monotonic() < deadline:
        names = sorted(n for n in os.listdir(d) if n.endswith(".arrow"))
        if len(names) >= n:
            return names
        time.sleep(0.05)
    raise AssertionError(f"{d} has {names}, want {n} files:\n{daemon.log()}")


def test_daemon_with_model_dir(tmp_path: Path, go_bin: Path) -> None:
    """The flow of docs/rollouts.md "Feeding hindsight from Python": a model directory from `hindsight init-model`, its tokenizer
    fingerprint and vocabulary size in the writer, the daemon configured with it."""
    model = tmp_path / "model"
    res = subprocess.run([str(go_bin / "hindsight"), "init-model", "-out", str(model), "-preset", "tiny",
                          "-tokenizer", "bytes"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    fp = fingerprint(model)
    assert fp == BYTES_TOKENIZER  # the daemon reads this tokenizer.json as the byte tokenizer
    vocab = json.loads((model / "config.json").read_text())["vocab_size"]
    cfg = tmp_path / "hindsightd.yaml"
    cfg.write_text(f"model:\n  dir: {model}\n")
    data = tmp_path / "data"
    d = Daemon(go_bin / "hindsightd", data, "-config", str(cfg))
    try:
        addr = d.wait_ready()
        rng = random.Random(9)
        with RolloutWriter(data / "spool", tokenizer=fp, vocab_size=vocab) as w:
            for i in range(3):
                w.write(agent_rollout(i, turns=1, rng=rng))
            other = agent_rollout(3, turns=1, rng=rng)
            other.tokenizer = "sha256:0000"
            try:
                w.write(other)
                raise AssertionError("a rollout of another tokenizer was written")
            except RolloutError as e:
                assert e.code == "E_TOKENIZER"
        wait_files(data / "spool" / "done", 1, d)
        st = status(addr)
        assert st["total"]["rolloutsAccepted"] == "3" and "rolloutsRejected" not in st["total"]
    finally:
        code = d.stop()
    assert code == 0, d.log()
