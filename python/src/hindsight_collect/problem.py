"""Problems with rollouts and rollout files, with the stable codes Go and Python share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from ._gofmt import go_quote

# File-level codes: the daemon quarantines the whole file.
E_NOT_ARROW: Final = "E_NOT_ARROW"
E_TRUNCATED: Final = "E_TRUNCATED"
E_MISSING_COLUMN: Final = "E_MISSING_COLUMN"
E_COLUMN_TYPE: Final = "E_COLUMN_TYPE"
E_SCHEMA_VERSION: Final = "E_SCHEMA_VERSION"
E_IO: Final = "E_IO"

# Row-level codes: the daemon rejects the rollout, the rest of the file goes on.
E_EMPTY_ID: Final = "E_EMPTY_ID"
E_DUP_ID: Final = "E_DUP_ID"
E_DUP_ROLLOUT: Final = "E_DUP_ROLLOUT"
E_NULL_TOKENS: Final = "E_NULL_TOKENS"
E_LEN_MISMATCH: Final = "E_LEN_MISMATCH"
E_TOKEN_RANGE: Final = "E_TOKEN_RANGE"
E_LOGPROB_NAN: Final = "E_LOGPROB_NAN"
E_LOGPROB_INF: Final = "E_LOGPROB_INF"
E_LOGPROB_POSITIVE: Final = "E_LOGPROB_POSITIVE"
E_SEG_RANGE: Final = "E_SEG_RANGE"
E_SEG_ORDER: Final = "E_SEG_ORDER"
E_SEG_OVERLAP: Final = "E_SEG_OVERLAP"
E_SEG_KIND: Final = "E_SEG_KIND"
E_SEG_STATUS: Final = "E_SEG_STATUS"
E_FEEDBACK_RANGE: Final = "E_FEEDBACK_RANGE"
E_REWARD_NAN: Final = "E_REWARD_NAN"
E_TOKENIZER: Final = "E_TOKENIZER"
E_TEMPERATURE: Final = "E_TEMPERATURE"

FILE_CODES: Final = frozenset({E_NOT_ARROW, E_TRUNCATED, E_MISSING_COLUMN, E_COLUMN_TYPE, E_SCHEMA_VERSION, E_IO})
"""FILE_CODES are the codes of problems that quarantine a whole file."""
ROW_CODES: Final = frozenset({
    E_EMPTY_ID, E_DUP_ID, E_DUP_ROLLOUT, E_NULL_TOKENS, E_LEN_MISMATCH, E_TOKEN_RANGE, E_LOGPROB_NAN,
    E_LOGPROB_INF, E_LOGPROB_POSITIVE, E_SEG_RANGE, E_SEG_ORDER, E_SEG_OVERLAP, E_SEG_KIND, E_SEG_STATUS,
    E_FEEDBACK_RANGE, E_REWARD_NAN, E_TOKENIZER, E_TEMPERATURE})
"""ROW_CODES are the codes of problems that reject one rollout."""


@dataclass
class Problem:
    """Problem is one thing wrong with a rollout or a rollout file: a stable code, the
    column it is in ("" when not one column's) and the reason, worded as the Go reader
    words it. row is None for a file-level problem or a rollout not (yet) in a file."""

    code: str
    column: str
    reason: str
    rollout_id: str = ""
    row: int | None = None
    file: str = ""

    def __str__(self) -> str:
        """__str__ formats the problem as `hindsight validate` prints it."""
        s = self.file
        if self.row is not None:
            s += f": row {self.row}"
            if self.rollout_id:
                s += f" (rollout_id {go_quote(self.rollout_id)})"
        elif self.rollout_id:
            s += f"rollout_id {go_quote(self.rollout_id)}" if not s else f": rollout_id {go_quote(self.rollout_id)}"
        if self.column:
            s += f": column {self.column}"
        s += f": {self.code}: {self.reason}"
        return s.lstrip(": ")


class RolloutError(ValueError):
    """RolloutError is raised when a rollout is invalid (RolloutWriter.write refuses it
    before anything is written). problems holds every problem; code, column and reason
    are the first one's."""

    def __init__(self, problems: list[Problem]) -> None:
        if not problems:
            raise ValueError("RolloutError needs at least one problem")
        self.problems = problems
        first = problems[0]
        self.code = first.code
        self.column = first.column
        self.reason = first.reason
        self.rollout_id = first.rollout_id
        super().__init__("invalid rollout: " + "; ".join(str(p) for p in problems))


class RolloutFileError(ValueError):
    """RolloutFileError is raised when a whole rollout file cannot be read (a file-level
    problem: E_NOT_ARROW, E_TRUNCATED, E_MISSING_COLUMN, E_COLUMN_TYPE,
    E_SCHEMA_VERSION, E_IO)."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.code = problem.code
        self.column = problem.column
        self.reason = problem.reason
        super().__init__(str(problem))
