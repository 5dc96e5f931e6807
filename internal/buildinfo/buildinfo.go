// Package buildinfo says which build of hindsight is running.
package buildinfo

import "runtime/debug"

// version may be set at link time: -ldflags "-X github.com/hindsight-ai/hindsight/internal/buildinfo.version=v1.2.3".
var version string

// Version returns the link-time version, else the module version, else the VCS
// revision, else "devel".
func Version() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return "devel-" + rev
}
