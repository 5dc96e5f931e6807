package rollout

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
)

// BytesTokenizer is the fingerprint of the embedded byte-level tokenizer: one token per
// byte, ids 0–255.
const BytesTokenizer = "bytes-v1"

// SynthOptions describes a set of synthetic rollouts.
type SynthOptions struct {
	N         int    // number of rollouts
	Tokens    int    // approximate tokens per rollout (at least 256)
	Seed      uint64 // the same seed gives the same bytes
	PerFile   int    // rollouts per file; default 4
	GroupSize int    // rollouts per task_id; default 4
	IDPrefix  string // rollout_id and file name prefix; default "synth"
	Format    Format // FormatFile (default) or FormatStream
	// Tokenizer encodes the text; nil: byte-level ids (BytesTokenizer). A real
	// model's tokenizer gives rollouts that model reads as text (Tokens then
	// counts its ids).
	Tokenizer SynthTokenizer
}

// SynthTokenizer is what Synthesize needs of a tokenizer (data/tokenizer's
// Tokenizer has it): the ids of harness text, role markers such as
// "<|im_start|>" becoming their own ids, and the fingerprint rollouts carry.
type SynthTokenizer interface {
	Encode(text string) []int32
	Fingerprint() string
}

func (o *SynthOptions) defaults() {
	if o.PerFile <= 0 {
		o.PerFile = 4
	}
	if o.GroupSize <= 0 {
		o.GroupSize = 4
	}
	if o.IDPrefix == "" {
		o.IDPrefix = "synth"
	}
	if o.Tokens < 256 {
		o.Tokens = 256
	}
}

// WriteSynth writes opts.N synthetic rollouts into dir as "<prefix>-NNNN.arrow" files
// of opts.PerFile rollouts each, each file written as name.tmp and renamed, as
// collectors do. It returns the paths written.
func WriteSynth(dir string, opts SynthOptions) ([]string, error) {
	opts.defaults()
	if opts.N <= 0 {
		return nil, fmt.Errorf("synthesize rollouts: n must be positive, got %d", opts.N)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("synthesize rollouts: %w", err)
	}
	var paths []string
	for start, file := 0, 0; start < opts.N; start, file = start+opts.PerFile, file+1 {
		end := min(start+opts.PerFile, opts.N)
		batch := make([]*Rollout, 0, end-start)
		for i := start; i < end; i++ {
			batch = append(batch, Synthesize(opts, i))
		}
		path := filepath.Join(dir, fmt.Sprintf("%s-%04d.arrow", opts.IDPrefix, file))
		if err := WriteFile(path, batch, WriteOptions{Format: opts.Format}); err != nil {
			return paths, fmt.Errorf("synthesize rollouts: %w", err)
		}
		paths = append(paths, path)
	}
	return paths, nil
}

// tools the synthetic agent has; the system prompt lists them all.
var synthTools = []string{"read_file", "grep", "search_code", "run_tests", "edit_file", "bash"}

var synthWords = strings.Fields(`the a config parser handler request cache token buffer index worker
	queue retry timeout error value result client server field schema record batch offset length
	check update return missing nil pointer slice map loop branch test failing passes module import`)

// Synthesize returns rollout i of the set opts describes, shaped like an agent
// trajectory on byte-level tokens (opts.Tokenizer's ids where set): a system prompt
// listing tools, a user task, turns of reasoning, tool calls and tool results (some
// failing, some with a person's comment), a final answer, a reward, and task groups
// of opts.GroupSize. Harness-inserted role headers and non-policy segments have null
// log-probs.
func Synthesize(opts SynthOptions, i int) *Rollout {
	opts.defaults()
	rng := rand.New(rand.NewPCG(opts.Seed, uint64(i)*0x9e3779b97f4a7c15+1))
	task := i / opts.GroupSize
	b := &synthBuilder{rng: rng, tok: opts.Tokenizer}

	b.segment(KindSystem, "", StatusNone, "", "system",
		"You are a coding agent. Tools: "+strings.Join(synthTools, ", ")+
			". Call a tool as <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>.\n", false)
	b.segment(KindUser, "", StatusNone, "", "user",
		fmt.Sprintf("Task %d: fix the failing test in pkg/%s and explain the cause.\n", task, b.word()), false)

	// Reserve room for the final answer; tool turns fill the rest.
	budget := opts.Tokens - 160
	skill := 0.3 + 0.6*rand.New(rand.NewPCG(opts.Seed, uint64(task))).Float64() // shared by the task group
	failures := 0
	for b.len() < budget {
		tool := synthTools[rng.IntN(len(synthTools))]
		fail := rng.Float64() > skill
		b.segment(KindReasoning, "", StatusNone, "", "assistant",
			"<think>"+b.sentence(8+rng.IntN(24))+"</think>\n", true)
		call := fmt.Sprintf("<tool_call>{\"name\": %q, \"arguments\": {\"path\": \"pkg/%s/%s.go\"}}</tool_call>\n",
			tool, b.word(), b.word())
		feedback := ""
		if fail && rng.IntN(3) == 0 {
			feedback = "Use search_code to find the symbol before reading files; the path was guessed."
		}
		b.append(KindToolCall, tool, StatusNone, feedback, call, true)
		status, out := StatusOK, b.toolOutput(tool, min(budget-b.len(), 200+rng.IntN(1200)))
		if fail {
			failures++
			status = StatusError
			out = fmt.Sprintf("error: %s: pkg/%s: no such file or directory\nexit status %d\n", tool, b.word(), 1+rng.IntN(2))
		}
		b.segment(KindToolResult, tool, status, "", "tool", out, false)
	}
	b.segment(KindAssistant, "", StatusNone, "", "assistant",
		"Done. The cause was a "+b.sentence(6)+". Fixed and tests pass.\n", true)

	r := &Rollout{
		ID:            fmt.Sprintf("%s-%06d", opts.IDPrefix, i),
		TaskID:        fmt.Sprintf("%s-task-%04d", opts.IDPrefix, task),
		PolicyVersion: int64(rng.IntN(4)),
		Tokenizer:     BytesTokenizer,
		Tokens:        b.tokens,
		LogProbs:      b.logprobs,
		Segments:      b.segs,
	}
	if b.tok != nil {
		r.Tokenizer = b.tok.Fingerprint()
	}
	r.SetLogProbValidity(b.valid, 0)
	if rng.IntN(20) != 0 { // one in twenty has no outcome
		r.HasReward = true
		if rng.Float64() < skill && failures < 3 {
			r.Reward = 1
		}
	}
	switch rng.IntN(10) {
	case 0:
		r.HasFeedback, r.Feedback = true, -1
	case 1:
		r.HasFeedback, r.Feedback = true, 1
	}
	return r
}

