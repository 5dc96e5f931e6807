package protocol3

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/hindsight-ai/hindsight/experiments/efficacy"

	"github.com/gomlx/gomlx/backends"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/toolworld"
	"github.com/hindsight-ai/hindsight/xla"
)

// RealNext is G1-style on a real model: the greedy next assistant turn after each
// slip with one context, classified against the call the task needed.
type RealNext struct {
	Context string `json:"context"`
	Slips   int    `json:"slips"`
	// Exact: the reply's first line is the right call (efficacy.SameCall). Loose: some line
	// of it holds the right tool's name followed by every argument of the right call
	// (LooseCall); LooseFirst: its first line does (a reply that recites several
	// calls, e.g. the sibling's, counts for Loose when any line holds the right one).
	// Repeat: the first line is the slipped call again; Explore: the exploring call.
	Exact      int `json:"exact"`
	Loose      int `json:"loose"`
	LooseFirst int `json:"loose_first_line"`
	Repeat     int `json:"repeat"`
	Explore    int `json:"explore"`
	// ExactNamed and LooseNamed count the same over the slips whose hint names the
	// right call (RealSlip.NamesNext), Named of them.
	Named      int `json:"named"`
	ExactNamed int `json:"exact_named"`
	LooseNamed int `json:"loose_named"`
}

// RealDelta is G2 on a real model: mean over slips of Σ Δ log-prob (nats, the
// action's tokens and its stop token) of a teacher-forced next action with a context
// minus with the empty hint turn.
type RealDelta struct {
	Context string  `json:"context"`
	Right   float64 `json:"right"`
	Repeat  float64 `json:"repeat"`
	Explore float64 `json:"explore"`
	// Wrong pools Repeat and Explore over the wrong actions compared (as efficacy.ProbeDelta).
	Wrong float64 `json:"wrong"`
	// RightNamed is Right over the slips whose hint names the right call.
	RightNamed float64 `json:"right_named"`
	// RightFirst counts the slips at which, after this context, the right call's Σ
	// log-prob is above every wrong action's (of Slips); EmptyRightFirst the same
	// after the empty hint turn.
	RightFirst      int `json:"right_first"`
	EmptyRightFirst int `json:"empty_right_first"`
	Slips           int `json:"slips"`
}

// RealSlipResult is one slip's measurements: Σ log-prob of each action under each
// context, and each context's greedy reply.
type RealSlipResult struct {
	RealSlip
	// LogProb[context][action]: Σ log π over the action's tokens and stop token
	// (action "right", "repeat", "explore").
	LogProb map[string]map[string]float64 `json:"logprob"`
	Reply   map[string]string             `json:"reply"`
}

// RealProbeResult is the real-model probe: G2's deltas and G1-style next calls.
type RealProbeResult struct {
	Model    string         `json:"model"`
	Template string         `json:"chat_template"`
	Slips    int            `json:"slips"`
	Kinds    map[string]int `json:"slip_kinds"`
	Named    int            `json:"hints_naming_next"`
	// PiecesMatch counts the (slip, context, action) conversations whose piecewise
	// ids (ChatIDs, Action) equal the whole render's encoding, of Pieces checked.
	PiecesMatch int               `json:"pieces_match"`
	Pieces      int               `json:"pieces"`
	Delta       []RealDelta       `json:"g2_delta"`
	Next        []RealNext        `json:"g1_next"`
	BaseRightLP float64           `json:"base_right_logprob"` // mean Σ log π of the right call after the empty hint
	MaxNew      int               `json:"max_new_tokens"`
	Items       []RealSlipResult  `json:"items"`
	CPUSeconds  float64           `json:"cpu_seconds"`
	Command     string            `json:"command,omitempty"`
	Notes       map[string]string `json:"notes,omitempty"`
}

// realContexts are the contexts scored (G2) and the greedy replies' (G1), in order.
var (
	realScored = []string{RealEmpty, RealHint, RealSibling, RealNone}
	realGreedy = []string{RealNone, RealHint, RealSibling}
)

