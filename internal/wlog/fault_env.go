//go:build fsfault

package wlog

import "os"

// init arms FaultEnv (fault.go) in binaries built with the fsfault tag.
func init() {
	s := os.Getenv(FaultEnv)
	if s == "" {
		return
	}
	fs, err := ParseFaults(s)
	if err != nil {
		panic(err) // a test built this binary and set the variable: its mistake
	}
	for _, f := range fs {
		InjectFault(f)
	}
}