// synthBuilder accumulates tokens (bytes, or tok's ids), log-probs and segments.
type synthBuilder struct {
	rng      *rand.Rand
	tok      SynthTokenizer
	tokens   []int32
	logprobs []float32
	valid    []byte
	segs     []Segment
}

func (b *synthBuilder) len() int { return len(b.tokens) }

func (b *synthBuilder) word() string { return synthWords[b.rng.IntN(len(synthWords))] }

func (b *synthBuilder) sentence(n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = b.word()
	}
	return strings.Join(w, " ")
}

func (b *synthBuilder) toolOutput(tool string, n int) string {
	var s strings.Builder
	for line := 1; s.Len() < n; line++ {
		switch tool {
		case "run_tests":
			fmt.Fprintf(&s, "--- PASS: Test%s%s (0.%02ds)\n", upperFirst(b.word()), upperFirst(b.word()), b.rng.IntN(100))
		case "grep", "search_code":
			fmt.Fprintf(&s, "pkg/%s/%s.go:%d: %s\n", b.word(), b.word(), 1+b.rng.IntN(900), b.sentence(5))
		default:
			fmt.Fprintf(&s, "%4d\t%s := %s(%s)\n", line, b.word(), b.word(), b.word())
		}
	}
	return s.String()
}

// segment appends a complete turn: the role header, the body, the end marker.
func (b *synthBuilder) segment(kind SegmentKind, tool string, status ToolStatus, feedback, role, body string, policy bool) {
	start := len(b.tokens)
	b.push("<|im_start|>"+role+"\n", false) // harness-inserted: context, not a target
	b.push(body, policy)
	if kind != KindReasoning {
		b.push("<|im_end|>\n", policy)
	}
	b.segs = append(b.segs, Segment{Start: int32(start), End: int32(len(b.tokens)), Kind: kind,
		KindName: kind.String(), Tool: tool, Status: status, Feedback: feedback})
}

// append adds a segment with no header: it continues the current turn.
func (b *synthBuilder) append(kind SegmentKind, tool string, status ToolStatus, feedback, body string, policy bool) {
	start := len(b.tokens)
	b.push(body, policy)
	b.push("<|im_end|>\n", policy)
	b.segs = append(b.segs, Segment{Start: int32(start), End: int32(len(b.tokens)), Kind: kind,
		KindName: kind.String(), Tool: tool, Status: status, Feedback: feedback})
}

func (b *synthBuilder) push(text string, sampled bool) {
	var ids []int32
	if b.tok != nil {
		ids = b.tok.Encode(text)
	} else {
		ids = make([]int32, len(text))
		for i := 0; i < len(text); i++ {
			ids[i] = int32(text[i])
		}
	}
	for _, id := range ids {
		n := len(b.tokens)
		b.tokens = append(b.tokens, id)
		if n%8 == 0 {
			b.valid = append(b.valid, 0)
		}
		if !sampled {
			b.logprobs = append(b.logprobs, 0)
			continue
		}
		b.valid[n>>3] |= 1 << (uint(n) & 7)
		lp := -b.rng.ExpFloat64() * 0.25
		if b.rng.IntN(50) == 0 {
			lp = -3 - 5*b.rng.Float64() // a surprising token
		}
		b.logprobs = append(b.logprobs, float32(math.Min(lp, 0)))
	}
}

func upperFirst(w string) string {
	if w == "" || w[0] < 'a' || w[0] > 'z' {
		return w
	}
	return string(w[0]-'a'+'A') + w[1:]
}
