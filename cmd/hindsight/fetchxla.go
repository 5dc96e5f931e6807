package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/hindsight-ai/hindsight/internal/cliflag"
	"github.com/hindsight-ai/hindsight/internal/pjrt"
)

// fetchXLACPUCmd is `hindsight fetch-xla-cpu`: put the pinned XLA CPU PJRT plugin in
// the cache so `-backend xla-cpu` works. It prints the plugin's path on stdout.
func fetchXLACPUCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	p := pjrt.CPU
	fs := flag.NewFlagSet("hindsight fetch-xla-cpu", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cache := fs.String("cache", "", "plugin cache `directory` (default $"+pjrt.CacheEnv+", else ~/.cache/hindsight/pjrt)")
	wheel := fs.String("wheel", "", "unpack this already downloaded `wheel` instead of running pip (checked against the pinned sha256)")
	pip := fs.String("pip", "", "`command` that runs pip (default $"+pjrt.PipEnv+", else \"python3 -m pip\")")
	force := fs.Bool("force", false, "download and unpack again even if a good copy is cached")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: hindsight fetch-xla-cpu [-cache DIR] [-wheel FILE] [-pip CMD] [-force]\n\n")
		fmt.Fprintf(stderr, "Downloads %s==%s with `pip download --no-deps`, checks its sha256\n"+
			"against the pinned value, and unpacks only %s into the cache,\n"+
			"where -backend %s finds it. Prints the plugin's path. Does nothing if a good copy is cached.\n\n",
			p.Package, p.Version, p.File, p.Name)
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if code, ok := cliflag.Check(fs, stderr, cliflag.NoArgs(fs)); !ok {
		return code
	}
	dir := *cache
	if dir == "" {
		var err error
		if dir, err = pjrt.CacheDir(); err != nil {
			fmt.Fprintf(stderr, "hindsight fetch-xla-cpu: %v\n", err)
			return 1
		}
	}
	path, fetched, err := p.Fetch(ctx, dir, pjrt.FetchOptions{
		Wheel: *wheel,
		Pip:   strings.Fields(*pip),
		Force: *force,
		Log:   stderr,
	})
	if err != nil {
		fmt.Fprintf(stderr, "hindsight fetch-xla-cpu: %v\n", err)
		return 1
	}
	if fetched {
		fmt.Fprintf(stderr, "fetched %s %s (PJRT C API %s, sha256 %s)\n", p.Package, p.Version, p.APIVersion, p.LibSHA)
	} else {
		fmt.Fprintf(stderr, "cached %s %s (PJRT C API %s, sha256 verified)\n", p.Package, p.Version, p.APIVersion)
	}
	fmt.Fprintln(stdout, path)
	return 0
}
