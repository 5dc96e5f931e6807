package testwait

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestScale(t *testing.T) {
	t.Setenv(ScaleEnv, "")
	require.Equal(t, 1.0, Scale())
	require.Equal(t, time.Minute, Guard(time.Minute))
	t.Setenv(ScaleEnv, "2.5")
	require.Equal(t, 150*time.Second, Guard(time.Minute))
	for _, bad := range []string{"0", "-1", "fast", "NaN", "Inf"} {
		t.Setenv(ScaleEnv, bad)
		require.PanicsWithValue(t, ScaleEnv+"=\""+bad+"\": want a positive number such as 3", func() { Scale() }, bad)
	}
}

// TestUntil: Until returns once done is true, and fails the test after the scaled
// guard when it never is (checked on a testing.T of its own, in a goroutine, since
// Fatalf ends the goroutine that calls it).
func TestUntil(t *testing.T) {
	t.Setenv(ScaleEnv, "1")
	n := 0
	Until(t, time.Minute, time.Millisecond, func() string { return "n to reach 3" }, func() bool { n++; return n >= 3 })
	require.Equal(t, 3, n)

	inner := &recorder{TB: t}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		Until(inner, 10*time.Millisecond, time.Millisecond, func() string { return "never" }, func() bool { return false })
	}()
	<-finished
	require.Contains(t, inner.msg, "still waiting after 10ms")
	require.Contains(t, inner.msg, "never")
}

// recorder records Fatalf instead of failing the test.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
