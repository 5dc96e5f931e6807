package toolworld

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/hindsight-ai/hindsight/data/chatformat"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/rollout"
)

// SystemPrompt is the system turn of every episode: the tools, in the "Tools: a, b."
// form the rules teacher reads, and how to finish.
const SystemPrompt = "Tools: ls, cat, grep, calc, get, set. Finish: answer X"

// Options configure an Env; the zero value is the default.
type Options struct {
	// Format is the chat format; nil: FormatFor(tok).
	Format *chatformat.Format
	// MaxTokens caps the rollout (default 256): a turn that would not leave room for
	// another call ends the episode with reward 0.
	MaxTokens int
	// MaxCalls caps the tool calls of an episode (default 8).
	MaxCalls int
}

// minTurn is the room, in tokens, a next policy turn needs at the least.
const minTurn = 8

// Env is one episode of a task: it renders the conversation in the policy's chat
// format, runs the calls the policy generates, and records tokens, sampler log-probs
// and segments as the rollout file holds them. It is not safe for concurrent use.
type Env struct {
	task Task
	opts Options
	r    *renderer
	m    *machine

	tokens []int32
	lps    []float32
	valid  []bool // whether lps[i] is a sampler log-prob (the policy generated token i)
	segs   []rollout.Segment
	start  int // where the pending policy turn starts (its header included)

	calls, toolErrors int
	done, truncated   bool
	answer            string
	reward            float32
	last              string
	lastFailed        bool
	lastCall          string
	// temp is the sampling temperature of the policy's turns (SetTemperature);
	// tempSet false: not recorded (a scripted agent, or a caller that did not say).
	temp    float32
	tempSet bool
}

// SetTemperature records the sampling temperature the policy's turns are drawn at
// (0: greedy), for Rollout's temperature column (docs/rollouts.md): the trainer
// scores the rollout at it.
func (e *Env) SetTemperature(t float64) { e.temp, e.tempSet = float32(t), true }

// New starts an episode of task for a policy with tokenizer tok. The context then
// holds the system and user turns and the first assistant header (Prompt).
func New(task Task, tok tokenizer.Tokenizer, opts Options) (*Env, error) {
	if opts.MaxTokens <= 0 {
		opts.MaxTokens = 256
	}
	if opts.MaxCalls <= 0 {
		opts.MaxCalls = 8
	}
	f := opts.Format
	if f == nil {
		ff, err := FormatFor(tok)
		if err != nil {
			return nil, fmt.Errorf("new episode of %s: %w", task.ID, err)
		}
		f = &ff
	}
	r, err := newRenderer(*f, tok)
	if err != nil {
		return nil, fmt.Errorf("new episode of %s: %w", task.ID, err)
	}
	e := &Env{task: task, opts: opts, r: r, m: newMachine(task)}
	e.push(r.turn(RoleSystem, SystemPrompt), nil, rollout.KindSystem, "", rollout.StatusNone)
	e.push(r.turn(RoleUser, task.Prompt), nil, rollout.KindUser, "", rollout.StatusNone)
	e.openPolicyTurn()
	return e, nil
}

// Task returns the episode's task.
func (e *Env) Task() Task { return e.task }

// Prompt returns the context before the first policy turn: system and user turns and
// the first assistant header.
func (e *Env) Prompt() []int32 { return append([]int32(nil), e.tokens...) }

// Tokens returns the whole context so far.
func (e *Env) Tokens() []int32 { return append([]int32(nil), e.tokens...) }

// StopID returns the token that ends a policy turn: generation stops after it.
func (e *Env) StopID() int32 { return e.r.stop }

// Budget returns how many tokens the next policy turn may hold within MaxTokens.
func (e *Env) Budget() int { return max(e.opts.MaxTokens-len(e.tokens)-len(e.r.sep), 0) }

// Done reports whether the episode is over.
func (e *Env) Done() bool { return e.done }

// Reward returns the checker's reward: 1 when the episode answered right (and left
// the store as the task wants), else 0; 0 before the end.
func (e *Env) Reward() float32 { return e.reward }

// Last returns the output of the last tool call and whether it failed.
func (e *Env) Last() (output string, failed bool) { return e.last, e.lastFailed }

// LastCall returns the text of the last policy turn (its command line), "" before the
// first.
func (e *Env) LastCall() string { return e.lastCall }

