package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCLICommand: the demo's closing hints name a CLI command that works where they
// are read: hindsight when it is on PATH, else `go run ./cmd/hindsight` in a checkout
// (the README's quick start runs the demo with go run, which installs nothing; issue
// 39 item 8).
func TestCLICommand(t *testing.T) {
	bin := t.TempDir()
	t.Setenv("PATH", bin)
	repo := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(repo, "cmd", "hindsight"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(repo, "cmd", "hindsight", "main.go"), []byte("package main\n"), 0o644))
	t.Chdir(repo)
	require.Equal(t, "go run ./cmd/hindsight", cliCommand())

	require.NoError(t, os.WriteFile(filepath.Join(bin, "hindsight"), []byte("#!/bin/sh\n"), 0o755))
	require.Equal(t, "hindsight", cliCommand())
}