// RealProbe measures slips on the model at dir: for each slip, Σ log-prob of the right,
// repeated and exploring calls after each context (one pass over the conversation's
// prefix, then Scorer.ScoreHinted with each context turn as the hint), and the greedy
// reply (at most maxNew tokens) after the contexts none, hint and sibling. The
// conversations are rendered with the model's own chat template (RealChat). Slips are
// measured one at a time; after every saveEvery of them (and at the end) save, when
// not nil, gets the result so far, so a run stopped early keeps what it measured.
func RealProbe(ctx context.Context, backend backends.Backend, dir string, slips []RealSlip, maxNew, saveEvery int, save func(RealProbeResult) error, progress func(string)) (RealProbeResult, error) {
	c0 := efficacy.CPUTime()
	res := RealProbeResult{Model: dir, Kinds: map[string]int{}, MaxNew: maxNew}
	p, err := efficacy.OpenPolicy(backend, dir)
	if err != nil {
		return res, err
	}
	chat, err := NewRealChat(dir, p.Tok)
	if err != nil {
		return res, err
	}
	res.Template = chat.Template.Source()
	sc, err := xla.NewScorer(backend, p.Model, xla.ScorerOptions{})
	if err != nil {
		return res, fmt.Errorf("real probe: %w", err)
	}
	for i, s := range slips {
		r, match, checked, err := scoreSlip(ctx, sc, chat, s)
		if err == nil {
			err = greedyReplies(ctx, p.Sampler, chat, &r, maxNew)
		}
		if err != nil {
			return res, fmt.Errorf("real probe: slip %d (%s): %w", i, s.TaskID, err)
		}
		res.Items = append(res.Items, r)
		res.PiecesMatch, res.Pieces = res.PiecesMatch+match, res.Pieces+checked
		res.summarize()
		res.CPUSeconds = (efficacy.CPUTime() - c0).Seconds()
		if progress != nil {
			progress(fmt.Sprintf("real probe: slip %d/%d %s cpu %.0fs", i+1, len(slips), s.TaskID, res.CPUSeconds))
		}
		if save != nil && ((i+1)%max(saveEvery, 1) == 0 || i+1 == len(slips)) {
			if err := save(res); err != nil {
				return res, err
			}
		}
	}
	return res, nil
}

// scoreSlip scores s's actions under every context of realScored; of the checked
// conversations (one per context and action), match have piecewise ids equal to the
// whole render's encoding.
func scoreSlip(ctx context.Context, sc *xla.Scorer, chat *RealChat, s RealSlip) (r RealSlipResult, match, checked int, err error) {
	r = RealSlipResult{RealSlip: s, LogProb: map[string]map[string]float64{}, Reply: map[string]string{}}
	ids := map[string]ChatIDs{}
	for _, kind := range realScored {
		c, err := chat.IDs(s, kind)
		if err != nil {
			return r, 0, 0, err
		}
		ids[kind] = c
		r.LogProb[kind] = map[string]float64{}
	}
	prefix := ids[RealNone].Prefix
	_, cache, err := sc.Score(ctx, prefix)
	if err != nil {
		return r, 0, 0, err
	}
	defer cache.Close()
	for _, a := range realActions(s) {
		act := chat.Action(a.call)
		gen := ids[RealNone].Gen
		toks := slices.Concat(prefix, gen, act)
		segs := make([]credit.Hint, len(realScored))
		for j, kind := range realScored {
			c := ids[kind]
			if !slices.Equal(c.Prefix, prefix) || !slices.Equal(c.Gen, gen) {
				return r, 0, 0, fmt.Errorf("context %s: the prefix or the generation prompt encodes differently", kind)
			}
			segs[j] = credit.Hint{InsertAt: len(prefix), End: len(toks), Tokens: c.Context}
			_, whole, err := chat.Whole(s, kind, a.call)
			if err != nil {
				return r, 0, 0, err
			}
			if pieces := slices.Concat(c.Prompt(), act); len(whole) >= len(pieces) && slices.Equal(whole[:len(pieces)], pieces) {
				match++
			}
			checked++
		}
		q, err := sc.ScoreHinted(ctx, toks, cache, segs)
		if err != nil {
			return r, 0, 0, err
		}
		for j, kind := range realScored {
			sum := 0.0
			for _, v := range q[j][len(gen):] { // the action's tokens and its stop, not the header
				sum += float64(v)
			}
			r.LogProb[kind][a.name] = sum
		}
	}
	return r, match, checked, nil
}

