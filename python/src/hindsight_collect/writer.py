"""RolloutWriter: validated rollouts into the daemon's spool, one file at a time,
published atomically (docs/design.md: collectors write name.arrow.tmp and rename it)."""

from __future__ import annotations

import dataclasses
import os
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO, Literal

import pyarrow as pa

from ._gofmt import go_quote
from .problem import E_DUP_ID, E_DUP_ROLLOUT, Problem, RolloutError
from .rollout import Rollout
from .schema import SEGMENT_TYPE, schema
from .validate import _check, _row, _Row

DEFAULT_BATCH_ROWS = 16
"""DEFAULT_BATCH_ROWS is the rollouts per record batch, as Go's writer: the daemon holds
one batch in memory (16 rollouts of 100k tokens ≈ 13 MB)."""


@dataclass
class _Pending:
    rollout: Rollout
    row: _Row


def record_batch(rollouts: Sequence[Rollout]) -> pa.RecordBatch:
    """record_batch returns rollouts as one record batch in the canonical schema,
    without validating them (write invalid rows on purpose, e.g. for tests)."""
    return _batch([_row(r) for r in rollouts], rollouts)


def _large_list(arrays: list[pa.Array[Any] | None], value_type: pa.DataType) -> pa.Array[Any]:
    offsets = [0]
    for a in arrays:
        offsets.append(offsets[-1] + (0 if a is None else len(a)))
    values = [a for a in arrays if a is not None and len(a) > 0]
    vals = pa.concat_arrays(values) if values else pa.array([], value_type)
    mask = pa.array([a is None for a in arrays], pa.bool_())
    return pa.LargeListArray.from_arrays(pa.array(offsets, pa.int64()), vals, mask=mask)


