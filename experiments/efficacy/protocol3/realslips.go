package protocol3

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/hindsight-ai/hindsight/experiments/efficacy"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/gateway"
	"github.com/hindsight-ai/hindsight/toolworld"
)

// RealSystemPrompt is the system turn of the real-model probe: the world's tools
// described for a small instruct model that was never trained on this world, and the
// rule that each assistant message is one command (toolworld.SystemPrompt is the byte
// models' terse list).
const RealSystemPrompt = `You solve a task on a small computer by running commands. Reply with exactly one command per message and nothing else. The result of each command comes back in a tool message.
Commands:
ls - list the directories
ls DIR - list the files in directory DIR
cat DIR/FILE - print a file
grep WORD DIR/FILE - print the lines of a file that contain WORD
calc EXPR - compute an expression in digits, e.g. calc 12+30
get KEY - read the value stored under KEY
set KEY N - store the integer N under KEY
answer X - finish with the answer X`

// RealExample is a worked episode of another task that every probe conversation
// starts with, after the system prompt, as real turns (one-shot): without it the
// model's replies after a tool error imitate the error message rather than issue a
// command (seen on the first probe slips).
var RealExample = []gateway.ChatTurn{
	{Role: "user", Content: "What is the number in the only file in the tmp directory, plus 5?"},
	{Role: "assistant", Content: "ls tmp"},
	{Role: RealToolRole, Content: "fox.txt"},
	{Role: "assistant", Content: "cat tmp/fox.txt"},
	{Role: RealToolRole, Content: "41"},
	{Role: "assistant", Content: "calc 41+5"},
	{Role: RealToolRole, Content: "46"},
	{Role: "assistant", Content: "answer 46"},
}

// RealToolRole is the role of a tool result's turn in the probe's conversations: the
// role the gateway renders an OpenAI tool message with and chatformat.ChatML
// uses.
const RealToolRole = "tool"

// RealSlip is one scripted slip on a held-out task's solution path: the solution's
// calls up to one of them, then a slip in place of that call.
type RealSlip struct {
	TaskID string `json:"task"`
	Family string `json:"family"`
	// Kind is "failed" (the slip's call failed: toolworld.Mistake, or an OwnSlip
	// naming a file or key that does not exist) or "silent" (it worked, with other
	// arguments).
	Kind string `json:"kind"`
	// Turns are the calls before the slip and the slip itself (last), with the
	// tools' outputs.
	Turns []efficacy.Turn `json:"turns"`
	Hint  string          `json:"hint"` // efficacy.SlipHint's text for the retry turn
	// NamesNext: the hint holds "Next: `Right`".
	NamesNext bool   `json:"hint_names_next"`
	Right     string `json:"right"`             // the solution's next call
	Repeat    string `json:"repeat"`            // the slipped call again
	Explore   string `json:"explore,omitempty"` // Explore(Right), "" when it equals Right or Repeat
	task      toolworld.Task
}

// RealSlips makes one slip on each of tasks, in order, until it has n: a call of the
// task's solution (not the answer) drawn uniformly, the solution's calls before it
// run, then in its place a slip of protocol 3's demonstration mix (DefaultDemo: 80%
// OwnSlip, else efficacy.SilentSlip or toolworld.Mistake half and half, Mistake when the
// first cannot spoil the call). A task whose slip has no hint (efficacy.SlipHint empty) is
// passed over. The tools run in a toolworld.Env on the byte tokenizer (only their
// outputs are kept).
func RealSlips(tasks []toolworld.Task, n int, seed uint64) ([]RealSlip, error) {
	tok := tokenizer.NewBytes()
	cfg := DefaultDemo()
	var out []RealSlip
	for i, t := range tasks {
		if len(out) == n {
			break
		}
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		env, err := toolworld.New(t, tok, toolworld.Options{MaxTokens: 1 << 14, MaxCalls: 64})
		if err != nil {
			return nil, fmt.Errorf("real slips: %w", err)
		}
		k := efficacy.NewTracker(t)
		run := func(line string) (string, bool, error) {
			if _, _, err := env.Step(append(tok.EncodeText(line), env.StopID()), nil); err != nil {
				return "", false, fmt.Errorf("real slips: task %s: %w", t.ID, err)
			}
			out, failed := env.Last()
			return out, failed, nil
		}
		at := rng.IntN(t.Calls())
		for _, call := range t.Solution[:at] {
			o, failed, err := run(call)
			if err != nil {
				return nil, err
			}
			if k.Observe(call, o, failed) {
				return nil, fmt.Errorf("real slips: task %s: the solution's call %q is a slip", t.ID, call)
			}
		}
		exp := k.Expected()
		line := ""
		if rng.Float64() < cfg.Own {
			line = OwnSlip(exp, t, rng.IntN)
		} else if rng.IntN(2) == 0 {
			line = efficacy.SilentSlip(exp, t, rng.IntN)
		}
		if line == "" || efficacy.SameCall(line, exp) {
			line = toolworld.Mistake(exp, rng)
		}
		o, failed, err := run(line)
		if err != nil {
			return nil, err
		}
		if !k.Observe(line, o, failed) {
			continue // e.g. an own slip that is the exploring call
		}
		h := efficacy.SlipHint(k)
		if h == "" {
			continue
		}
		s := RealSlip{TaskID: t.ID, Family: t.Family, Kind: "silent", Turns: k.Turns, Hint: h,
			NamesNext: strings.Contains(h, "Next: `"+exp+"`"), Right: exp, Repeat: line, task: t}
		if failed {
			s.Kind = "failed"
		}
		if e := efficacy.Explore(exp); !efficacy.SameCall(e, exp) && !efficacy.SameCall(e, line) {
			s.Explore = e
		}
		out = append(out, s)
	}
	if len(out) < n {
		return out, fmt.Errorf("real slips: %d tasks gave %d slips with a hint, want %d", len(tasks), len(out), n)
	}
	return out, nil
}

