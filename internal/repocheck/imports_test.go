package repocheck

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestProductLinksNoBenchmarks: the product's binaries, hindsight and hindsightd,
// depend on no package under bench/ (docs/design.md "Packages"): the benchmarks are
// programs of their own (`hindsight bench-gpu` runs bench/gpu's binary, it does not
// link it).
func TestProductLinksNoBenchmarks(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go is not installed")
	}
	const mod = "github.com/hindsight-ai/hindsight/"
	out, err := exec.Command("go", "list", "-deps", mod+"cmd/hindsight", mod+"cmd/hindsightd").CombinedOutput()
	require.NoError(t, err, "%s", out)
	var bench []string
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, mod+"bench/") || strings.HasPrefix(pkg, mod+"experiments/") {
			bench = append(bench, pkg)
		}
	}
	require.Empty(t, bench, "the product binaries link benchmark or experiment code")
}
