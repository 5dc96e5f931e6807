package progcache

/*
#include <stdlib.h>
#include "hook.h"
*/
import "C"

import (
	"fmt"
	"time"
)

// warmMaxBytes bounds what warming one program may allocate beside what the process
// holds: its distinct input buffers and its outputs (not donated, so fresh). Warming
// runs at start while the trainer's state is resident; SmolLM2's gradient programs
// (their outputs the model's gradients, 513 MiB, and 116 MiB of inputs) fit, which a
// step holds anyway (the gradient and its accumulator); a 0.6B model's gradient
// programs (2.4 GB of gradients) and the AdamW update of its embedding group (new
// weights and moments, 1.8 GB, where the step updates them in place) do not, and are
// left to their first step (docs/performance.md "Cold start").
var warmMaxBytes int64 = 1 << 30

// elementTypes are the element types a program's input may have, in MLIR's spelling
// (programParams refuses any other): the bytes of one element and the PJRT buffer type
// warming makes its buffer of.
var elementTypes = map[string]struct {
	bytes int64
	pjrt  C.PJRT_Buffer_Type
}{
	"f64": {8, C.PJRT_Buffer_Type_F64}, "f32": {4, C.PJRT_Buffer_Type_F32}, "f16": {2, C.PJRT_Buffer_Type_F16},
	"bf16": {2, C.PJRT_Buffer_Type_BF16},
	"i64":  {8, C.PJRT_Buffer_Type_S64}, "i32": {4, C.PJRT_Buffer_Type_S32}, "i16": {2, C.PJRT_Buffer_Type_S16},
	"i8":   {1, C.PJRT_Buffer_Type_S8},
	"ui64": {8, C.PJRT_Buffer_Type_U64}, "ui32": {4, C.PJRT_Buffer_Type_U32}, "ui16": {2, C.PJRT_Buffer_Type_U16},
	"ui8": {1, C.PJRT_Buffer_Type_U8},
	"i1":  {1, C.PJRT_Buffer_Type_PRED},
}

// warm executes a preloaded program of the run once, on zero inputs, and throws the
// results away. XLA CPU does not finish loading a deserialized executable in
// DeserializeAndLoad: part of it (the plugin's own code, about 4 CPU-seconds for
// SmolLM2's two dozen programs) runs on the program's first execution, which would
// otherwise be the restarted daemon's first step (docs/performance.md "Cold
// start"). Executing it here moves that into start-up, before WaitPreloaded returns.
// Nothing the process holds is read or written: the inputs are fresh buffers of
// zeros (one per distinct shape, shared by the inputs of that shape and never
// donated), the outputs are freed. Skipped, with a Debug line saying why, for an
// entry that does not record its inputs, a program on several devices, or one over
// warmMaxBytes; a failed execution is logged and costs only the warming.
func (c *cache) warm(client *C.PJRT_Client, exe *C.PJRT_LoadedExecutable, h header) {
	log := c.log.With().Str("program", h.Program).Str("key", h.Key[:min(16, len(h.Key))]).Logger()
	skipped := func(reason string) { log.Debug().Str("reason", reason).Msg("compiled program not warmed") }
	if !h.InputsKnown {
		skipped("the entry does not record the program's inputs")
		return
	}
	var (
		skip     *C.char
		outputs  C.size_t
		outBytes C.int64_t
	)
	if err := pjrtError(C.hs_warm_plan(exe, &skip, &outputs, &outBytes)); err != nil {
		skipped(err.Error())
		return
	}
	if skip != nil {
		skipped(C.GoString(skip))
		return
	}
	var (
		types  []C.int
		ranks  []C.size_t
		dims   []C.int64_t
		argBuf = make([]C.size_t, len(h.Inputs))
		index  = map[string]int{}
		inB    int64
		maxB   int64 = 1
	)
	for i, p := range h.Inputs {
		k := p.key()
		b, seen := index[k]
		if !seen {
			b = len(types)
			index[k] = b
			types = append(types, C.int(elementTypes[p.Type].pjrt))
			ranks = append(ranks, C.size_t(len(p.Dims)))
			for _, d := range p.Dims {
				dims = append(dims, C.int64_t(d))
			}
			inB += p.bytes()
			maxB = max(maxB, p.bytes())
		}
		argBuf[i] = C.size_t(b)
	}
	if total := inB + int64(outBytes); total > warmMaxBytes {
		skipped(fmt.Sprintf("it would allocate %s (inputs %s, outputs %s; limit %s)",
			byteSize(total), byteSize(inB), byteSize(int64(outBytes)), byteSize(warmMaxBytes)))
		return
	}
	zeros := C.calloc(C.size_t(maxB), 1)
	if zeros == nil {
		skipped("no memory for its inputs")
		return
	}
	defer C.free(zeros)
	start := time.Now()
	err := pjrtError(C.hs_warm(client, exe, outputs, C.size_t(len(types)), first(types), first(ranks), first(dims),
		zeros, C.size_t(len(argBuf)), first(argBuf)))
	took := time.Since(start)
	if err != nil {
		log.Warn().Err(err).Msg("compiled program's warming execution failed; its first request finishes the load")
		return
	}
	statsAdd(func(s *Stats) { s.Warmed++; s.WarmTime += took })
	log.Debug().Dur("took", took).Int("inputs", len(h.Inputs)).Int64("input_bytes", inB).Int64("output_bytes", int64(outBytes)).
		Msg("compiled program warmed")
}

// first is a pointer to s's first element for C, nil for an empty s.
func first[T any](s []T) *T {
	if len(s) == 0 {
		return nil
	}
	return &s[0]
}

// byteSize writes n bytes in MiB, or in bytes below one MiB.
func byteSize(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d bytes", n)
	}
	return fmt.Sprintf("%d MiB", n>>20)
}
