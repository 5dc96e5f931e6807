// Package powercut is a test-only FUSE file system that loses, at a simulated power
// cut, everything a program did not make durable: it is how hindsight's crash tests
// check the durable-write protocol (temp → fsync → rename → fsync the directory)
// without a machine to switch off. LazyFS (the FUSE file system Jepsen uses) checks
// the same, but cannot be built here.
//
// # Fault model
//
// The file system keeps two states in memory: the live one that programs see, and the
// durable one a disk would hold after a power cut.
//
//   - fsync of a file makes its contents, size and mode durable (under every name the
//     durable state links it by, and later ones).
//   - fsync of a directory makes its entries durable: the names in it, and to which
//     inodes they point. An inode that becomes durably linked this way without ever
//     having been fsynced itself is durable empty (a file of 0 bytes, a directory with
//     no entries); a symlink is durable with its target.
//   - Nothing else is durable: create, write, truncate, rename, unlink, mkdir, rmdir
//     and symlink change only the live state until the fsyncs above. A rename is made
//     durable by fsyncing the directory it left and the one it entered.
//   - Cut replaces the live state by the durable one. The durable state after any cut
//     is a state a POSIX file system may legally be in after a power loss, and the
//     strictest one: journaling file systems such as ext4 and xfs usually keep more
//     (they commit metadata in order), so code correct here is correct there.
//
// Limits: it does not tear a single write or fsync (a cut lands between operations,
// never inside one), reorder the durable effects of one fsync, lose an fsync that
// returned, model the drive's own cache lying about flushes, or fail an I/O; it has
// no hard links (link(2) is EPERM, as on object-store FUSE mounts) and, unless
// Options.RenameNoReplace, refuses renameat2 flags with EINVAL, as NFS, CephFS and
// bindfs do. Timestamps, owners and extended attributes are not modelled. Everything
// is held in memory: it is for test data sets.
package powercut

