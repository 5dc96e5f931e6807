"""gen_python writes the interop fixtures of the Python writers from cases.json:
pyarrow (Arrow C++), polars (its own IPC writer, Rust) and DuckDB (its Arrow output,
written by pyarrow: DuckDB has no Arrow IPC writer of its own).

Run from this folder, in a venv with requirements.txt installed:

    python3 -m venv /tmp/v && /tmp/v/bin/pip install -r requirements.txt
    /tmp/v/bin/python gen_python.py

Each writer uses the types it produces by default (pyarrow infers list<int64>,
list<double>, int64 and double from Python values; polars writes utf8_view and
large_list; DuckDB returns utf8 and list<int64>). pyarrow also writes two files of
the other accepted types: dictionary-encoded strings and views.
"""

from __future__ import annotations

import copy
import json
import math
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa

HERE = Path(__file__).resolve().parent
SPEC = json.loads((HERE / "cases.json").read_text())
COLUMNS = ["rollout_id", "task_id", "policy_version", "tokenizer", "tokens", "logprobs", "segments", "reward",
           "feedback"]


def nan(v: Any) -> Any:
    """nan turns the spec's "NaN" strings into float NaN."""
    if v == "NaN":
        return math.nan
    if isinstance(v, list):
        return [nan(x) for x in v]
    if isinstance(v, dict):
        return {k: nan(x) for k, x in v.items()}
    return v


def cases() -> list[tuple[str, list[dict[str, Any]]]]:
    """cases returns (name, rows): the valid rollouts, then each malformed set."""
    rows = nan(SPEC["rollouts"])
    out = [("valid", rows)]
    for m in SPEC["malformed"]:
        bad = copy.deepcopy(rows)
        bad[SPEC["row"]].update(nan(m["set"]))
        out.append((m["name"], bad))
    return out


def columns(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    return {c: [r[c] for r in rows] for c in COLUMNS}


def write_pyarrow(path: Path, table: pa.Table, stream: bool, codec: str | None) -> None:
    """write_pyarrow writes table in batches of batch_rows with pyarrow's IPC writer."""
    opts = pa.ipc.IpcWriteOptions(compression=codec)
    open_ = pa.ipc.new_stream if stream else pa.ipc.new_file
    with open_(str(path), table.schema, options=opts) as w:
        w.write_table(table, max_chunksize=SPEC["batch_rows"])


def pyarrow_table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.table(columns(rows))  # pyarrow's own inference from Python values


def pyarrow_dict_table(rows: list[dict[str, Any]]) -> pa.Table:
    """pyarrow_dict_table has dictionary-encoded strings and large lists."""
    t = pyarrow_table(rows)
    for name in ("rollout_id", "task_id", "tokenizer"):
        i = t.schema.get_field_index(name)
        t = t.set_column(i, name, t.column(i).cast(pa.large_utf8()).dictionary_encode())
    for name, typ in (("tokens", pa.large_list(pa.int32())), ("logprobs", pa.large_list(pa.float32()))):
        i = t.schema.get_field_index(name)
        t = t.set_column(i, pa.field(name, typ), t.column(i).cast(typ))
    return t.unify_dictionaries()


def pyarrow_view_table(rows: list[dict[str, Any]]) -> pa.Table:
    """pyarrow_view_table has utf8_view strings and list_view lists."""
    t = pyarrow_table(rows)
    for name, typ in (("rollout_id", pa.string_view()), ("task_id", pa.string_view()),
                      ("tokens", pa.list_view(pa.int64())), ("logprobs", pa.large_list_view(pa.float64()))):
        i = t.schema.get_field_index(name)
        t = t.set_column(i, pa.field(name, typ), pa.array(t.column(i).to_pylist(), typ))
    return t


def write_polars(path: Path, rows: list[dict[str, Any]], stream: bool, codec: str | None) -> None:
    """write_polars writes with polars' own IPC writer: the file format in batches of
    batch_rows; the stream format in one batch (write_ipc_stream takes no batch size
    and writes a rechunked frame)."""
    df = pl.DataFrame(columns(rows), strict=False)
    compression: Any = codec or "uncompressed"
    if stream:
        df.write_ipc_stream(path, compression=compression)
    else:
        df.write_ipc(path, compression=compression, record_batch_size=SPEC["batch_rows"])


def duckdb_table(rows: list[dict[str, Any]]) -> pa.Table:
    """duckdb_table passes the rows through DuckDB and returns its Arrow output."""
    con = duckdb.connect()
    src = pyarrow_table(rows)
    con.register("src", src)
    out = con.sql("SELECT * FROM src").arrow()
    table: pa.Table = out if isinstance(out, pa.Table) else out.read_all()
    return table


Writer = Callable[[Path, list[dict[str, Any]], bool, "str | None"], None]


def via_pyarrow(make: Callable[[list[dict[str, Any]]], pa.Table]) -> Writer:
    def write(path: Path, rows: list[dict[str, Any]], stream: bool, codec: str | None) -> None:
        write_pyarrow(path, make(rows), stream, codec)
    return write


def generate(name: str, write: Writer, extra: dict[str, Writer] | None = None) -> None:
    out = HERE / name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    for case, rows in cases():
        codecs: list[str | None] = [None, "lz4", "zstd"] if case == "valid" else [None]
        for stream in (False, True):
            for codec in codecs:
                fname = f"{case}.{'stream' if stream else 'file'}{'.' + codec if codec else ''}.arrow"
                write(out / fname, rows, stream, codec)
    for case, w in (extra or {}).items():
        for stream in (False, True):
            w(out / f"{case}.{'stream' if stream else 'file'}.arrow", nan(SPEC["rollouts"]), stream, None)


def main() -> None:
    os.chdir(HERE)
    generate("pyarrow", via_pyarrow(pyarrow_table),
             {"valid_dictionary": via_pyarrow(pyarrow_dict_table), "valid_views": via_pyarrow(pyarrow_view_table)})
    generate("polars", write_polars)
    generate("duckdb", via_pyarrow(duckdb_table))
    versions = {"pyarrow": pa.__version__, "polars": pl.__version__, "duckdb": duckdb.__version__}
    print(json.dumps(versions))


if __name__ == "__main__":
    main()
