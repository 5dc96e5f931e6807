package daemon

import (
	"os"

	"github.com/hindsight-ai/hindsight/xla"
)

// The daemons these tests run train on pure Go unless $GOMLX_BACKEND names another
// backend for the whole run: the default, auto, would take the XLA CPU plugin wherever
// it has been fetched. Each run logs its choice ("backend chosen").
func init() {
	if os.Getenv("GOMLX_BACKEND") == "" {
		os.Setenv("GOMLX_BACKEND", xla.DefaultBackend)
	}
}
