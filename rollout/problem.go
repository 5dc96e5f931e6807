package rollout

import (
	"fmt"
	"strings"
)

// Code is a stable identifier of a kind of problem with a rollout file. Go and Python
// share these codes; never renumber or rename one.
type Code string

// File-level codes: the whole file is quarantined.
const (
	ENotArrow      Code = "E_NOT_ARROW"      // not an Arrow IPC file or stream
	ETruncated     Code = "E_TRUNCATED"      // the file ends early or a batch is corrupt
	EMissingColumn Code = "E_MISSING_COLUMN" // a required column is absent
	EColumnType    Code = "E_COLUMN_TYPE"    // a column has the wrong Arrow type
	ESchemaVersion Code = "E_SCHEMA_VERSION" // hindsight.schema_version is not one we read
	EIO            Code = "E_IO"             // the file could not be read from disk
)

// Row-level codes: the rollout is rejected, the rest of the file goes on.
const (
	EEmptyID         Code = "E_EMPTY_ID"         // rollout_id is null or empty
	EDupIDInFile     Code = "E_DUP_ID"           // rollout_id repeats within the file
	EDupRollout      Code = "E_DUP_ROLLOUT"      // rollout_id was accepted before (any file)
	ENullTokens      Code = "E_NULL_TOKENS"      // tokens is null
	ELenMismatch     Code = "E_LEN_MISMATCH"     // logprobs length differs from tokens length
	ETokenRange      Code = "E_TOKEN_RANGE"      // token id negative or ≥ vocab size
	ELogprobNaN      Code = "E_LOGPROB_NAN"      // a log-prob is NaN
	ELogprobInf      Code = "E_LOGPROB_INF"      // a log-prob is ±Inf
	ELogprobPositive Code = "E_LOGPROB_POSITIVE" // a log-prob is > 0
	ESegRange        Code = "E_SEG_RANGE"        // segment outside [0, len(tokens)] or start ≥ end
	ESegOrder        Code = "E_SEG_ORDER"        // segments not sorted by start
	ESegOverlap      Code = "E_SEG_OVERLAP"      // segments overlap
	ESegKind         Code = "E_SEG_KIND"         // unknown or null segment kind
	ESegStatus       Code = "E_SEG_STATUS"       // tool status other than null, 0 or 1
	EFeedbackRange   Code = "E_FEEDBACK_RANGE"   // rollout feedback other than −1, 0, +1
	ERewardNaN       Code = "E_REWARD_NAN"       // reward is NaN or ±Inf
	ETokenizer       Code = "E_TOKENIZER"        // tokenizer fingerprint differs from the model's
	ETemperature     Code = "E_TEMPERATURE"      // temperature is NaN, ±Inf or negative
)

// Problem is one thing wrong with a rollout file. Row is −1 for a file-level problem.
type Problem struct {
	Code      Code
	File      string
	Row       int    // 0-based row in the file; −1 when the problem is the whole file's
	RolloutID string // empty when unknown
	Column    string // empty when the problem is not one column's
	Reason    string
}

// FileLevel reports whether the problem quarantines the whole file.
func (p *Problem) FileLevel() bool { return p.Row < 0 }

// Error formats the problem as one line: file, row, rollout_id, column, code, reason.
func (p *Problem) Error() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Row >= 0 {
		fmt.Fprintf(&b, ": row %d", p.Row)
		if p.RolloutID != "" {
			fmt.Fprintf(&b, " (rollout_id %q)", p.RolloutID)
		}
	}
	if p.Column != "" {
		fmt.Fprintf(&b, ": column %s", p.Column)
	}
	fmt.Fprintf(&b, ": %s: %s", p.Code, p.Reason)
	return b.String()
}
