package repocheck

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/internal/testwait"
)

// runnableInfo is the info string that marks a fenced shell block of the README or docs/
// as runnable: TestDocCommands runs it. Mark only blocks that take seconds and need no
// network; GitHub still highlights them as shell (it reads the first word).
const runnableInfo = "sh runnable"

// docFiles returns README.md and every .md file under docs/, relative to root.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	require.NoError(t, err, "walk docs/")
	return files
}

// block is one fenced code block of a markdown file.
type block struct {
	info string // the info string after the opening fence, trimmed
	line int    // line of the opening fence, 1-based
	body string
}

// parseMarkdown splits a markdown file into its fenced code blocks and the text outside
// them (code-block lines blanked, so line numbers stay right).
func parseMarkdown(text string) (blocks []block, prose []string) {
	var cur *block
	var fence string
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " ")
		if cur == nil {
			if f := fenceOf(trimmed); f != "" {
				cur, fence = &block{info: strings.TrimSpace(trimmed[len(f):]), line: n}, f
				prose = append(prose, "")
				continue
			}
			prose = append(prose, line)
			continue
		}
		prose = append(prose, "")
		if strings.HasPrefix(trimmed, fence) && strings.TrimSpace(strings.TrimLeft(trimmed, fence[:1])) == "" {
			blocks = append(blocks, *cur)
			cur = nil
			continue
		}
		cur.body += line + "\n"
	}
	return blocks, prose
}

// fenceOf returns the opening fence (``` or ~~~, three or more) that starts line, or "".
func fenceOf(line string) string {
	for _, c := range []string{"`", "~"} {
		n := len(line) - len(strings.TrimLeft(line, c))
		if n >= 3 {
			return line[:n]
		}
	}
	return ""
}

var (
	inlineCode = regexp.MustCompile("`[^`]*`")
	mdLink     = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	heading    = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	notSlug    = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
)

// slug is the anchor GitHub gives a heading: lower case, punctuation dropped, spaces
// turned into hyphens.
func slug(h string) string {
	return strings.ReplaceAll(notSlug.ReplaceAllString(strings.ToLower(strings.TrimSpace(h)), ""), " ", "-")
}

// anchors returns the heading anchors of a markdown file's prose.
func anchors(prose []string) map[string]bool {
	a := map[string]bool{}
	for _, line := range prose {
		if m := heading.FindStringSubmatch(line); m != nil {
			s := slug(m[1])
			for i := 1; a[s]; i++ { // GitHub numbers repeats: x, x-1, x-2
				if !a[fmt.Sprintf("%s-%d", slug(m[1]), i)] {
					s = fmt.Sprintf("%s-%d", slug(m[1]), i)
				}
			}
			a[s] = true
		}
	}
	return a
}

// TestDocLinks checks every relative link of README.md and docs/: the file or folder
// exists inside the repository, and a #fragment names a heading of the markdown file it
// points to. Links with a scheme (https:, mailto:) are not fetched.
func TestDocLinks(t *testing.T) {
	root := repoRoot(t)
	anchorCache := map[string]map[string]bool{}
	anchorsOf := func(rel string) map[string]bool {
		if a, ok := anchorCache[rel]; ok {
			return a
		}
		text, err := os.ReadFile(filepath.Join(root, rel))
		require.NoError(t, err)
		_, prose := parseMarkdown(string(text))
		anchorCache[rel] = anchors(prose)
		return anchorCache[rel]
	}
	var bad []string
	for _, rel := range docFiles(t, root) {
		text, err := os.ReadFile(filepath.Join(root, rel))
		require.NoError(t, err)
		_, prose := parseMarkdown(string(text))
		for i, line := range prose {
			for _, m := range mdLink.FindAllStringSubmatch(inlineCode.ReplaceAllString(line, ""), -1) {
				target := m[1]
				if regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`).MatchString(target) {
					continue
				}
				where := fmt.Sprintf("%s:%d: link %s", rel, i+1, target)
				path, frag, _ := strings.Cut(target, "#")
				dest := rel
				if path != "" {
					dest = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(rel), path)))
					if dest == ".." || strings.HasPrefix(dest, "../") || filepath.IsAbs(path) {
						bad = append(bad, where+": points outside the repository")
						continue
					}
					if _, err := os.Stat(filepath.Join(root, dest)); err != nil {
						bad = append(bad, where+": no such file")
						continue
					}
				}
				if frag != "" && strings.HasSuffix(dest, ".md") && !anchorsOf(dest)[frag] {
					bad = append(bad, fmt.Sprintf("%s: %s has no heading #%s", where, dest, frag))
				}
			}
		}
	}
	require.Empty(t, bad, "broken links:\n%s", strings.Join(bad, "\n"))
}

// TestDocCommands runs the shell blocks of README.md and docs/ marked runnable
// (```sh runnable), each file's blocks in order in one temporary folder of its own,
// with freshly built hindsight and hindsightd first on PATH; each must exit 0. The
// folder holds links to the repository's tracked top-level entries, so a block reads
// repository paths (testdata/…) as a reader at the root would, and writes beside them.
func TestDocCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries; skipped with -short")
	}
	root := repoRoot(t)
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go is not on PATH")
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+string(os.PathSeparator), "./cmd/hindsight", "./cmd/hindsightd")
	build.Dir = root
	out, err := build.CombinedOutput()
	require.NoError(t, err, "build the binaries:\n%s", out)

	// Only what git tracks is linked in: an ignored build output or data folder at the
	// root (./hindsight-data, ./model) must not shadow what a block writes.
	ls := exec.Command("git", "ls-files", "-z")
	ls.Dir = root
	tracked, err := ls.Output()
	require.NoError(t, err, "git ls-files")
	top := map[string]bool{}
	for _, name := range strings.Split(string(tracked), "\x00") {
		if first, _, _ := strings.Cut(name, "/"); first != "" {
			top[first] = true
		}
	}
	total := 0
	for _, rel := range docFiles(t, root) {
		text, err := os.ReadFile(filepath.Join(root, rel))
		require.NoError(t, err)
		blocks, _ := parseMarkdown(string(text))
		var runnable []block
		for _, b := range blocks {
			if b.info == runnableInfo {
				runnable = append(runnable, b)
			}
		}
		if len(runnable) == 0 {
			continue
		}
		total += len(runnable)
		t.Run(rel, func(t *testing.T) {
			dir := t.TempDir()
			for name := range top {
				require.NoError(t, os.Symlink(filepath.Join(root, name), filepath.Join(dir, name)))
			}
			for _, b := range runnable {
				ctx, cancel := context.WithTimeout(t.Context(), testwait.Guard(5*time.Minute)) // a hang guard
				cmd := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", b.body)
				cmd.Dir = dir
				cmd.Env = append(os.Environ(),
					"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
					"GOMLX_NO_AUTO_INSTALL=1")
				if os.Getenv("GOMLX_BACKEND") == "" {
					// hindsightd's default (auto) would take a fetched XLA plugin: the
					// blocks run on pure Go unless the run names a backend.
					cmd.Env = append(cmd.Env, "GOMLX_BACKEND=go:parallelism=-1")
				}
				start := time.Now()
				out, err := cmd.CombinedOutput()
				cancel()
				require.NoError(t, err, "%s:%d: runnable block failed:\n%s\noutput:\n%s", rel, b.line, b.body, out)
				t.Logf("%s:%d: ok in %s", rel, b.line, time.Since(start).Round(time.Millisecond))
			}
		})
	}
	require.NotZero(t, total, "no block of README.md or docs/ is marked ```%s", runnableInfo)
}
