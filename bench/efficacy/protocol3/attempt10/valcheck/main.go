// Command valcheck is attempt 10's calibration of the validation split (run before
// attempt 10 was registered; output in ../valcheck.log): the family mix of the first 60
// and all 200 validation tasks and of the 250 held-out tasks, and each model's greedy
// success (protocol3.World) on the first 60 and all 200 validation tasks, per family.
//
//	go build -o /tmp/eff10-calib ./bench/efficacy/protocol3/attempt10/valcheck
//	/tmp/eff10-calib MODEL...
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/hindsight-ai/hindsight/collect"
	"github.com/hindsight-ai/hindsight/experiments/efficacy"
	"github.com/hindsight-ai/hindsight/experiments/efficacy/protocol3"
	"github.com/hindsight-ai/hindsight/toolworld"
	"github.com/hindsight-ai/hindsight/xla"
)

func main() {
	ctx := context.Background()
	fam := func(ts []toolworld.Task) map[string]int {
		m := map[string]int{}
		for _, t := range ts {
			m[t.Family]++
		}
		return m
	}
	val, _ := toolworld.Tasks(toolworld.SplitValidation, 200)
	held, _ := toolworld.Tasks(toolworld.SplitHeldout, 0)
	fmt.Println("families val60", fam(val[:60]), "val200", fam(val), "held", fam(held))
	backend, err := xla.NewBackend(xla.ResolveBackend("xla-cpu", ""))
	if err != nil {
		panic(err)
	}
	for _, m := range os.Args[1:] {
		p, err := efficacy.OpenPolicy(backend, m)
		if err != nil {
			panic(err)
		}
		c0 := efficacy.CPUTime()
		envs, err := collect.Episodes(ctx, p.Sampler, p.Tok, val, protocol3.World().Episodes(1, 0, 0))
		if err != nil {
			panic(err)
		}
		ok60, ok := 0, 0
		for i, e := range envs {
			if e.Reward() == 1 {
				ok++
				if i < 60 {
					ok60++
				}
			}
		}
		fmt.Printf("%s: val60 %d/60 = %.1f%%, val200 %d/200 = %.1f%%, by family %v, cpu %.0fs\n", m, ok60, 100*float64(ok60)/60, ok, 100*float64(ok)/200, efficacy.ByFamily(envs), (efficacy.CPUTime() - c0).Seconds())
	}
}
