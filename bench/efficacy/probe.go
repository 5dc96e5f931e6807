package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/gomlx/gomlx/backends"

	"github.com/hindsight-ai/hindsight/experiments/efficacy"
	"github.com/hindsight-ai/hindsight/internal/fsutil"
)

// runProbe measures every efficacy.ProbeSetups hint setup on the same tasks × group
// rollouts of the warm start (seed 99, not an arm's seed) and writes the report to
// out and stdout.
func runProbe(ctx context.Context, backend backends.Backend, model string, w efficacy.World, tasks, group int, temp float64, out string) error {
	c0 := efficacy.CPUTime()
	res, err := efficacy.Probe(ctx, backend, model, w, tasks, group, temp, 99, efficacy.ProbeSetups)
	if err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "go run ./bench/efficacy %s\n", strings.Join(os.Args[1:], " "))
	fmt.Fprintf(&b, "warm start %s, %d train tasks × %d rollouts at temperature %g (seed 99), cpu %.0fs\n\n", model, tasks, group, temp, (efficacy.CPUTime() - c0).Seconds())
	for _, r := range res {
		b.WriteString(r.String())
	}
	fmt.Print(b.String())
	return fsutil.WriteFileBytes(out, []byte(b.String()), 0o644)
}