type realAction struct{ name, call string }

// realActions are s's teacher-forced next actions: the right call, the slip repeated
// and, when it differs from both, the exploring call.
func realActions(s RealSlip) []realAction {
	as := []realAction{{"right", s.Right}, {"repeat", s.Repeat}}
	if s.Explore != "" {
		as = append(as, realAction{"explore", s.Explore})
	}
	return as
}

// greedyReplies fills r.Reply with the greedy next turn (stop token dropped) after
// every context of realGreedy, the contexts decoded together as one batch.
func greedyReplies(ctx context.Context, sm *xla.Sampler, chat *RealChat, r *RealSlipResult, maxNew int) error {
	prompts := make([][]int32, len(realGreedy))
	for j, kind := range realGreedy {
		c, err := chat.IDs(r.RealSlip, kind)
		if err != nil {
			return err
		}
		prompts[j] = c.Prompt()
	}
	out, err := sm.Generate(ctx, prompts, xla.SampleOptions{MaxNew: maxNew, Stop: []int32{chat.Stop}})
	if err != nil {
		return fmt.Errorf("greedy replies: %w", err)
	}
	for j, kind := range realGreedy {
		toks := out[j].Tokens
		if n := len(toks); n > 0 && toks[n-1] == chat.Stop {
			toks = toks[:n-1]
		}
		text, err := chat.Tok.Decode(toks)
		if err != nil {
			return fmt.Errorf("greedy replies: %w", err)
		}
		r.Reply[kind] = text
	}
	return nil
}

// LooseCall reports whether reply holds call loosely: some line of it, with
// backticks, quotes and "$" taken away and trailing ".,;!?" trimmed from each word,
// has call's tool name as a word followed (anywhere later on the line) by every
// argument of call. "cat notes/owl.txt" matches "Run `cat notes/owl.txt`." and "cat
// -c notes/owl.txt"; it matches neither "cat notes/ant.txt" nor a made-up tool output
// "cat: notes/owl.txt: No such file" (the name's colon is kept).
func LooseCall(reply, call string) bool {
	c := toolworld.ParseCall(call)
	if c.Name == "" {
		return false
	}
	clean := strings.NewReplacer("`", " ", "\"", " ", "'", " ", "$", " ").Replace(reply)
	for line := range strings.SplitSeq(clean, "\n") {
		ws := strings.Fields(line)
		for i := range ws {
			ws[i] = strings.TrimRight(ws[i], ".,;!?")
		}
		for i, w := range ws {
			if w != c.Name {
				continue
			}
			rest := ws[i+1:]
			all := true
			for _, a := range c.Args {
				if !slices.Contains(rest, a) {
					all = false
					break
				}
			}
			if all {
				return true
			}
		}
	}
	return false
}

// firstLine is the first non-empty line of s, trimmed.
func firstLine(s string) string {
	for line := range strings.SplitSeq(s, "\n") {
		if t := strings.TrimSpace(line); t != "" {
			return t
		}
	}
	return ""
}

// Resummarize recomputes the summary (deltas, next-call counts) from res.Items, for
// a result read back from its JSON after the summary's definitions changed.
func (res *RealProbeResult) Resummarize() { res.summarize() }

