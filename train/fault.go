//go:build devicefault

package train

import (
	"os"
	"strconv"
	"time"

	"github.com/rs/zerolog"
)

// init arms StallStepEnv (abandon.go) in binaries built with the devicefault tag.
func init() {
	n, err := strconv.ParseInt(os.Getenv(StallStepEnv), 10, 64)
	if err != nil || n <= 0 {
		return
	}
	stepFault = func(step int64, log zerolog.Logger) {
		if step != n {
			return
		}
		log.Warn().Int64("step", step).Msg("device stalled (injected fault " + StallStepEnv + ")")
		time.Sleep(24 * time.Hour)
	}
}
