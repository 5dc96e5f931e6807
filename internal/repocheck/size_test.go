package repocheck

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// maxTrackedBytes is the largest file git may track outside allowLarge: 2 MiB. Sources,
// fixtures and small models fit; a built binary (the 46.7 MB `efficacy` once was) does not.
const maxTrackedBytes = 2 << 20

// allowLarge lists the tracked files that may exceed maxTrackedBytes, as path.Match
// patterns that match the path or a trailing part of it (so a fixture folder can move
// with its package), each with a ceiling of its own so an allowed fixture cannot grow
// without a look either. (The efficacy warm start,
// bench/efficacy/warmstart/model/model.safetensors, is 1.7 MB: under the limit.)
var allowLarge = []struct {
	pattern string
	max     int64
	why     string
}{
	{"testdata/tokenizers/*/tokenizer.json.gz", 3 << 20, "released tokenizers the parity fixtures are made from (2.0–2.5 MB)"},
	{"bench/efficacy/protocol3/warmstart/model/model.safetensors", 7 << 19, "protocol 3's warm start (attempt 4: 4 layers, float32, 3.3 MB), the input its gates were measured on"},
}

// repoRoot returns the root of the git checkout holding this package, or skips the test
// when there is none (a source tarball, a module cache) or git is not installed.
func repoRoot(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skip("not in a git checkout")
	}
	return strings.TrimSpace(string(out))
}

// TestTrackedFileSizes fails for every tracked file over maxTrackedBytes that allowLarge
// does not cover, naming the file and its size.
func TestTrackedFileSizes(t *testing.T) {
	root := repoRoot(t)
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = root
	out, err := cmd.Output()
	require.NoError(t, err, "git ls-files")

	var tooLarge []string
	for _, name := range bytes.Split(out, []byte{0}) {
		if len(name) == 0 {
			continue
		}
		rel := string(name)
		info, err := os.Lstat(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			continue // tracked but deleted in the work tree: nothing to weigh
		}
		if !info.Mode().IsRegular() {
			continue
		}
		limit, why := int64(maxTrackedBytes), "the limit for any tracked file"
		for _, a := range allowLarge {
			if matchTail(a.pattern, rel) {
				limit, why = a.max, "its allow-list ceiling ("+a.pattern+": "+a.why+")"
			}
		}
		if info.Size() > limit {
			tooLarge = append(tooLarge, fmt.Sprintf("%s is %s, over %s, %s",
				rel, mb(info.Size()), mb(limit), why))
		}
	}
	require.Empty(t, tooLarge, "tracked files too large for git (a build output? add it to "+
		".gitignore and `git rm --cached` it; a needed fixture goes into allowLarge in "+
		"internal/repocheck/size_test.go):\n%s", strings.Join(tooLarge, "\n"))
}

func mb(n int64) string {
	return fmt.Sprintf("%.1f MB (%d bytes)", float64(n)/1e6, n)
}

// matchTail reports whether pattern matches name or a trailing part of it that starts
// after a slash.
func matchTail(pattern, name string) bool {
	for {
		if ok, _ := path.Match(pattern, name); ok {
			return true
		}
		i := strings.IndexByte(name, '/')
		if i < 0 {
			return false
		}
		name = name[i+1:]
	}
}

func TestMatchTail(t *testing.T) {
	const p = "testdata/tokenizers/*/tokenizer.json.gz"
	for name, want := range map[string]bool{
		"data/testdata/tokenizers/qwen3/tokenizer.json.gz":           true,
		"data/tokenizer/testdata/tokenizers/qwen3/tokenizer.json.gz": true,
		"testdata/tokenizers/qwen3/tokenizer.json.gz":                true,
		"data/testdata/tokenizers/qwen3/model.safetensors":           false,
		"mytestdata/tokenizers/qwen3/tokenizer.json.gz":              false,
		"efficacy": false,
	} {
		require.Equal(t, want, matchTail(p, name), name)
	}
}
