package rollout

import "fmt"

// SchemaVersionKey is the schema metadata key that carries the file format version.
const SchemaVersionKey = "hindsight.schema_version"

// SchemaVersion is the file format version this package reads and writes.
const SchemaVersion = "1"

// Column names, exactly as docs/design.md writes them.
const (
	ColRolloutID     = "rollout_id"
	ColTaskID        = "task_id"
	ColPolicyVersion = "policy_version"
	ColTokenizer     = "tokenizer"
	ColTokens        = "tokens"
	ColLogProbs      = "logprobs"
	ColSegments      = "segments"
	ColReward        = "reward"
	ColFeedback      = "feedback"
	// ColTemperature is optional: a file without it (or a null) means temperature 1.
	ColTemperature = "temperature"
)

// SegmentKind is the role of a segment of a rollout.
type SegmentKind uint8

// The segment kinds of docs/design.md. KindUnknown never appears in a valid rollout.
const (
	KindUnknown SegmentKind = iota
	KindSystem
	KindUser
	KindAssistant
	KindReasoning
	KindToolCall
	KindToolResult
)

var kindNames = [...]string{
	KindUnknown:    "unknown",
	KindSystem:     "system",
	KindUser:       "user",
	KindAssistant:  "assistant",
	KindReasoning:  "reasoning",
	KindToolCall:   "tool_call",
	KindToolResult: "tool_result",
}

// String returns the kind's name as it is written in rollout files.
func (k SegmentKind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("SegmentKind(%d)", uint8(k))
}

// ParseSegmentKind maps a kind name from a file to its SegmentKind; ok is false for a
// name docs/design.md does not define.
func ParseSegmentKind(s string) (k SegmentKind, ok bool) {
	for i, n := range kindNames {
		if i != int(KindUnknown) && n == s {
			return SegmentKind(i), true
		}
	}
	return KindUnknown, false
}

// IsPolicy reports whether the policy produced segments of this kind (assistant,
// reasoning, tool_call): only these hold trainable tokens, and consecutive ones form a
// policy turn.
func (k SegmentKind) IsPolicy() bool {
	return k == KindAssistant || k == KindReasoning || k == KindToolCall
}

// ToolStatus is the outcome of a tool segment.
type ToolStatus int8

// Tool statuses; StatusNone stands for a null status (not a tool).
const (
	StatusNone  ToolStatus = -1
	StatusOK    ToolStatus = 0
	StatusError ToolStatus = 1
)

// Segment is a half-open token range [Start, End) of a rollout with its role.
type Segment struct {
	Start, End int32
	Kind       SegmentKind
	// KindName is the kind as written in the file; it differs from Kind.String() only
	// for an unknown kind, which validation rejects.
	KindName string
	Tool     string     // tool name; empty when null
	Status   ToolStatus // StatusNone when null
	Feedback string     // a person's comment on this segment; empty when null
}

// Len returns the number of tokens in the segment.
func (s Segment) Len() int { return int(s.End - s.Start) }

// Rollout is one row of a rollout file.
//
// Tokens and the log-prob values point into the Arrow buffers of the record batch the
// reader is on: they are valid until the reader moves to the next batch or is closed.
// Call Clone to keep a rollout longer.
type Rollout struct {
	ID            string
	TaskID        string // empty when null
	PolicyVersion int64  // 0 when null
	Tokenizer     string // tokenizer fingerprint; empty when null
	Tokens        []int32
	// LogProbs holds the sampler log-prob of each token (nats); the value at a null
	// position is meaningless: use LogProb or LogProbValid.
	LogProbs []float32
	// logProbValid is the Arrow validity bitmap of LogProbs, starting at bit
	// logProbBit; nil means every value is valid.
	logProbValid []byte
	logProbBit   int
	Segments     []Segment
	Reward       float32 // outcome reward; meaningful only when HasReward
	HasReward    bool
	Feedback     int8 // −1/0/+1 rating of the whole rollout; meaningful only when HasFeedback
	HasFeedback  bool
	// Temperature is the sampling temperature the policy's tokens were drawn at (0:
	// greedy); meaningful only when HasTemperature. A file without the column, or a
	// null, means 1. ScoringTemperature is the T the trainer applies.
	Temperature    float32
	HasTemperature bool
}

// ScoringTemperature returns the temperature the trainer divides the logits by when
// it scores this rollout (docs/distillation.md "The sampling temperature"): the
// recorded Temperature, or 1 when there is none or it is 0 (greedy: the peers never
// train on greedy samples, and a point mass has no tempered distribution to match).
func (r *Rollout) ScoringTemperature() float64 {
	if !r.HasTemperature || r.Temperature == 0 {
		return 1
	}
	return float64(r.Temperature)
}

// SetLogProbValidity sets the validity bitmap of LogProbs: bit (offset+i) of valid tells
// whether LogProbs[i] is non-null. A nil bitmap means all values are valid. The bitmap
// is referenced, not copied.
func (r *Rollout) SetLogProbValidity(valid []byte, offset int) {
	r.logProbValid, r.logProbBit = valid, offset
}

// LogProbValid reports whether token i has a sampler log-prob (is not null). A null
// logprobs list (LogProbs nil) has none.
func (r *Rollout) LogProbValid(i int) bool {
	if i >= len(r.LogProbs) {
		return false
	}
	if r.logProbValid == nil {
		return true
	}
	b := r.logProbBit + i
	return r.logProbValid[b>>3]&(1<<(uint(b)&7)) != 0
}

// LogProb returns the sampler log-prob of token i and whether it is non-null.
func (r *Rollout) LogProb(i int) (float32, bool) {
	if !r.LogProbValid(i) {
		return 0, false
	}
	return r.LogProbs[i], true
}

// HasLogProbs reports whether any token has a sampler log-prob.
func (r *Rollout) HasLogProbs() bool {
	for i := range r.LogProbs {
		if r.LogProbValid(i) {
			return true
		}
	}
	return false
}

// Trainable reports whether token i is a training target: inside an assistant,
// reasoning or tool_call segment with a non-null sampler log-prob (docs/design.md).
func (r *Rollout) Trainable(i int) bool {
	if !r.LogProbValid(i) {
		return false
	}
	for _, s := range r.Segments {
		if int(s.Start) <= i && i < int(s.End) {
			return s.Kind.IsPolicy()
		}
	}
	return false
}

// Clone returns a deep copy of r that owns its memory.
func (r *Rollout) Clone() *Rollout {
	c := *r
	// Keep nil (a null list) apart from empty: append to a nil slice would not.
	if r.Tokens != nil {
		c.Tokens = append(make([]int32, 0, len(r.Tokens)), r.Tokens...)
	}
	if r.LogProbs != nil {
		c.LogProbs = append(make([]float32, 0, len(r.LogProbs)), r.LogProbs...)
	}
	if r.logProbValid != nil {
		n := len(r.LogProbs)
		c.logProbValid = make([]byte, (n+7)/8)
		c.logProbBit = 0
		for i := 0; i < n; i++ {
			if r.LogProbValid(i) {
				c.logProbValid[i>>3] |= 1 << (uint(i) & 7)
			}
		}
	}
	if r.Segments != nil {
		c.Segments = append(make([]Segment, 0, len(r.Segments)), r.Segments...)
	}
	return &c
}