import (
	"context"
	"fmt"
	"maps"
	"path"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Options configure a file system.
type Options struct {
	// RenameNoReplace makes renameat2(RENAME_NOREPLACE) work; without it every
	// renameat2 flag is refused with EINVAL.
	RenameNoReplace bool
}

// Op is one operation that changes the live state or makes part of it durable.
type Op struct {
	N    int64  // 1 for the first such operation since Mount
	Kind string // create, write, truncate, mkdir, symlink, unlink, rmdir, rename, fsync, fsyncdir
	Path string // relative to the mount point; "old -> new" for rename
}

func (o Op) String() string { return fmt.Sprintf("#%d %s %s", o.N, o.Kind, o.Path) }

// inode is a file, a directory or a symlink, in the live or the durable state.
type inode struct {
	mode   uint32 // S_IFREG, S_IFDIR or S_IFLNK | permission bits
	data   []byte
	target string
	kids   map[string]uint64
	mtime  time.Time
}

func (i *inode) isDir() bool { return i.mode&syscall.S_IFMT == syscall.S_IFDIR }

func (i *inode) clone() *inode {
	c := *i
	c.data = append([]byte(nil), i.data...)
	if i.kids != nil {
		c.kids = maps.Clone(i.kids)
	}
	return &c
}

// FS is the file system: one live and one durable state, served at one mount point
// at a time.
type FS struct {
	opts Options

	mu      sync.Mutex
	next    uint64
	live    map[uint64]*inode
	durable map[uint64]*inode
	ops     int64
	kinds   map[string]int64
	trigger func(Op) bool
	fired   chan Op
	frozen  bool
	release chan struct{}

	server *fuse.Server
	dir    string
}

const rootIno = 1

// New returns an empty file system (an empty root directory, durable).
func New(opts Options) *FS {
	root := &inode{mode: syscall.S_IFDIR | 0o755, kids: map[string]uint64{}, mtime: time.Now()}
	return &FS{opts: opts, next: rootIno + 1, kinds: map[string]int64{},
		live: map[uint64]*inode{rootIno: root}, durable: map[uint64]*inode{rootIno: root.clone()}}
}

// Mount serves the live state at dir, counting operations from 1 again.
func (f *FS) Mount(dir string) error {
	f.mu.Lock()
	f.ops, f.frozen, f.trigger, f.fired, f.release = 0, false, nil, nil, make(chan struct{})
	f.mu.Unlock()
	sec := time.Second
	srv, err := fs.Mount(dir, &node{fsys: f, ino: rootIno}, &fs.Options{
		MountOptions: fuse.MountOptions{FsName: "powercut", Name: "powercut", DisableXAttrs: true, DirectMount: true, MaxWrite: 1 << 20},
		EntryTimeout: &sec, AttrTimeout: &sec, NegativeTimeout: &sec,
		RootStableAttr: &fs.StableAttr{Ino: rootIno, Mode: syscall.S_IFDIR},
	})
	if err != nil {
		return fmt.Errorf("mount powercut at %s: %w", dir, err)
	}
	f.server, f.dir = srv, dir
	return nil
}

// Unmount stops serving. Operations blocked by a freeze fail with EIO.
func (f *FS) Unmount() error {
	f.unfreeze()
	if f.server == nil {
		return nil
	}
	err := f.server.Unmount()
	if err != nil {
		// A process may still be dying with a file open: detach now.
		if err2 := unix.Unmount(f.dir, unix.MNT_DETACH); err2 != nil {
			return fmt.Errorf("unmount powercut at %s: %w (lazy: %v)", f.dir, err, err2)
		}
	}
	f.server.Wait()
	f.server = nil
	return nil
}

// CutAt arms a cut: the first operation for which match returns true freezes the
// file system before it takes effect (it and every later operation block, then fail
// with EIO) and is sent on the returned channel. The caller then kills the program,
// calls Cut, and remounts.
func (f *FS) CutAt(match func(Op) bool) <-chan Op {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.trigger, f.fired = match, make(chan Op, 1)
	return f.fired
}

// Freeze blocks every operation from now on (they fail with EIO once Cut or Unmount
// lets them go): the instant of a power cut.
func (f *FS) Freeze() {
	f.mu.Lock()
	f.frozen = true
	f.mu.Unlock()
}

// Cut is the power cut: the live state becomes the durable one (what was not made
// durable is lost), and blocked operations fail with EIO. Freeze (or a fired CutAt)
// comes first, so that nothing changes the state between the cut and the remount.
func (f *FS) Cut() {
	f.mu.Lock()
	f.frozen = true
	f.gc(f.durable)
	f.live = map[uint64]*inode{}
	for ino, i := range f.durable {
		f.live[ino] = i.clone()
	}
	f.mu.Unlock()
	f.unfreeze()
}

// SyncAll makes the whole live state durable, as if it had been there long before.
func (f *FS) SyncAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gc(f.live)
	f.durable = map[uint64]*inode{}
	for ino, i := range f.live {
		f.durable[ino] = i.clone()
	}
}

// Counts is how many operations of each kind the file system has served since New.
func (f *FS) Counts() map[string]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.kinds)
}

func (f *FS) unfreeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.release != nil {
		select {
		case <-f.release:
		default:
			close(f.release)
		}
	}
}

// gc drops the inodes of state that no path from the root reaches.
func (f *FS) gc(state map[uint64]*inode) {
	seen := map[uint64]bool{}
	var walk func(uint64)
	walk = func(ino uint64) {
		if seen[ino] {
			return
		}
		seen[ino] = true
		if i := state[ino]; i != nil && i.isDir() {
			for _, k := range i.kids {
				walk(k)
			}
		}
	}
	walk(rootIno)
	for ino := range state {
		if !seen[ino] {
			delete(state, ino)
		}
	}
}

