package progcache

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "hook.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"
	"unsafe"
)

var installMu sync.Mutex

// Install routes the compiles of the PJRT plugin loaded from pluginPath through the
// cache configured with opts (Configure changes it later). The plugin must already be
// loaded by go-xla. A plugin that offers no serialization gives ErrUnsupported;
// compiles then go on uncached and uncounted.
func Install(pluginPath string, opts Options) error {
	installMu.Lock()
	defer installMu.Unlock()
	cpath := C.CString(pluginPath)
	defer C.free(unsafe.Pointer(cpath))
	if msg := C.hs_install(cpath); msg != nil {
		return fmt.Errorf("hook PJRT plugin %s: %w: %s", pluginPath, ErrUnsupported, C.GoString(msg))
	}
	return Configure(opts)
}

// ErrUnsupported says the plugin cannot have its compiled programs cached.
var ErrUnsupported = errors.New("compiled-program cache unsupported")

// hsGoCompile is the plugin's PJRT_Client_Compile while the hook is installed. It
// must not panic (the caller is C): a panic in the cache's own code falls back to
// compiling.
//
//export hsGoCompile
func hsGoCompile(args *C.PJRT_Client_Compile_Args) (perr *C.PJRT_Error) {
	c := current.Load()
	var (
		loaded   bool
		compiled bool
	)
	defer func() {
		if r := recover(); r != nil {
			if c != nil {
				c.log.Error().Str("panic", fmt.Sprint(r)).Str("stack", string(debug.Stack())).Msg("compiled-program cache failed; compiling")
			}
			if !loaded && !compiled {
				_, perr = compileCounted(args)
			}
		}
	}()
	if c == nil || c.dir == "" {
		took, perr := compileCounted(args)
		compiled = true
		if c != nil && perr == nil {
			c.logCompiled(programName(args), took)
		}
		return perr
	}
	c.pre.start(c, args.client)
	p := newProgram(args, c.identity)
	defer c.claim(p.keyHex)()
	start := time.Now()
	if exe, ok := c.load(p, args); ok {
		args.executable = exe
		loaded = true
		took := time.Since(start)
		statsAdd(func(s *Stats) { s.Loaded++; s.LoadTime += took })
		c.log.Info().Str("program", p.name).Str("key", p.keyHex[:16]).Dur("took", took).Msg("compiled program loaded from cache")
		return nil
	}
	took, perr := compileCounted(args)
	compiled = true
	if perr != nil {
		return perr
	}
	c.logCompiled(p.name, took)
	c.store(p, args.executable)
	return nil
}

// compileCounted runs the plugin's own compile and counts it.
func compileCounted(args *C.PJRT_Client_Compile_Args) (time.Duration, *C.PJRT_Error) {
	start := time.Now()
	err := C.hs_compile_original(args)
	took := time.Since(start)
	if err == nil {
		statsAdd(func(s *Stats) { s.Compiled++; s.CompileTime += took })
	}
	return took, err
}

// pjrtError turns err into a Go error and frees it.
func pjrtError(err *C.PJRT_Error) error {
	if err == nil {
		return nil
	}
	var n C.size_t
	msg := C.hs_error_message(err, &n)
	s := C.GoStringN(msg, C.int(n))
	C.hs_error_destroy(err)
	return errors.New(s)
}

// serialize returns exe's serialization, copied into Go memory.
func serialize(exe *C.PJRT_LoadedExecutable) ([]byte, error) {
	var s C.hs_serialized
	if err := pjrtError(C.hs_serialize(exe, &s)); err != nil {
		return nil, err
	}
	defer C.hs_serialized_free(&s)
	return C.GoBytes(unsafe.Pointer(s.bytes), C.int(s.size)), nil
}

// deserialize loads payload on client with the serialized compile options.
func deserialize(client *C.PJRT_Client, payload []byte, options *C.char, optionsSize C.size_t) (*C.PJRT_LoadedExecutable, error) {
	if len(payload) == 0 {
		return nil, errors.New("empty serialization")
	}
	cbytes := C.CBytes(payload)
	defer C.free(cbytes)
	var exe *C.PJRT_LoadedExecutable
	err := pjrtError(C.hs_deserialize(client, (*C.char)(cbytes), C.size_t(len(payload)), options, optionsSize, &exe))
	if err != nil {
		return nil, err
	}
	return exe, nil
}

// programBytes are args' format, code and options, viewed without copying (they live
// for the duration of the compile call).
func programBytes(args *C.PJRT_Client_Compile_Args) (format, code, options []byte) {
	prog := args.program
	format = unsafe.Slice((*byte)(unsafe.Pointer(prog.format)), int(prog.format_size))
	code = unsafe.Slice((*byte)(unsafe.Pointer(prog.code)), int(prog.code_size))
	options = unsafe.Slice((*byte)(unsafe.Pointer(args.compile_options)), int(args.compile_options_size))
	return format, code, options
}

func programName(args *C.PJRT_Client_Compile_Args) string {
	_, code, _ := programBytes(args)
	return moduleName(code)
}
