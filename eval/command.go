package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"
)

// DefaultCommandTimeout bounds a command suite without its own timeout.
const DefaultCommandTimeout = 10 * time.Minute

// runCommand runs a command suite for one checkpoint as a child process (never on the
// device) and returns the numeric fields of the one JSON object it prints on stdout.
// The child sees HINDSIGHT_CHECKPOINT (the checkpoint directory) and HINDSIGHT_STEP.
func runCommand(ctx context.Context, s SuiteConfig, step int64, checkpoint string) (map[string]float64, error) {
	timeout := s.Timeout
	if timeout == 0 {
		timeout = DefaultCommandTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.Command[0], s.Command[1:]...)
	cmd.Env = append(os.Environ(), "HINDSIGHT_CHECKPOINT="+checkpoint, "HINDSIGHT_STEP="+strconv.FormatInt(step, 10))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return nil, fmt.Errorf("command %s: timed out after %v%s", s.Command[0], timeout, stderrTail(stderr.Bytes()))
	}
	if err != nil && errors.Is(context.Cause(ctx), ErrStoppedAtShutdown) {
		return nil, fmt.Errorf("command %s: %w", s.Command[0], ErrStoppedAtShutdown)
	}
	if err != nil {
		return nil, fmt.Errorf("command %s: %w%s", s.Command[0], err, stderrTail(stderr.Bytes()))
	}
	return parseMetrics(stdout.Bytes())
}

// parseMetrics reads one JSON object and keeps its numeric fields (booleans as 0/1).
func parseMetrics(b []byte) (map[string]float64, error) {
	var obj map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&obj); err != nil {
		return nil, fmt.Errorf("stdout is not one JSON object: %w (got %q)", err, clip(b, 200))
	}
	if dec.More() {
		return nil, fmt.Errorf("stdout holds more than one JSON value (got %q)", clip(b, 200))
	}
	m := map[string]float64{}
	for k, v := range obj {
		switch x := v.(type) {
		case float64:
			m[k] = x
		case bool:
			m[k] = 0
			if x {
				m[k] = 1
			}
		}
	}
	if len(m) == 0 {
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return nil, fmt.Errorf("stdout's JSON object has no numeric field (fields: %s)", strings.Join(keys, ", "))
	}
	return m, nil
}

func stderrTail(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return ""
	}
	if len(b) > 400 {
		b = b[len(b)-400:]
	}
	return "; stderr: " + string(b)
}

func clip(b []byte, n int) string {
	b = bytes.TrimSpace(b)
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