// Calls returns the number of tool calls so far and how many of them failed.
func (e *Env) Calls() (calls, failed int) { return e.calls, e.toolErrors }

// Truncated reports whether the episode ended for lack of room (MaxTokens or
// MaxCalls) rather than by an answer.
func (e *Env) Truncated() bool { return e.truncated }

// Step takes one policy turn: generated are the sampled tokens (normally ending with
// StopID), logprobs their sampler log-probs (nil: none, the tokens are recorded with
// null log-probs). It runs the call the turn holds and returns the tokens the harness
// appends after the generated ones, so that the sampler's context stays equal to
// Tokens: the turn's separator, the tool turn and the next assistant header (when the
// episode is over, at most a separator).
func (e *Env) Step(generated []int32, logprobs []float32) (next []int32, done bool, err error) {
	if e.done {
		return nil, true, fmt.Errorf("step %s: the episode is over", e.task.ID)
	}
	if logprobs != nil && len(logprobs) != len(generated) {
		return nil, false, fmt.Errorf("step %s: %d log-probs for %d generated tokens", e.task.ID, len(logprobs), len(generated))
	}
	body := generated
	stopped := len(body) > 0 && body[len(body)-1] == e.r.stop
	if stopped {
		body = body[:len(body)-1]
	}
	text, err := e.r.tok.Decode(body)
	if err != nil {
		return nil, false, fmt.Errorf("step %s: %w", e.task.ID, err)
	}
	e.lastCall = text
	e.append(generated, logprobs)
	harness := len(e.tokens) // what the harness appends from here on is returned
	if !stopped {
		if len(e.tokens)+len(e.r.end)+len(e.r.sep) > e.opts.MaxTokens { // no room to close the turn
			e.closePolicyTurn(rollout.KindAssistant, "")
			return nil, e.finish(true), nil
		}
		e.append(e.r.end, nil) // the harness closes a turn cut short, as context
	}
	e.append(e.r.sep, nil)
	call := ParseCall(text)
	if call.Name == AnswerCommand {
		e.closePolicyTurn(rollout.KindAssistant, "")
		e.answer = strings.Join(call.Args, " ")
		e.reward = e.task.Check(e.answer, e.m.kv)
		return e.since(harness), e.finish(false), nil
	}
	e.closePolicyTurn(rollout.KindToolCall, toolLabel(call.Name))
	out, failed := e.m.run(call)
	e.calls++
	if failed {
		e.toolErrors++
	}
	e.last, e.lastFailed = out, failed
	result := e.r.turn(RoleTool, out)
	if len(e.tokens)+len(result)+len(e.r.header[RoleAssistant])+minTurn > e.opts.MaxTokens {
		return e.since(harness), e.finish(true), nil
	}
	status := rollout.StatusOK
	if failed {
		status = rollout.StatusError
	}
	e.push(result, nil, rollout.KindToolResult, toolLabel(call.Name), status)
	if e.calls >= e.opts.MaxCalls {
		return e.since(harness), e.finish(true), nil
	}
	e.openPolicyTurn()
	return e.since(harness), false, nil
}

// since returns a copy of the tokens from position i on.
func (e *Env) since(i int) []int32 { return append([]int32(nil), e.tokens[i:]...) }

// HintLabel starts the text of a hint turn, as teacher.DefaultTemplate's Label does.
const HintLabel = "Hint: "

// Hint inserts a user turn "Hint: text" in front of the pending policy turn, where the
// teacher inserts a hint (teacher.Inserter with the user-turn preset of the chat format
// and HintLabel gives the same tokens): for demonstrations in which a hint precedes a
// corrected action. The turn is context (null log-probs, a user segment). It returns
// the new context to generate from. A hint that leaves no room for a turn ends the
// episode (ErrNoRoom).
func (e *Env) Hint(text string) ([]int32, error) {
	return e.UserTurn(HintLabel + strings.TrimSpace(text))
}

