package teacher

import (
	"fmt"
	"strings"
	"text/template"

	"github.com/hindsight-ai/hindsight/rollout"
)

// DefaultPromptTemplate is the user message sent to the LLM teacher. It is a Go
// text/template over PromptData.
const DefaultPromptTemplate = `You are reviewing one step of an AI agent's trajectory in hindsight. Write a short hint that will be shown to the agent right before the step marked STEP, so that it acts better there.

Say what to do (which tool, which approach, what to check first), not what happened later. Do not quote tool output or the step itself. Use at most {{.MaxHintTokens}} tokens. Reply with the hint only.

Why this step was chosen: {{.Reason}}{{if .Tool}} (tool: {{.Tool}}){{end}}{{if .Feedback}}
A reviewer's comment: {{.Feedback}}{{end}}
{{if .System}}
SYSTEM PROMPT (beginning):
{{.System}}
{{end}}
CONTEXT BEFORE THE STEP:
{{.Before}}

STEP:
{{.Step}}

WHAT HAPPENED NEXT (for you only; never quote it):
{{.After}}
`

// DefaultSystemPrompt is the system message sent to the LLM teacher.
const DefaultSystemPrompt = "You are a concise reviewer of AI agent trajectories. You write short, actionable hints."

// PromptData is what the prompt template sees: decoded text of the rollout around the
// selection, cut to OpenAIConfig.MaxContextTokens policy tokens in all.
type PromptData struct {
	System string // the start of the rollout's system segment (≤ 1/8 of the budget)
	Before string // the tokens just before InsertAt (what is left of the budget)
	Step   string // the scored range [InsertAt, End); its tail when over 1/2 of the budget
	After  string // what follows End up to the next policy turn (≤ 1/4 of the budget)
	Reason string // the selection rule
	Tool   string // the target segment's tool, if any
	// Feedback is a person's comment on the selection, if any.
	Feedback      string
	MaxHintTokens int
}

func parsePromptTemplate(text string) (*template.Template, error) {
	return template.New("prompt").Option("missingkey=error").Parse(text)
}

// promptData cuts the local context of sel out of r under a budget of tokens and
// decodes it.
func (t *OpenAITeacher) promptData(r *rollout.Rollout, sel Selection) PromptData {
	budget := int32(t.cfg.MaxContextTokens)
	decode := func(a, b int32) string {
		if a >= b {
			return ""
		}
		s, err := t.tok.Decode(r.Tokens[a:b])
		if err != nil {
			return fmt.Sprintf("[undecodable: %v]", err)
		}
		return s
	}
	d := PromptData{Reason: string(sel.Reason), MaxHintTokens: t.cfg.MaxHintTokens}
	seg := r.Segments[sel.Segment]
	d.Tool = seg.Tool
	if sel.Source >= 0 && sel.Source < len(r.Segments) {
		d.Feedback = strings.TrimSpace(r.Segments[sel.Source].Feedback)
	}
	used := int32(0)
	sysEnd := int32(0)
	if s := r.Segments[0]; s.Kind == rollout.KindSystem {
		sysEnd = min(s.End, s.Start+budget/8)
		d.System = decode(s.Start, sysEnd)
		used += sysEnd - s.Start
		sysEnd = s.End
	}
	stepStart := max(sel.InsertAt, sel.End-budget/2)
	d.Step = decode(stepStart, sel.End)
	used += sel.End - stepStart
	afterEnd := sel.End
	for i := sel.Segment + 1; i < len(r.Segments) && !r.Segments[i].Kind.IsPolicy(); i++ {
		afterEnd = r.Segments[i].End
	}
	afterEnd = min(afterEnd, sel.End+budget/4)
	d.After = decode(sel.End, afterEnd)
	used += afterEnd - sel.End
	beforeStart := max(sysEnd, sel.InsertAt-max(0, budget-used))
	d.Before = decode(beforeStart, sel.InsertAt)
	return d
}