// begin gates an operation: it is counted, checked against the armed cut, and
// blocked while frozen (then EIO). Called with f.mu held; returns with it held.
func (f *FS) begin(kind, p string) syscall.Errno {
	if !f.frozen {
		f.ops++
		op := Op{N: f.ops, Kind: kind, Path: p}
		if f.trigger != nil && f.trigger(op) {
			f.frozen, f.trigger = true, nil
			f.fired <- op
		} else {
			f.kinds[kind]++
			return 0
		}
	}
	ch := f.release
	f.mu.Unlock()
	<-ch
	f.mu.Lock()
	return syscall.EIO
}

// makeDurable makes the live inode ino durable: a file's contents and mode, a
// directory's entries (children never synced become durable empty).
func (f *FS) makeDurable(ino uint64) {
	li := f.live[ino]
	if li == nil {
		return
	}
	if !li.isDir() {
		f.durable[ino] = li.clone()
		return
	}
	di := f.durable[ino]
	if di == nil {
		di = &inode{mode: li.mode, mtime: li.mtime}
		f.durable[ino] = di
	}
	di.kids = maps.Clone(li.kids)
	for _, k := range li.kids {
		if _, ok := f.durable[k]; ok {
			continue
		}
		lk := f.live[k]
		switch lk.mode & syscall.S_IFMT {
		case syscall.S_IFDIR:
			f.durable[k] = &inode{mode: lk.mode, kids: map[string]uint64{}, mtime: lk.mtime}
		case syscall.S_IFLNK:
			f.durable[k] = lk.clone()
		default:
			f.durable[k] = &inode{mode: lk.mode, mtime: lk.mtime}
		}
	}
}

// node is the go-fuse face of one inode number.
type node struct {
	fs.Inode
	fsys *FS
	ino  uint64
}

var (
	_ fs.NodeLookuper   = (*node)(nil)
	_ fs.NodeGetattrer  = (*node)(nil)
	_ fs.NodeSetattrer  = (*node)(nil)
	_ fs.NodeOpener     = (*node)(nil)
	_ fs.NodeCreater    = (*node)(nil)
	_ fs.NodeReader     = (*node)(nil)
	_ fs.NodeWriter     = (*node)(nil)
	_ fs.NodeFsyncer    = (*node)(nil)
	_ fs.NodeMkdirer    = (*node)(nil)
	_ fs.NodeUnlinker   = (*node)(nil)
	_ fs.NodeRmdirer    = (*node)(nil)
	_ fs.NodeRenamer    = (*node)(nil)
	_ fs.NodeSymlinker  = (*node)(nil)
	_ fs.NodeReadlinker = (*node)(nil)
	_ fs.NodeLinker     = (*node)(nil)
	_ fs.NodeReaddirer  = (*node)(nil)
	_ fs.NodeStatfser   = (*node)(nil)
)

func (n *node) path(name string) string {
	return path.Join(n.Path(nil), name)
}

func attr(ino uint64, i *inode, out *fuse.Attr) {
	out.Ino = ino
	out.Mode = i.mode
	out.Size = uint64(len(i.data))
	if i.mode&syscall.S_IFMT == syscall.S_IFLNK {
		out.Size = uint64(len(i.target))
	}
	out.Nlink = 1
	if i.isDir() {
		out.Nlink = 2
	}
	out.Blksize = 4096
	out.Blocks = (out.Size + 511) / 512
	out.SetTimes(nil, &i.mtime, &i.mtime)
}

// dir returns the live directory inode of n, or an errno.
func (n *node) dir() (*inode, syscall.Errno) {
	d := n.fsys.live[n.ino]
	if d == nil {
		return nil, syscall.EIO
	}
	if !d.isDir() {
		return nil, syscall.ENOTDIR
	}
	return d, 0
}