// Conversation is s as chat turns, up to the slip's tool result: the system prompt
// (RealSystemPrompt), RealExample, the task's prompt, then each call as an assistant
// turn and its output as a turn of RealToolRole.
func (s RealSlip) Conversation() []gateway.ChatTurn {
	turns := append([]gateway.ChatTurn{{Role: "system", Content: RealSystemPrompt}}, RealExample...)
	turns = append(turns, gateway.ChatTurn{Role: "user", Content: s.task.Prompt})
	for _, t := range s.Turns {
		turns = append(turns, gateway.ChatTurn{Role: "assistant", Content: t.Call}, gateway.ChatTurn{Role: RealToolRole, Content: t.Out})
	}
	return turns
}

// The contexts the real-model probe puts after the slip's result.
const (
	RealNone    = "none"       // nothing: the assistant turn follows the tool result
	RealEmpty   = "empty_hint" // a user turn "Hint: " (HintLabel) and nothing: G2's base
	RealHint    = "hint"       // a user turn "Hint: " + efficacy.SlipHint
	RealSibling = "sibling"    // a user turn efficacy.SiblingText of the task's solution
)

// ContextTurn is the turn that context kind puts after the slip's result; ok is false
// for RealNone.
func (s RealSlip) ContextTurn(kind string) (turn gateway.ChatTurn, ok bool, err error) {
	switch kind {
	case RealNone:
		return gateway.ChatTurn{}, false, nil
	case RealEmpty:
		return gateway.ChatTurn{Role: "user", Content: toolworld.HintLabel}, true, nil
	case RealHint:
		return gateway.ChatTurn{Role: "user", Content: toolworld.HintLabel + s.Hint}, true, nil
	case RealSibling:
		return gateway.ChatTurn{Role: "user", Content: efficacy.SiblingText(s.task.Solution)}, true, nil
	}
	return gateway.ChatTurn{}, false, fmt.Errorf("real probe: unknown context %q", kind)
}

// ChatIDs are a conversation's token ids in the pieces the gateway records them in:
// the rendered differences of the model's chat template, each encoded on its own.
type ChatIDs struct {
	Prefix  []int32 // the conversation up to the slip's tool result (its closing included)
	Context []int32 // the inserted turn (nil for RealNone)
	Gen     []int32 // the generation prompt (the assistant header)
}

// Prompt is the context a next assistant turn is generated from.
func (c ChatIDs) Prompt() []int32 {
	return append(append(append([]int32(nil), c.Prefix...), c.Context...), c.Gen...)
}

// RealChat renders the probe's conversations with a model's own chat template.
type RealChat struct {
	Template *gateway.ChatTemplate
	Tok      tokenizer.Tokenizer
	Stop     int32 // the token that closes an assistant turn
}

