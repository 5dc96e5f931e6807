package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// benchGPUProgram is the GPU run's own binary (bench/gpu): the benchmarks are not
// linked into the product, and `hindsight bench-gpu` only finds and runs it.
const benchGPUProgram = "hindsight-bench-gpu"

// benchGPUCmd is `hindsight bench-gpu …`: it runs hindsight-bench-gpu, found beside
// this executable or on PATH, with the same arguments, and exits with its code.
func benchGPUCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	bin, err := findBenchGPU()
	if err != nil {
		fmt.Fprintf(stderr, "hindsight bench-gpu: %v\n"+
			"The GPU benchmarks are their own program (bench/gpu), not part of hindsight. From a source checkout:\n"+
			"  go build -o \"$(dirname \"$(command -v hindsight)\")/%s\" ./bench/gpu   # then hindsight bench-gpu works\n"+
			"  go run ./bench/gpu -out DIR -cpu …                                     # or run it directly\n"+
			"  bench/gpu/run.sh [--cpu] OUTDIR                                         # or the whole GPU run\n", err, benchGPUProgram)
		return 1
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Args[0] = "hindsight bench-gpu" // the program's messages name this command
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	// On SIGINT/SIGTERM the program records what it has and stops; kill it only if it
	// does not.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = time.Minute
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		return exit.ExitCode()
	default:
		fmt.Fprintf(stderr, "hindsight bench-gpu: run %s: %v\n", bin, err)
		return 1
	}
}

// findBenchGPU returns hindsight-bench-gpu's path: beside this executable, else on
// PATH.
func findBenchGPU() (string, error) {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), benchGPUProgram)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	p, err := exec.LookPath(benchGPUProgram)
	if err != nil {
		return "", fmt.Errorf("no %s beside this executable or on PATH", benchGPUProgram)
	}
	return p, nil
}
