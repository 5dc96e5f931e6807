"""The Arrow schema of a rollout file, exactly as Go's rollout.Schema() writes it."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from .problem import E_COLUMN_TYPE, E_MISSING_COLUMN, E_SCHEMA_VERSION, Problem
from .rollout import SCHEMA_VERSION, SCHEMA_VERSION_KEY

SEGMENT_TYPE = pa.struct([
    pa.field("start", pa.int32()),
    pa.field("end", pa.int32()),
    pa.field("kind", pa.utf8()),
    pa.field("tool", pa.utf8()),
    pa.field("status", pa.int8()),
    pa.field("feedback", pa.utf8()),
])
"""SEGMENT_TYPE is the element type of the segments column."""

_FIELDS: list[pa.Field[Any]] = [
    pa.field("rollout_id", pa.utf8(), nullable=False),
    pa.field("task_id", pa.utf8()),
    pa.field("policy_version", pa.int64()),
    pa.field("tokenizer", pa.utf8()),
    pa.field("tokens", pa.large_list(pa.int32())),
    pa.field("logprobs", pa.large_list(pa.float32())),
    pa.field("segments", pa.list_(SEGMENT_TYPE)),
    pa.field("reward", pa.float32()),
    pa.field("feedback", pa.int8()),
]


def schema() -> pa.Schema:
    """schema returns the canonical schema of a rollout file (DESIGN.md, "Rollout
    file") with hindsight.schema_version = "1" in its metadata."""
    return pa.schema(_FIELDS, metadata={SCHEMA_VERSION_KEY: SCHEMA_VERSION})


def _type_string(t: pa.DataType) -> str:
    """_type_string writes a type the way DESIGN.md and the Go reader do."""
    if pa.types.is_large_list(t):
        return "large_list<" + _type_string(t.value_type) + ">"
    if pa.types.is_list(t):
        return "list<" + _type_string(t.value_type) + ">"
    if pa.types.is_struct(t):
        return "struct{" + ", ".join(f"{t.field(i).name} {_type_string(t.field(i).type)}"
                                     for i in range(t.num_fields)) + "}"
    return {"string": "utf8", "large_string": "large_utf8", "float": "float32", "double": "float64",
            "halffloat": "float16"}.get(str(t), str(t))


def _same_type(want: pa.DataType, got: pa.DataType) -> bool:
    """_same_type compares types ignoring list element names and nullability."""
    if pa.types.is_large_list(want):
        return pa.types.is_large_list(got) and bool(want.value_type.equals(got.value_type))
    if pa.types.is_list(want):
        return pa.types.is_list(got) and _same_type(want.value_type, got.value_type)
    return bool(want.equals(got))


def check_schema(s: pa.Schema) -> Problem | None:
    """check_schema returns the first file-level problem of a file's schema, as the Go
    reader's CheckSchema finds it (columns by name, any order, extra columns ignored,
    types exact, a missing schema version read as "1"), or None."""
    md = s.metadata or {}
    v = md.get(SCHEMA_VERSION_KEY.encode())
    if v is not None and v.decode() != SCHEMA_VERSION:
        return Problem(E_SCHEMA_VERSION, "", f"schema metadata {SCHEMA_VERSION_KEY} is \"{v.decode()}\", "
                       f"this reader reads \"{SCHEMA_VERSION}\"")
    for want in _FIELDS:
        idx = s.get_field_index(want.name)
        if idx < 0:
            return Problem(E_MISSING_COLUMN, want.name,
                           f"column {want.name} ({_type_string(want.type)}) is missing")
        got = s.field(idx).type
        if want.name == "segments" and pa.types.is_list(got) and pa.types.is_struct(got.value_type):
            st = got.value_type
            for i in range(SEGMENT_TYPE.num_fields):
                f = SEGMENT_TYPE.field(i)
                j = st.get_field_index(f.name)
                name = "segments." + f.name
                if j < 0:
                    return Problem(E_MISSING_COLUMN, name, f"segments struct has no field {f.name} "
                                   f"({_type_string(f.type)}); found {_type_string(got)}")
                if not st.field(j).type.equals(f.type):
                    return Problem(E_COLUMN_TYPE, name, f"column {name}: expected {_type_string(f.type)}, "
                                   f"found {_type_string(st.field(j).type)}")
            continue
        if not _same_type(want.type, got):
            return Problem(E_COLUMN_TYPE, want.name, f"column {want.name}: expected {_type_string(want.type)}, "
                           f"found {_type_string(got)}")
    return None