def _batch(rows: Sequence[_Row], rollouts: Sequence[Rollout]) -> pa.RecordBatch:
    """_batch builds a record batch: token and log-prob columns from rows, the rest from
    rollouts."""
    segs = [None if r.segments is None else [
        {"start": s.start, "end": s.end, "kind": s.kind or None, "tool": s.tool, "status": s.status,
         "feedback": s.feedback} for s in r.segments] for r in rollouts]
    cols: list[pa.Array[Any]] = [
        pa.array([r.rollout_id for r in rollouts], pa.utf8()),
        pa.array([r.task_id for r in rollouts], pa.utf8()),
        pa.array([r.policy_version for r in rollouts], pa.int64()),
        pa.array([r.tokenizer for r in rollouts], pa.utf8()),
        _large_list([r.tokens for r in rows], pa.int32()),
        _large_list([r.logprobs for r in rows], pa.float32()),
        pa.array(segs, pa.list_(SEGMENT_TYPE)),
        pa.array([r.reward for r in rollouts], pa.float32()),
        pa.array([r.feedback for r in rollouts], pa.int8()),
        pa.array([r.temperature for r in rollouts], pa.float32()),
    ]
    return pa.RecordBatch.from_arrays(cols, schema=schema())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class RolloutWriter:
    """RolloutWriter validates rollouts and writes them into `<spool_dir>/incoming/` as
    Arrow IPC files the daemon picks up.

    Each file is written as `<name>.arrow.tmp`, fsynced, renamed to `<name>.arrow` and
    the folder fsynced, so a crash never leaves a half file where the daemon looks (the
    daemon ignores `.tmp` names). A file is published when it reaches max_rows rollouts
    or max_bytes bytes, when it has been open max_seconds (checked on write), on roll(),
    and on close().

    write() validates first (validate(), plus E_DUP_ID within this writer's files) and
    raises RolloutError without writing anything when a rollout is invalid. Leaving a
    `with` block publishes the rollouts written so far, also when the block raised:
    every written rollout is complete and valid. Only a failure inside the writer's
    own I/O discards the file in hand (its temp file is removed).

        with RolloutWriter("/var/lib/hindsight/spool", tokenizer=fp) as w:
            for r in rollouts:
                w.write(r)
    """

    def __init__(self, spool_dir: str | os.PathLike[str], *, prefix: str = "rollouts",
                 max_rows: int = 1024, max_bytes: int = 256 << 20, max_seconds: float | None = None,
                 batch_rows: int = DEFAULT_BATCH_ROWS, batch_bytes: int = 64 << 20,
                 format: Literal["file", "stream"] = "file", vocab_size: int = 0,
                 tokenizer: str | None = None, validate: bool = True) -> None:
        if format not in ("file", "stream"):
            raise ValueError(f"RolloutWriter: format must be 'file' or 'stream', got {format!r}")
        if max_rows <= 0 or max_bytes <= 0 or batch_rows <= 0 or batch_bytes <= 0:
            raise ValueError("RolloutWriter: max_rows, max_bytes, batch_rows and batch_bytes must be positive")
        if "/" in prefix or not prefix or prefix.startswith("."):
            raise ValueError(f"RolloutWriter: prefix {prefix!r} must be a plain, non-hidden file name part")
        self.incoming = Path(spool_dir) / "incoming"
        self.incoming.mkdir(parents=True, exist_ok=True)
        self.prefix = prefix
        self.max_rows, self.max_bytes, self.max_seconds = max_rows, max_bytes, max_seconds
        self.batch_rows, self.batch_bytes = batch_rows, batch_bytes
        self.format = format
        self.vocab_size, self.tokenizer, self.validate = vocab_size, tokenizer, validate
        self.published: list[Path] = []
        """published lists the files this writer has published, in order."""
        self.rows_written = 0
        """rows_written counts the rollouts in published files."""

        self._run = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{os.getpid()}-{secrets.token_hex(3)}"
        self._seq = 0
        self._seen: dict[str, tuple[int, int]] = {}  # rollout_id → (file seq, row)
        self._pending: list[_Pending] = []
        self._pending_bytes = 0
        self._file: BinaryIO | None = None
        self._ipc: pa.ipc.RecordBatchFileWriter | pa.ipc.RecordBatchStreamWriter | None = None
        self._tmp: Path | None = None
        self._rows = 0  # rollouts in the current file, pending ones included
        self._opened = 0.0
        self._closed = False

    def __enter__(self) -> RolloutWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def write(self, rollout: Rollout) -> None:
        """write validates rollout and appends it to the current file; it raises
        RolloutError (nothing written) when the rollout is invalid."""
        if self._closed:
            raise ValueError("write rollout: RolloutWriter is closed")
        row = _row(rollout)
        problems = _check(row, self.vocab_size, self.tokenizer or "") if self.validate else []
        rid = rollout.rollout_id
        if rid and rid in self._seen:
            seq, at = self._seen[rid]
            if self._rows > 0 and seq == self._seq:
                problems.append(Problem(E_DUP_ID, "rollout_id",
                                        f"rollout_id {go_quote(rid)} already appeared at row {at}", rollout_id=rid))
            else:
                problems.append(Problem(E_DUP_ROLLOUT, "rollout_id",
                                        f"rollout_id {go_quote(rid)} was written before, to file "
                                        f"{self._name(seq)} row {at}", rollout_id=rid))
        if problems and self.validate:
            raise RolloutError(problems)
        if self._rows == 0:  # the first rollout of a new file
            self._seq += 1
            self._opened = time.monotonic()
        if rid and rid not in self._seen:
            self._seen[rid] = (self._seq, self._rows)
        # Keep a copy: the caller may reuse its objects before the batch is written.
        kept = dataclasses.replace(rollout, tokens=None, logprobs=None, segments=None if rollout.segments is None
                                   else [dataclasses.replace(sg) for sg in rollout.segments])
        self._pending.append(_Pending(kept, row))
        self._rows += 1
        self._pending_bytes += _size(row)
        if len(self._pending) >= self.batch_rows or self._pending_bytes >= self.batch_bytes:
            self._flush()
        if (self._rows >= self.max_rows or self._bytes() >= self.max_bytes or
                (self.max_seconds is not None and time.monotonic() - self._opened >= self.max_seconds)):
            self.roll()

    def roll(self) -> Path | None:
        """roll publishes the current file now (if it holds a rollout) and returns its
        path; the next write starts a new file."""
        if self._rows == 0:
            return None
        self._flush()
        assert self._ipc is not None and self._file is not None and self._tmp is not None
        try:
            self._ipc.close()
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            final = self._tmp.with_suffix("")  # drop ".tmp"
            os.rename(self._tmp, final)
            _fsync_dir(self.incoming)
        except BaseException:
            self._discard()
            raise
        self.published.append(final)
        self.rows_written += self._rows
        self._ipc = self._file = self._tmp = None
        self._rows = 0
        return final

    def close(self) -> None:
        """close publishes the current file. It is safe to call twice."""
        if self._closed:
            return
        try:
            self.roll()
        finally:
            self._closed = True

    def abort(self) -> None:
        """abort discards the current file (its rollouts are not published) and closes
        the writer."""
        self._discard()
        self._closed = True

    def _name(self, seq: int) -> str:
        return f"{self.prefix}-{self._run}-{seq:05d}.arrow"

    def _bytes(self) -> int:
        return (self._file.tell() if self._file is not None else 0) + self._pending_bytes

    def _flush(self) -> None:
        """_flush writes the pending rollouts as one record batch, opening the file first
        when needed."""
        if not self._pending:
            return
        try:
            if self._file is None:
                self._tmp = self.incoming / (self._name(self._seq) + ".tmp")
                self._file = open(self._tmp, "xb")
                s = schema()
                self._ipc = pa.ipc.new_file(self._file, s) if self.format == "file" else pa.ipc.new_stream(self._file, s)
            assert self._ipc is not None
            self._ipc.write_batch(_batch([p.row for p in self._pending], [p.rollout for p in self._pending]))
        except BaseException:
            self._discard()
            raise
        self._pending.clear()
        self._pending_bytes = 0

    def _discard(self) -> None:
        """_discard drops the file in hand and its pending rollouts; its ids may be
        written again."""
        if self._rows > 0:
            for rid in [k for k, (s, _) in self._seen.items() if s == self._seq]:
                del self._seen[rid]
        try:
            if self._ipc is not None:
                self._ipc.close()
        except Exception:
            pass
        if self._file is not None:
            self._file.close()
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)
        self._ipc = self._file = self._tmp = None
        self._pending.clear()
        self._pending_bytes = 0
        self._rows = 0


def _size(r: _Row) -> int:
    """_size estimates the bytes a rollout adds to a record batch."""
    n = 64 + 32 * len(r.segments or ())
    if r.tokens is not None:
        n += 4 * len(r.tokens) + 8
    if r.logprobs is not None:
        n += 4 * len(r.logprobs) + len(r.logprobs) // 8 + 8
    return n