func (n *node) child(ctx context.Context, ino uint64, i *inode, out *fuse.EntryOut) *fs.Inode {
	attr(ino, i, &out.Attr)
	return n.NewInode(ctx, &node{fsys: n.fsys, ino: ino}, fs.StableAttr{Mode: i.mode & syscall.S_IFMT, Ino: ino})
}

// Lookup is lookup(2)'s half of every path walk.
func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	f := n.fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	d, errno := n.dir()
	if errno != 0 {
		return nil, errno
	}
	ino, ok := d.kids[name]
	if !ok {
		return nil, syscall.ENOENT
	}
	return n.child(ctx, ino, f.live[ino], out), 0
}

// Getattr is stat(2).
func (n *node) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	f := n.fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	i := f.live[n.ino]
	if i == nil {
		return syscall.EIO
	}
	attr(n.ino, i, &out.Attr)
	return 0
}

// Setattr is truncate(2), chmod(2) and utimes(2).
func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	f := n.fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	i := f.live[n.ino]
	if i == nil {
		return syscall.EIO
	}
	if sz, ok := in.GetSize(); ok {
		if errno := f.begin("truncate", n.Path(nil)); errno != 0 {
			return errno
		}
		if int(sz) <= len(i.data) {
			i.data = i.data[:sz]
		} else {
			i.data = append(i.data, make([]byte, int(sz)-len(i.data))...)
		}
		i.mtime = time.Now()
	}
	if m, ok := in.GetMode(); ok {
		i.mode = i.mode&syscall.S_IFMT | m&0o7777
	}
	if t, ok := in.GetMTime(); ok {
		i.mtime = t
	}
	attr(n.ino, i, &out.Attr)
	return 0
}

// Open is open(2) of an existing file; O_TRUNC empties it.
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	f := n.fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	i := f.live[n.ino]
	if i == nil {
		return nil, 0, syscall.EIO
	}
	if flags&syscall.O_TRUNC != 0 && len(i.data) > 0 {
		if errno := f.begin("truncate", n.Path(nil)); errno != 0 {
			return nil, 0, errno
		}
		i.data = nil
	}
	return nil, 0, 0
}

// Create is open(2) with O_CREAT of a new name.
func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	ch, errno := n.add(ctx, "create", name, &inode{mode: syscall.S_IFREG | mode&0o7777}, out)
	return ch, nil, 0, errno
}

// Mkdir is mkdir(2).
func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.add(ctx, "mkdir", name, &inode{mode: syscall.S_IFDIR | mode&0o7777, kids: map[string]uint64{}}, out)
}

// Symlink is symlink(2).
func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.add(ctx, "symlink", name, &inode{mode: syscall.S_IFLNK | 0o777, target: target}, out)
}

// add links a new inode under name in the live state.
func (n *node) add(ctx context.Context, kind, name string, i *inode, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	f := n.fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	d, errno := n.dir()
	if errno != 0 {
		return nil, errno
	}
	if _, ok := d.kids[name]; ok {
		return nil, syscall.EEXIST
	}
	if errno := f.begin(kind, n.path(name)); errno != 0 {
		return nil, errno
	}
	ino := f.next
	f.next++
	i.mtime = time.Now()
	f.live[ino] = i
	d.kids[name] = ino
	d.mtime = i.mtime
	return n.child(ctx, ino, i, out), 0
}

// Link is link(2): refused, as on file systems without hard links.
func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

// Readlink is readlink(2).
func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	f := n.fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	i := f.live[n.ino]
	if i == nil || i.mode&syscall.S_IFMT != syscall.S_IFLNK {
		return nil, syscall.EINVAL
	}
	return []byte(i.target), 0
}

// Read is pread(2).
func (n *node) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	f := n.fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	i := f.live[n.ino]
	if i == nil {
		return nil, syscall.EIO
	}
	if off >= int64(len(i.data)) {
		return fuse.ReadResultData(nil), 0
	}
	k := copy(dest, i.data[off:])
	return fuse.ReadResultData(dest[:k]), 0
}

