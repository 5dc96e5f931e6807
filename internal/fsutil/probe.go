package fsutil

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Features is what a file system offers the durable writes, found by Probe.
type Features struct {
	// FSType names the file system (statfs's magic number: "ext4", "xfs", "nfs",
	// "fuse", …; "0x…" when unknown).
	FSType string `json:"fs_type"`
	// RenameNoReplace: renameat2(RENAME_NOREPLACE) works. Without it RenameNoReplace
	// checks, then renames (correct for a single writer: the daemon's lock).
	RenameNoReplace bool `json:"rename_noreplace"`
	// HardLinks: link(2) works on files. Nothing depends on it; it is reported
	// because the file systems that lack it often lack other things.
	HardLinks bool `json:"hard_links"`
	// Symlinks: symlink(2) works. Without it checkpoints/latest cannot be kept.
	Symlinks bool `json:"symlinks"`
}

// RenameMode says how RenameNoReplace works here: "renameat2" or "check-then-rename".
func (f Features) RenameMode() string {
	if f.RenameNoReplace {
		return "renameat2"
	}
	return "check-then-rename"
}

// String is the features on one line, for logs.
func (f Features) String() string {
	yes := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	return fmt.Sprintf("fs=%s rename_noreplace=%s hard_links=%s symlinks=%s",
		f.FSType, yes(f.RenameNoReplace), yes(f.HardLinks), yes(f.Symlinks))
}

// ProbePrefix starts the names of Probe's scratch entries (hidden); a crash during a
// probe leaves them for the next start-up to remove.
const ProbePrefix = ".fsprobe-"

// Probe finds what the file system holding dir supports, by trying it on scratch
// entries in dir (removed again): a rename with RENAME_NOREPLACE through the same
// seam RenameNoReplace uses, a hard link and a symlink. An error means dir is not
// usable at all (it cannot create a file there).
func Probe(dir string) (Features, error) {
	var f Features
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return f, fmt.Errorf("probe file system of %s: %w", dir, err)
	}
	f.FSType = fsTypeName(int64(st.Type))
	scratch, err := os.MkdirTemp(dir, ProbePrefix+"*")
	if err != nil {
		return f, fmt.Errorf("probe file system of %s: %w", dir, err)
	}
	defer os.RemoveAll(scratch)
	a, b := filepath.Join(scratch, "a"), filepath.Join(scratch, "b")
	if err := os.WriteFile(a, nil, 0o644); err != nil {
		return f, fmt.Errorf("probe file system of %s: %w", dir, err)
	}
	err = renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_NOREPLACE)
	switch {
	case err == nil:
		f.RenameNoReplace = true
	case Refused(err):
	default:
		return f, fmt.Errorf("probe file system of %s: rename: %w", dir, err)
	}
	if !f.RenameNoReplace {
		if err := os.Rename(a, b); err != nil {
			return f, fmt.Errorf("probe file system of %s: %w", dir, err)
		}
	}
	f.HardLinks = os.Link(b, filepath.Join(scratch, "c")) == nil
	f.Symlinks = os.Symlink("b", filepath.Join(scratch, "d")) == nil
	if err := os.RemoveAll(scratch); err != nil && !errors.Is(err, os.ErrNotExist) {
		return f, fmt.Errorf("probe file system of %s: %w", dir, err)
	}
	return f, nil
}

// fsTypeName names the statfs magic numbers of the file systems a data directory
// is likely to be on.
func fsTypeName(magic int64) string {
	names := map[int64]string{
		unix.EXT4_SUPER_MAGIC:      "ext4", // also ext2 and ext3
		unix.XFS_SUPER_MAGIC:       "xfs",
		unix.BTRFS_SUPER_MAGIC:     "btrfs",
		unix.TMPFS_MAGIC:           "tmpfs",
		unix.NFS_SUPER_MAGIC:       "nfs",
		unix.FUSE_SUPER_MAGIC:      "fuse",
		unix.OVERLAYFS_SUPER_MAGIC: "overlayfs",
		unix.F2FS_SUPER_MAGIC:      "f2fs",
		0x00c36400:                 "ceph",
		0x47504653:                 "gpfs",
		0x0bd00bd0:                 "lustre",
		0x2fc12fc1:                 "zfs",
	}
	if n, ok := names[magic]; ok {
		return n
	}
	return "0x" + strings.TrimLeft(fmt.Sprintf("%x", magic), "0")
}
