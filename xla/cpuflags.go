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

// xlaFlagsEnv is the environment variable XLA reads its debug options from, once
// per process, at the first compile.
const xlaFlagsEnv = "XLA_FLAGS"

// setCPUFlags adds --xla_cpu_experimental_ynn_fusion_type=individual_dot to
// $XLA_FLAGS for a CPU plugin (one whose file name says cpu) that knows the option,
// unless $XLA_FLAGS already sets it: a user's setting wins, and a plugin that does
// not know it (XLA aborts on an unknown flag) is left alone.
func setCPUFlags(plugin string) error {
	if !strings.Contains(strings.ToLower(filepath.Base(plugin)), "cpu") {
		return nil
	}
	flags := os.Getenv(xlaFlagsEnv)
	if strings.Contains(flags, cpuFusionOption) {
		return nil
	}
	known, err := fileContains(plugin, []byte(cpuFusionOption))
	if err != nil {
		return fmt.Errorf("XLA plugin %s: %w", plugin, err)
	}
	if !known {
		return nil
	}
	return os.Setenv(xlaFlagsEnv, strings.TrimSpace(flags+" --"+cpuFusionOption+"="+cpuFusionValue))
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
