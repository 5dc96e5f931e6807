package toolworld

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Agent is a scripted policy that acts by text: given the task and the output of its
// last call (empty before the first), it returns its next command line.
type Agent interface {
	Act(t Task, lastOutput string, lastFailed bool) string
}

// Hinter is what an Agent may also be: after a failed call, Play asks it for a hint
// (it may read the episode so far, say through env.Rollout and a teacher) and inserts
// a non-empty one as a hint turn (Env.Hint) before the agent's next turn; a hint that
// does not fit is skipped.
type Hinter interface {
	Hint(env *Env) string
}

// Play runs an episode of env with agent until it ends or maxTurns turns have passed,
// each turn encoded injection-safe and closed with the stop token, with null sampler
// log-probs (scripted text is not sampled). Like a sampler, it cuts a turn at the
// env's Budget. It returns the reward.
func Play(env *Env, agent Agent, maxTurns int) (float32, error) {
	for turn := 0; !env.Done() && turn < maxTurns; turn++ {
		out, failed := env.Last()
		if h, ok := agent.(Hinter); ok && failed {
			if text := h.Hint(env); text != "" {
				if _, err := env.Hint(text); err != nil && !errors.Is(err, ErrNoRoom) {
					return 0, fmt.Errorf("play %s: %w", env.Task().ID, err)
				}
			}
		}
		line := agent.Act(env.Task(), out, failed)
		gen := append(env.r.tok.EncodeText(line), env.StopID())
		gen = gen[:min(len(gen), env.Budget())]
		if _, _, err := env.Step(gen, nil); err != nil {
			return 0, fmt.Errorf("play %s: %w", env.Task().ID, err)
		}
	}
	return env.Reward(), nil
}

// Oracle plays the task's solution call by call.
type Oracle struct{ next int }

// Act implements Agent.
func (o *Oracle) Act(t Task, _ string, _ bool) string {
	i := min(o.next, len(t.Solution)-1)
	o.next++
	return t.Solution[i]
}

// Noisy plays the solution but, before each call, makes a mistake with probability
// P (an unknown tool, a bad flag, a missing file, a wrong argument type), sees the
// error, and then makes the right call: the demonstrations of recovering from a
// failed call that supervised warm starts need. It never errs twice in a row.
type Noisy struct {
	P     float64
	Rng   *rand.Rand
	next  int
	erred bool
}

// NewNoisy returns a Noisy agent with mistake probability p and its own random stream.
func NewNoisy(p float64, seed uint64) *Noisy {
	return &Noisy{P: p, Rng: rand.New(rand.NewPCG(seed, 0x6e6f697379))}
}

// Act implements Agent.
func (n *Noisy) Act(t Task, _ string, _ bool) string {
	right := t.Solution[min(n.next, len(t.Solution)-1)]
	if !n.erred && n.Rng.Float64() < n.P {
		if bad := Mistake(right, n.Rng); bad != "" {
			n.erred = true
			return bad
		}
	}
	n.erred = false
	n.next++
	return right
}

// Mistake returns a wrong version of the command line call that fails when run: a
// misspelt tool, a flag the tool lacks, a path that does not exist, or a word where a
// number goes. It returns "" for a call it cannot spoil (the final answer).
func Mistake(call string, rng *rand.Rand) string {
	c := ParseCall(call)
	if !c.IsTool() {
		return ""
	}
	args := strings.Join(c.Args, " ")
	kinds := []func() string{
		func() string { return typo(c.Name, rng) + " " + args },                             // unknown tool
		func() string { return c.Name + " -" + string(rune('j'+rng.IntN(4))) + " " + args }, // bad flag
	}
	switch c.Name {
	case "ls", "cat":
		kinds = append(kinds, func() string { // missing file or directory
			return c.Name + " " + missingPath(c.Args[0], rng)
		})
	case "grep":
		kinds = append(kinds, func() string { return "grep " + c.Args[0] + " " + missingPath(c.Args[1], rng) })
	case "calc":
		kinds = append(kinds, func() string { // a word where a number goes
			return "calc " + words[rng.IntN(len(words))] + strings.TrimLeft(args, "0123456789")
		})
	case "get":
		kinds = append(kinds, func() string { return "get " + missingWord(c.Args[0], rng) })
	case "set":
		kinds = append(kinds, func() string { return "set " + c.Args[0] + " " + words[rng.IntN(len(words))] })
	}
	return kinds[rng.IntN(len(kinds))]()
}

// typo misspells a tool name into one that is not a tool.
func typo(name string, rng *rand.Rand) string {
	for {
		b := []byte(name)
		i := rng.IntN(len(b))
		b[i] = byte('a' + rng.IntN(26))
		if s := string(b); !ParseCall(s).IsTool() {
			return s
		}
	}
}

// missingPath returns a path next to p that the generator never makes (its words
// are three letters, this one four).
func missingPath(p string, rng *rand.Rand) string {
	if dir, _, ok := strings.Cut(p, "/"); ok {
		return dir + "/" + missingWord("", rng) + ".txt"
	}
	return missingWord("", rng)
}

func missingWord(_ string, rng *rand.Rand) string {
	return words[rng.IntN(len(words))] + strconv.Itoa(rng.IntN(10))
}

// Random is the baseline: random tools with random arguments from the world's
// vocabulary, and an answer with a random number at random.
type Random struct{ Rng *rand.Rand }

// NewRandom returns a Random agent with its own random stream.
func NewRandom(seed uint64) *Random { return &Random{Rng: rand.New(rand.NewPCG(seed, 0x72616e64))} }

// Act implements Agent.
func (r *Random) Act(Task, string, bool) string {
	rng := r.Rng
	word := func() string { return words[rng.IntN(len(words))] }
	num := func() string { return strconv.Itoa(10 + rng.IntN(90)) }
	dir := func() string { return dirs[rng.IntN(len(dirs))] }
	switch rng.IntN(8) {
	case 0:
		return "ls " + dir()
	case 1:
		return "cat " + dir() + "/" + word() + ".txt"
	case 2:
		return "grep " + word() + " " + dir()
	case 3:
		return "calc " + num() + "+" + num()
	case 4:
		return "get " + word()
	case 5:
		return "set " + word() + " " + num()
	case 6:
		return word()
	}
	return "answer " + strconv.Itoa(10+rng.IntN(990))
}