// UserTurn inserts a user turn holding text as is in front of the pending policy turn:
// Hint's turn without its label, for other teacher contexts (a successful sibling's
// calls). The turn is context; a turn that leaves no room for a policy turn is refused
// with ErrNoRoom.
func (e *Env) UserTurn(text string) ([]int32, error) {
	if e.done {
		return nil, fmt.Errorf("hint %s: the episode is over", e.task.ID)
	}
	turn := e.r.turn(RoleUser, text)
	if e.start+len(turn)+len(e.r.header[RoleAssistant])+minTurn > e.opts.MaxTokens {
		return nil, fmt.Errorf("hint %s: %w", e.task.ID, ErrNoRoom)
	}
	e.tokens, e.lps, e.valid = e.tokens[:e.start], e.lps[:e.start], e.valid[:e.start]
	e.push(turn, nil, rollout.KindUser, "", rollout.StatusNone)
	e.openPolicyTurn()
	return e.Tokens(), nil
}

// ContextWith returns the context the next policy turn would be generated from with a
// user turn holding text inserted in front of it (UserTurn's tokens), without changing
// the episode: for scoring one context against another (a hint against an empty one).
func (e *Env) ContextWith(text string) []int32 {
	out := append([]int32(nil), e.tokens[:e.start]...)
	out = append(out, e.r.turn(RoleUser, text)...)
	return append(out, e.r.header[RoleAssistant]...)
}

// ErrNoRoom is the error of Hint when the hint would not leave room for a policy turn.
var ErrNoRoom = errors.New("no room left in the episode")

func (e *Env) finish(truncated bool) bool {
	e.done, e.truncated = true, truncated
	if truncated {
		e.reward = 0
	}
	return true
}

// toolLabel is the tool name a segment records: what the policy called, capped.
// A sampled name can be any bytes: the label is valid UTF-8 (the column is utf8),
// invalid bytes replaced, cut at 32 bytes on a rune boundary.
func toolLabel(name string) string {
	name = strings.ToValidUTF8(name, "\uFFFD")
	for len(name) > 32 {
		_, size := utf8.DecodeLastRuneInString(name)
		name = name[:len(name)-size]
	}
	return name
}

// openPolicyTurn appends the assistant header (context) and marks where the turn starts.
func (e *Env) openPolicyTurn() {
	e.start = len(e.tokens)
	e.append(e.r.header[RoleAssistant], nil)
}

// closePolicyTurn records the pending policy turn, header included, as one segment.
func (e *Env) closePolicyTurn(kind rollout.SegmentKind, tool string) {
	e.segs = append(e.segs, rollout.Segment{Start: int32(e.start), End: int32(len(e.tokens)),
		Kind: kind, KindName: kind.String(), Tool: tool, Status: rollout.StatusNone})
}

// push appends a harness turn as one segment.
func (e *Env) push(ids []int32, lps []float32, kind rollout.SegmentKind, tool string, status rollout.ToolStatus) {
	start := len(e.tokens)
	e.append(ids, lps)
	e.segs = append(e.segs, rollout.Segment{Start: int32(start), End: int32(len(e.tokens)),
		Kind: kind, KindName: kind.String(), Tool: tool, Status: status})
}

func (e *Env) append(ids []int32, lps []float32) {
	e.tokens = append(e.tokens, ids...)
	for i := range ids {
		if lps != nil {
			e.lps, e.valid = append(e.lps, lps[i]), append(e.valid, true)
		} else {
			e.lps, e.valid = append(e.lps, 0), append(e.valid, false)
		}
	}
}

// Rollout returns the episode as a rollout with id: tokens, sampler log-probs (null
// for everything the harness inserted), segments, the reward (set once the episode
// is over), the task id as the group and the sampling temperature when
// SetTemperature gave one. The caller sets PolicyVersion. The result
// owns its memory.
func (e *Env) Rollout(id string) *rollout.Rollout {
	r := &rollout.Rollout{
		ID:        id,
		TaskID:    e.task.ID,
		Tokenizer: e.r.tok.Fingerprint(),
		Tokens:    append([]int32(nil), e.tokens...),
		LogProbs:  append([]float32(nil), e.lps...),
		Segments:  append([]rollout.Segment(nil), e.segs...),
		Reward:    e.reward,
		HasReward: e.done,
	}
	bits := make([]byte, (len(e.valid)+7)/8)
	for i, v := range e.valid {
		if v {
			bits[i>>3] |= 1 << (uint(i) & 7)
		}
	}
	r.SetLogProbValidity(bits, 0)
	r.Temperature, r.HasTemperature = e.temp, e.tempSet
	return r
}
