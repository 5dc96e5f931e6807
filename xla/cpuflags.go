package xla

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// cpuFusionOption and cpuFusionValue keep XLA CPU from fusing a chain of matrix
// products and the elementwise work between them into one YNNPACK kernel, as it
// does by default: in the scorer's online softmax (attendPaged) such a kernel took
// every key block's probabilities as inputs at once, so a step's temporaries grew
// with the rollout (302 MiB at a 16k span, against 71 MiB with each product its
// own kernel; docs/performance.md "Long rollouts: causal attention cost"). individual_dot keeps
// YNNPACK for every product on its own: scoring a Qwen3-0.6B-shaped model took the
// same CPU time as with the default (18.8 against 18.9 CPU-s per warm pass of 1,024
// tokens, two runs each), where no YNNPACK at all took 1.5× as long.
const (
	cpuFusionOption = "xla_cpu_experimental_ynn_fusion_type"
	cpuFusionValue  = "individual_dot"
)

// cpuSchedulerOption off makes XLA CPU order a program's operations to use the
// least memory, not to run as many at once as it can: under its default
// concurrency-optimised schedule no temporary shares a buffer with another that
// an independent operation may still be writing. The gradient norm of the AdamW
// update (sumSquares: each gradient squared, then summed; XLA CPU fuses neither the
// square nor a dot of a vector with itself into the sum) then held every squared
// gradient at once, as much memory as the gradients, 2.2 GiB at the qwen3-0.6b
// shape when one program summed them all (its buffer assignment: 80 MiB of
// temporaries for 80 MiB of gradients, against 4 MiB with this option off; now a
// program per group, adamW.gradNorm); docs/performance.md "Training-step memory".
const cpuSchedulerOption = "xla_cpu_enable_concurrency_optimized_scheduler"

// cpuFlags are the options setCPUFlags adds, with their values.
var cpuFlags = [][2]string{{cpuFusionOption, cpuFusionValue}, {cpuSchedulerOption, "false"}}

// xlaFlagsEnv is the environment variable XLA reads its debug options from, once
// per process, at the first compile.
const xlaFlagsEnv = "XLA_FLAGS"

// setCPUFlags adds each of cpuFlags (--xla_cpu_experimental_ynn_fusion_type=
// individual_dot, --xla_cpu_enable_concurrency_optimized_scheduler=false) to
// $XLA_FLAGS for a CPU plugin (one whose file name says cpu) that knows the option,
// unless $XLA_FLAGS already sets it: a user's setting wins, and a plugin that does
// not know it (XLA aborts on an unknown flag) is left alone.
func setCPUFlags(plugin string) error {
	if !strings.Contains(strings.ToLower(filepath.Base(plugin)), "cpu") {
		return nil
	}
	had := os.Getenv(xlaFlagsEnv)
	flags := had
	for _, f := range cpuFlags {
		if strings.Contains(flags, f[0]) {
			continue
		}
		known, err := fileContains(plugin, []byte(f[0]))
		if err != nil {
			return fmt.Errorf("XLA plugin %s: %w", plugin, err)
		}
		if known {
			flags = strings.TrimSpace(flags + " --" + f[0] + "=" + f[1])
		}
	}
	if flags == had {
		return nil
	}
	return os.Setenv(xlaFlagsEnv, flags)
}

// fileContains says whether the file at path holds needle, reading it in pieces.
func fileContains(path string, needle []byte) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	buf := make([]byte, 4<<20)
	keep := 0 // bytes carried over from the previous piece, so a match may straddle
	for {
		n, err := io.ReadFull(f, buf[keep:])
		if bytes.Contains(buf[:keep+n], needle) {
			return true, nil
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		keep = len(needle) - 1
		copy(buf, buf[len(buf)-keep:])
	}
}
