"""The Arrow schema of a rollout file, exactly as Go's rollout.Schema() writes it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

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
    pa.field("temperature", pa.float32()),
]
_OPTIONAL: Final = frozenset({"temperature"})
"""_OPTIONAL are the columns a file may leave out (temperature: then 1)."""


def schema() -> pa.Schema:
    """schema returns the canonical schema of a rollout file (docs/design.md, "Rollout
    file") with hindsight.schema_version = "1" in its metadata."""
    return pa.schema(_FIELDS, metadata={SCHEMA_VERSION_KEY: SCHEMA_VERSION})


_LIST_NAMES: Final = (("list_view", pa.types.is_list_view), ("large_list_view", pa.types.is_large_list_view),
                      ("large_list", pa.types.is_large_list), ("list", pa.types.is_list))


def _type_string(t: pa.DataType) -> str:
    """_type_string writes a type the way docs/design.md and the Go reader do."""
    for name, is_list in _LIST_NAMES:
        if is_list(t):
            lt: Any = t  # one of four list types; the stubs narrow each apart
            return f"{name}<{_type_string(lt.value_type)}>"
    if pa.types.is_struct(t):
        return "struct{" + ", ".join(f"{t.field(i).name} {_type_string(t.field(i).type)}"
                                     for i in range(t.num_fields)) + "}"
    if pa.types.is_dictionary(t):
        return f"dictionary<{_type_string(t.index_type)}, {_type_string(t.value_type)}>"
    return {"string": "utf8", "large_string": "large_utf8", "string_view": "utf8_view", "float": "float32",
            "double": "float64", "halffloat": "float16"}.get(str(t), str(t))


def _list_elem(t: pa.DataType) -> pa.DataType | None:
    """_list_elem returns the element type of a list, large_list, list_view or
    large_list_view, or None for any other type."""
    if any(is_list(t) for _, is_list in _LIST_NAMES):
        lt: Any = t
        elem: pa.DataType = lt.value_type
        return elem
    return None


def _is_string(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        t = t.value_type
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t))


def _is_signed_int(t: pa.DataType) -> bool:
    return bool(pa.types.is_signed_integer(t))


def _is_any_int(t: pa.DataType) -> bool:
    return bool(pa.types.is_signed_integer(t) or (pa.types.is_unsigned_integer(t) and not pa.types.is_uint64(t)))


def _is_float(t: pa.DataType) -> bool:
    return bool(pa.types.is_float32(t) or pa.types.is_float64(t))


def _is_tokens(t: pa.DataType) -> bool:
    e = _list_elem(t)
    return e is not None and bool(pa.types.is_int32(e) or pa.types.is_int64(e))


def _is_logprobs(t: pa.DataType) -> bool:
    e = _list_elem(t)
    return e is not None and _is_float(e)


_Class = tuple[Callable[[pa.DataType], bool], str]
_STRING: Final[_Class] = (_is_string, "utf8, large_utf8, utf8_view or a dictionary of these")
_SIGNED: Final[_Class] = (_is_signed_int, "int8, int16, int32 or int64")
_CLASSES: Final[dict[str, _Class]] = {
    "rollout_id": _STRING, "task_id": _STRING, "tokenizer": _STRING,
    "policy_version": (_is_any_int, "an integer type other than uint64"),
    "tokens": (_is_tokens, "list, large_list, list_view or large_list_view of int32 or int64"),
    "logprobs": (_is_logprobs, "list, large_list, list_view or large_list_view of float32 or float64"),
    "reward": (_is_float, "float32 or float64"), "feedback": _SIGNED,
    "temperature": (_is_float, "float32 or float64"),
    "segments.start": _SIGNED, "segments.end": _SIGNED, "segments.status": _SIGNED,
    "segments.kind": _STRING, "segments.tool": _STRING, "segments.feedback": _STRING,
}
"""_CLASSES holds, per column (and segment field), the test of an accepted type and
its description: the same classes as Go's CheckSchema."""

_SEGMENTS_ACCEPTED: Final = "list, large_list, list_view or large_list_view of a struct with these fields"


def _type_problem(name: str, want: pa.DataType, got: pa.DataType) -> Problem:
    return Problem(E_COLUMN_TYPE, name, f"column {name}: expected {_type_string(want)} "
                   f"(or {_CLASSES[name][1]}), found {_type_string(got)}")


def check_schema(s: pa.Schema) -> Problem | None:
    """check_schema returns the first file-level problem of a file's schema, as the Go
    reader's CheckSchema finds it (columns by name, any order, extra columns ignored,
    the optional temperature column may be absent,
    the equivalent types of docs/rollouts.md accepted, a missing schema version read as
    "1"), or None."""
    md = s.metadata or {}
    v = md.get(SCHEMA_VERSION_KEY.encode())
    if v is not None and v.decode() != SCHEMA_VERSION:
        return Problem(E_SCHEMA_VERSION, "", f"schema metadata {SCHEMA_VERSION_KEY} is \"{v.decode()}\", "
                       f"this reader reads \"{SCHEMA_VERSION}\"")
    for want in _FIELDS:
        idx = s.get_field_index(want.name)
        if idx < 0 and want.name in _OPTIONAL:
            continue
        if idx < 0:
            return Problem(E_MISSING_COLUMN, want.name,
                           f"column {want.name} ({_type_string(want.type)}) is missing")
        got = s.field(idx).type
        if want.name != "segments":
            if not _CLASSES[want.name][0](got):
                return _type_problem(want.name, want.type, got)
            continue
        st = _list_elem(got)
        if st is None or not pa.types.is_struct(st):
            return Problem(E_COLUMN_TYPE, "segments", f"column segments: expected {_type_string(want.type)} "
                           f"(or {_SEGMENTS_ACCEPTED}), found {_type_string(got)}")
        for i in range(SEGMENT_TYPE.num_fields):
            f = SEGMENT_TYPE.field(i)
            j = st.get_field_index(f.name)
            name = "segments." + f.name
            if j < 0:
                return Problem(E_MISSING_COLUMN, name, f"segments struct has no field {f.name} "
                               f"({_type_string(f.type)}); found {_type_string(got)}")
            if not _CLASSES[name][0](st.field(j).type):
                return _type_problem(name, f.type, st.field(j).type)
    return None
