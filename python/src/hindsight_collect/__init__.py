"""hindsight_collect writes rollout files for the hindsight trainer daemon.

Collectors (agent harnesses sampling with vLLM, SGLang or a hosted API) build a Rollout
(from_messages, RolloutBuilder, from_role_boundaries), and a RolloutWriter validates it
with the daemon's checks and codes and publishes Arrow files atomically into the
daemon's spool. status() reads the daemon's status.
"""

from .convert import Boundary, ConvertError, RolloutBuilder, Turn, from_messages, from_role_boundaries
from .problem import FILE_CODES, ROW_CODES, Problem, RolloutError, RolloutFileError
from .reader import Row, read_rollouts
from .rollout import (
    BYTES_TOKENIZER,
    KINDS,
    POLICY_KINDS,
    SCHEMA_VERSION,
    SCHEMA_VERSION_KEY,
    STATUS_ERROR,
    STATUS_OK,
    Rollout,
    Segment,
    fingerprint,
)
from .schema import check_schema, schema
from .status import DEFAULT_ADDR, StatusError, status
from .validate import validate, validate_all
from .writer import DEFAULT_BATCH_ROWS, RolloutWriter, record_batch

__all__ = [
    "BYTES_TOKENIZER", "DEFAULT_ADDR", "DEFAULT_BATCH_ROWS", "FILE_CODES", "KINDS", "POLICY_KINDS", "ROW_CODES",
    "SCHEMA_VERSION", "SCHEMA_VERSION_KEY", "STATUS_ERROR", "STATUS_OK", "Boundary", "ConvertError", "Problem",
    "Rollout", "RolloutBuilder", "RolloutError", "RolloutFileError", "RolloutWriter", "Row", "Segment",
    "StatusError", "Turn", "check_schema", "fingerprint", "from_messages", "from_role_boundaries",
    "read_rollouts", "record_batch", "schema", "status", "validate", "validate_all",
]