// NewRealChat returns the chat of model directory dir's template and tokenizer tok.
// Its stop token is the template's turn-end token that closes an assistant turn (the
// one rendered right after the turn's content), which may differ from eos_token.
func NewRealChat(dir string, tok tokenizer.Tokenizer) (*RealChat, error) {
	t, err := gateway.LoadChatTemplate(dir, tok)
	if err != nil {
		return nil, err
	}
	const probe = "ls probe"
	text, err := t.Render([]gateway.ChatTurn{{Role: "user", Content: "u"}, {Role: "assistant", Content: probe}}, false)
	if err != nil {
		return nil, err
	}
	after := text[strings.LastIndex(text, probe)+len(probe):]
	for _, name := range t.StopTokens() {
		if strings.HasPrefix(after, name) {
			id, _ := tok.SpecialID(name)
			return &RealChat{Template: t, Tok: tok, Stop: id}, nil
		}
	}
	return nil, fmt.Errorf("real chat %s: the template closes an assistant turn with %q, none of its stop tokens %v", dir, after, t.StopTokens())
}

// IDs renders s's conversation, the context of kind after it and the generation
// prompt, and encodes each rendered difference apart. It fails when a later render
// does not extend an earlier one (the template does not render message by message).
func (c *RealChat) IDs(s RealSlip, kind string) (ChatIDs, error) {
	conv := s.Conversation()
	p, err := c.Template.Render(conv, false)
	if err != nil {
		return ChatIDs{}, err
	}
	turn, ok, err := s.ContextTurn(kind)
	if err != nil {
		return ChatIDs{}, err
	}
	pc := p
	if ok {
		conv = append(conv, turn)
		if pc, err = c.Template.Render(conv, false); err != nil {
			return ChatIDs{}, err
		}
	}
	pcg, err := c.Template.Render(conv, true)
	if err != nil {
		return ChatIDs{}, err
	}
	if !strings.HasPrefix(pc, p) || !strings.HasPrefix(pcg, pc) || len(pcg) == len(pc) {
		return ChatIDs{}, fmt.Errorf("real chat %s, %s: the template's renders do not extend one another", s.TaskID, kind)
	}
	ids := ChatIDs{Prefix: c.Tok.Encode(p), Gen: c.Tok.Encode(pcg[len(pc):])}
	if ok {
		ids.Context = c.Tok.Encode(pc[len(p):])
	}
	return ids, nil
}

// Action is the ids of an assistant turn holding call: its text and the stop token.
func (c *RealChat) Action(call string) []int32 { return append(c.Tok.EncodeText(call), c.Stop) }

// Whole renders s's conversation with the context of kind and an assistant turn
// holding call, and encodes it in one piece: what ChatIDs' pieces and Action must
// agree with (up to the template's text after the stop token).
func (c *RealChat) Whole(s RealSlip, kind, call string) (string, []int32, error) {
	conv := s.Conversation()
	turn, ok, err := s.ContextTurn(kind)
	if err != nil {
		return "", nil, err
	}
	if ok {
		conv = append(conv, turn)
	}
	text, err := c.Template.Render(append(conv, gateway.ChatTurn{Role: "assistant", Content: call}), false)
	if err != nil {
		return "", nil, err
	}
	return text, c.Tok.Encode(text), nil
}

// RealDump is one probe conversation written out for an outside check
// (scripts/real_model_probe_check.py): the messages the template renders, the
// teacher-forced action, and the ids hindsight scores (the prompt's pieces, then the
// action and its stop token).
type RealDump struct {
	TaskID   string             `json:"task"`
	Context  string             `json:"context"`
	Messages []gateway.ChatTurn `json:"messages"` // up to the context turn; the generation prompt follows
	Action   string             `json:"action"`   // "right", "repeat" or "explore"
	Call     string             `json:"call"`
	Text     string             `json:"text"` // the whole render with the action's assistant turn
	IDs      []int32            `json:"ids"`
	Prompt   int                `json:"prompt"` // ids before the action
}

// Dump returns s's conversations under every scored context and action.
func (c *RealChat) Dump(s RealSlip) ([]RealDump, error) {
	var out []RealDump
	for _, kind := range realScored {
		ids, err := c.IDs(s, kind)
		if err != nil {
			return nil, err
		}
		msgs := s.Conversation()
		if turn, ok, _ := s.ContextTurn(kind); ok {
			msgs = append(msgs, turn)
		}
		for _, a := range realActions(s) {
			text, _, err := c.Whole(s, kind, a.call)
			if err != nil {
				return nil, err
			}
			p := ids.Prompt()
			out = append(out, RealDump{TaskID: s.TaskID, Context: kind, Messages: msgs, Action: a.name, Call: a.call,
				Text: text, IDs: append(p, c.Action(a.call)...), Prompt: len(p)})
		}
	}
	return out, nil
}