// Write is pwrite(2): it changes the live state only.
func (n *node) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	f := n.fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	i := f.live[n.ino]
	if i == nil {
		return 0, syscall.EIO
	}
	if errno := f.begin("write", n.Path(nil)); errno != 0 {
		return 0, errno
	}
	if end := int(off) + len(data); end > len(i.data) {
		i.data = append(i.data, make([]byte, end-len(i.data))...)
	}
	copy(i.data[off:], data)
	i.mtime = time.Now()
	return uint32(len(data)), 0
}

// Fsync is fsync(2) of a file or a directory: it makes that inode durable.
func (n *node) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	f := n.fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	i := f.live[n.ino]
	if i == nil {
		return syscall.EIO
	}
	kind := "fsync"
	if i.isDir() {
		kind = "fsyncdir"
	}
	if errno := f.begin(kind, n.Path(nil)); errno != 0 {
		return errno
	}
	f.makeDurable(n.ino)
	return 0
}

// Unlink is unlink(2).
func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	return n.remove("unlink", name)
}

// Rmdir is rmdir(2).
func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	return n.remove("rmdir", name)
}

func (n *node) remove(kind, name string) syscall.Errno {
	f := n.fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	d, errno := n.dir()
	if errno != 0 {
		return errno
	}
	ino, ok := d.kids[name]
	if !ok {
		return syscall.ENOENT
	}
	c := f.live[ino]
	switch {
	case kind == "unlink" && c.isDir():
		return syscall.EISDIR
	case kind == "rmdir" && !c.isDir():
		return syscall.ENOTDIR
	case kind == "rmdir" && len(c.kids) > 0:
		return syscall.ENOTEMPTY
	}
	if errno := f.begin(kind, n.path(name)); errno != 0 {
		return errno
	}
	delete(d.kids, name)
	d.mtime = time.Now()
	return 0
}

// Rename is rename(2) and renameat2(2).
func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	f := n.fsys
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	if flags&^unix.RENAME_NOREPLACE != 0 || (flags != 0 && !f.opts.RenameNoReplace) {
		return syscall.EINVAL
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	from, errno := n.dir()
	if errno != 0 {
		return errno
	}
	to, errno := np.dir()
	if errno != 0 {
		return errno
	}
	ino, ok := from.kids[name]
	if !ok {
		return syscall.ENOENT
	}
	src := f.live[ino]
	if old, exists := to.kids[newName]; exists {
		if flags&unix.RENAME_NOREPLACE != 0 {
			return syscall.EEXIST
		}
		dst := f.live[old]
		switch {
		case old == ino:
			return 0
		case src.isDir() && !dst.isDir():
			return syscall.ENOTDIR
		case !src.isDir() && dst.isDir():
			return syscall.EISDIR
		case dst.isDir() && len(dst.kids) > 0:
			return syscall.ENOTEMPTY
		}
	}
	if errno := f.begin("rename", n.path(name)+" -> "+np.path(newName)); errno != 0 {
		return errno
	}
	delete(from.kids, name)
	to.kids[newName] = ino
	now := time.Now()
	from.mtime, to.mtime = now, now
	return 0
}

// Readdir lists a directory.
func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	f := n.fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	d, errno := n.dir()
	if errno != 0 {
		return nil, errno
	}
	ents := make([]fuse.DirEntry, 0, len(d.kids))
	for name, ino := range d.kids {
		ents = append(ents, fuse.DirEntry{Name: name, Ino: ino, Mode: f.live[ino].mode & syscall.S_IFMT})
	}
	return fs.NewListDirStream(ents), 0
}

// Statfs reports a large, mostly free disk.
func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	out.Bsize, out.Frsize, out.NameLen = 4096, 4096, 255
	out.Blocks, out.Bfree, out.Bavail = 1<<28, 1<<27, 1<<27
	out.Files, out.Ffree = 1<<24, 1<<23
	return 0
}
