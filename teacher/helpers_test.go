package teacher

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/data/tokenizer/tokenizertest"
	"github.com/hindsight-ai/hindsight/rollout"
)

// part is one segment of a hand-built rollout on byte tokens.
type part struct {
	kind     rollout.SegmentKind
	text     string
	tool     string
	status   rollout.ToolStatus
	feedback string
	lp       float32 // sampler log-prob of every token of a policy segment; 0 means -0.1
}

func sys(text string) part {
	return part{kind: rollout.KindSystem, text: text, status: rollout.StatusNone}
}
func user(text string) part {
	return part{kind: rollout.KindUser, text: text, status: rollout.StatusNone}
}
func think(text string) part {
	return part{kind: rollout.KindReasoning, text: text, status: rollout.StatusNone}
}
func say(text string) part {
	return part{kind: rollout.KindAssistant, text: text, status: rollout.StatusNone}
}
func call(tool, text string) part {
	return part{kind: rollout.KindToolCall, tool: tool, text: text, status: rollout.StatusNone}
}
func result(tool string, status rollout.ToolStatus, text string) part {
	return part{kind: rollout.KindToolResult, tool: tool, text: text, status: status}
}

func (p part) withFeedback(f string) part { p.feedback = f; return p }
func (p part) withLP(lp float32) part     { p.lp = lp; return p }

// build returns a rollout of byte tokens made of parts, in order. Policy segments get
// sampler log-probs; the others have null log-probs.
func build(parts ...part) *rollout.Rollout {
	r := &rollout.Rollout{ID: "test", Tokenizer: rollout.BytesTokenizer}
	var valid []byte
	for _, p := range parts {
		start := int32(len(r.Tokens))
		for i := 0; i < len(p.text); i++ {
			n := len(r.Tokens)
			r.Tokens = append(r.Tokens, int32(p.text[i]))
			if n%8 == 0 {
				valid = append(valid, 0)
			}
			lp := float32(0)
			if p.kind.IsPolicy() {
				valid[n>>3] |= 1 << (uint(n) & 7)
				lp = -0.1
				if p.lp != 0 {
					lp = p.lp
				}
			}
			r.LogProbs = append(r.LogProbs, lp)
		}
		r.Segments = append(r.Segments, rollout.Segment{Start: start, End: int32(len(r.Tokens)), Kind: p.kind,
			KindName: p.kind.String(), Tool: p.tool, Status: p.status, Feedback: p.feedback})
	}
	r.SetLogProbValidity(valid, 0)
	return r
}

const sysTools = "You are a coding agent. Tools: read_file, grep, search_code, run_tests. Call a tool as <tool_call>{...}</tool_call>.\n"

// loadTokenizer returns the tokenizer of data/tokenizer/testdata/tokenizers/<name>, gunzipped
// into a temp dir when stored gzipped; it skips the test when the file is absent.
func loadTokenizer(t *testing.T, name string) (tokenizer.Tokenizer, string) {
	t.Helper()
	if name == "bytes" {
		return tokenizer.NewBytes(), filepath.Join(tokenizertest.Dir(), "bytes", "tokenizer.json")
	}
	path := filepath.Join(tokenizertest.WriteDir(t, name), "tokenizer.json")
	tok, err := tokenizer.Load(path)
	require.NoError(t, err)
	return tok, path
}