// summarize computes the deltas and next-call counts from the items.
func (res *RealProbeResult) summarize() {
	res.Slips = len(res.Items)
	res.Kinds = map[string]int{}
	res.Named, res.BaseRightLP = 0, 0
	res.Delta, res.Next = nil, nil
	for _, it := range res.Items {
		res.Kinds[it.Kind]++
		if it.NamesNext {
			res.Named++
		}
		res.BaseRightLP += it.LogProb[RealEmpty]["right"]
	}
	n := float64(len(res.Items))
	if n == 0 {
		return
	}
	res.BaseRightLP /= n
	for _, kind := range []string{RealHint, RealSibling, RealNone} {
		d := RealDelta{Context: kind, Slips: len(res.Items)}
		var nExp, nWrong, nNamed int
		for _, it := range res.Items {
			d.RightFirst += b2i(rightFirst(it.LogProb[kind]))
			d.EmptyRightFirst += b2i(rightFirst(it.LogProb[RealEmpty]))
			delta := func(a string) float64 { return it.LogProb[kind][a] - it.LogProb[RealEmpty][a] }
			d.Right += delta("right")
			d.Repeat += delta("repeat")
			d.Wrong += delta("repeat")
			nWrong++
			if it.Explore != "" {
				d.Explore += delta("explore")
				d.Wrong += delta("explore")
				nExp, nWrong = nExp+1, nWrong+1
			}
			if it.NamesNext {
				d.RightNamed += delta("right")
				nNamed++
			}
		}
		d.Right, d.Repeat = d.Right/n, d.Repeat/n
		d.Explore /= float64(max(nExp, 1))
		d.Wrong /= float64(nWrong)
		d.RightNamed /= float64(max(nNamed, 1))
		res.Delta = append(res.Delta, d)
	}
	for _, kind := range realGreedy {
		x := RealNext{Context: kind, Slips: len(res.Items)}
		for _, it := range res.Items {
			reply := it.Reply[kind]
			first := firstLine(reply)
			exact, loose := efficacy.SameCall(first, it.Right), LooseCall(reply, it.Right)
			x.Exact, x.Loose = x.Exact+b2i(exact), x.Loose+b2i(loose)
			x.LooseFirst += b2i(LooseCall(first, it.Right))
			x.Repeat += b2i(efficacy.SameCall(first, it.Repeat))
			x.Explore += b2i(it.Explore != "" && efficacy.SameCall(first, it.Explore))
			if it.NamesNext {
				x.Named++
				x.ExactNamed, x.LooseNamed = x.ExactNamed+b2i(exact), x.LooseNamed+b2i(loose)
			}
		}
		res.Next = append(res.Next, x)
	}
}

// rightFirst reports whether the right action's log-prob is above every other's.
func rightFirst(lp map[string]float64) bool {
	for a, v := range lp {
		if a != "right" && v >= lp["right"] {
			return false
		}
	}
	return true
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Table is the probe's numbers as Markdown tables: G2's deltas and G1-style next
// calls.
func (res RealProbeResult) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d slips (%v), %d hints name the right call; chat template %s; pieces equal to the whole render %d/%d\n\n",
		res.Slips, res.Kinds, res.Named, res.Template, res.PiecesMatch, res.Pieces)
	fmt.Fprintf(&b, "G2: mean Σ Δ log-prob vs the empty hint turn (nats); right call after the empty hint: %.2f nats\n\n", res.BaseRightLP)
	b.WriteString("| context | right | right (hint names it) | repeat the slip | explore | wrong (pooled) | right call above the wrong ones (empty hint) |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, d := range res.Delta {
		fmt.Fprintf(&b, "| %s | %+.2f | %+.2f | %+.2f | %+.2f | %+.2f | %d/%d (%d/%d) |\n", d.Context, d.Right, d.RightNamed, d.Repeat, d.Explore, d.Wrong,
			d.RightFirst, d.Slips, d.EmptyRightFirst, d.Slips)
	}
	b.WriteString("\nG1-style: greedy next call after the slip\n\n")
	b.WriteString("| context | exact | loose, first line | loose, any line | exact, hint names it | loose, hint names it | repeat | explore |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range res.Next {
		fmt.Fprintf(&b, "| %s | %d/%d | %d/%d | %d/%d | %d/%d | %d/%d | %d | %d |\n", x.Context, x.Exact, x.Slips, x.LooseFirst, x.Slips, x.Loose, x.Slips,
			x.ExactNamed, x.Named, x.LooseNamed, x.Named, x.Repeat, x.Explore)
	}
	return b.String()
}
