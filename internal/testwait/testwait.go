// Package testwait is how tests wait for something the program does: they poll for
// the event (a log line, a file, a status field) and give up only after a deadline
// that catches a hang, never one that judges speed. Every such deadline is
// multiplied by $HINDSIGHT_TEST_TIMEOUT_SCALE, so a slow or shared machine (or CI's
// pass with a CPU hog beside the tests) raises them all at once instead of failing
// (docs/development.md "Tests on a loaded machine").
package testwait

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"testing"
	"time"
)

// ScaleEnv names the variable that multiplies every hang guard of the tests
// (default 1; e.g. 3 under a CPU hog).
const ScaleEnv = "HINDSIGHT_TEST_TIMEOUT_SCALE"

// Scale is $HINDSIGHT_TEST_TIMEOUT_SCALE, or 1 when it is unset. A value that is not
// a positive number panics: a typo must not silently shorten every deadline.
func Scale() float64 {
	v := os.Getenv(ScaleEnv)
	if v == "" {
		return 1
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f > 0) || math.IsInf(f, 0) {
		panic(fmt.Sprintf("%s=%q: want a positive number such as 3", ScaleEnv, v))
	}
	return f
}

// Guard returns d × Scale(): a deadline that only catches a hang. Pick d well above
// what the wait takes on an idle machine (10× or more); it never decides a test that
// does not hang.
func Guard(d time.Duration) time.Duration { return time.Duration(float64(d) * Scale()) }

// Until calls done every interval until it returns true, and fails t once
// Guard(limit) has passed without it, saying what it waited for (what is called only
// then, so it may describe the state, e.g. a process's log). done may itself fail t,
// e.g. when the process it watches has exited.
func Until(t testing.TB, limit, interval time.Duration, what func() string, done func() bool) {
	t.Helper()
	guard := Guard(limit)
	deadline := time.Now().Add(guard)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting after %s (a hang guard; %s=%g): %s", guard, ScaleEnv, Scale(), what())
		}
		time.Sleep(interval)
	}
}
