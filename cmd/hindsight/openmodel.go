package main

import (
	"fmt"
	"io"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/rs/zerolog"

	"github.com/hindsight-ai/hindsight/xla"
)

// compileCacheUsage is the -compile-cache flag's help, the same in every command.
const compileCacheUsage = "keep the programs XLA compiles in `DIR` and load them from there on the next run " +
	"(e.g. a daemon's <data_dir>/state/programs, to share its programs); empty: compile them every run"

// openModel is the preamble of the commands that run a model (score, generate): the
// compiled-program cache in compileCache ("": none; its warnings on stderr), the
// backend -backend names (xla.ResolveBackend), the -precision checked against it,
// and the model or adapter directory opened in that precision (xla.Open).
func openModel(backendSpec, precision, dir, compileCache string, stderr io.Writer) (backends.Backend, *xla.Model, error) {
	if compileCache != "" {
		log := zerolog.New(zerolog.ConsoleWriter{Out: stderr, NoColor: true, PartsExclude: []string{zerolog.TimestampFieldName}}).
			Level(zerolog.WarnLevel).With().Str("component", "compile").Logger()
		if err := xla.ConfigureProgramCache(xla.ProgramCache{Dir: compileCache, Log: log}); err != nil {
			return nil, nil, fmt.Errorf("-compile-cache: %w", err)
		}
	}
	backend, err := xla.NewBackend(xla.ResolveBackend(backendSpec, ""))
	if err != nil {
		return nil, nil, err
	}
	prec := xla.Precision(precision)
	if err := prec.Validate(); err != nil {
		return nil, nil, fmt.Errorf("-precision: %w", err)
	}
	if err := prec.CheckBackend(backend); err != nil {
		return nil, nil, err
	}
	m, err := xla.Open(dir, xla.OpenOptions{Precision: prec})
	if err != nil {
		return nil, nil, err
	}
	return backend, m, nil
}

// compileSummary is the line a command with -compile-cache prints last: what it
// compiled and what it loaded instead.
func compileSummary(dir string) string {
	c := xla.CompileSnapshot()
	return fmt.Sprintf("programs: %d compiled in %v, %d loaded from %s in %v (%d preloaded in the background in %v)\n",
		c.Compiled, c.CompileTime.Round(time.Millisecond), c.Loaded, dir, c.LoadTime.Round(time.Millisecond),
		c.Preloaded, c.PreloadTime.Round(time.Millisecond))
}
