// hook.h declares the C half of the compiled-program cache: it puts hs_compile in
// the place of a PJRT plugin's PJRT_Client_Compile and gives Go the plugin calls
// that GoMLX's go-xla does not wrap (Serialize, DeserializeAndLoad).
#ifndef HINDSIGHT_PROGCACHE_HOOK_H
#define HINDSIGHT_PROGCACHE_HOOK_H

#include <stddef.h>
#include <stdint.h>
#include "pjrt_c_api.h"

// hs_install finds the PJRT_Api table of the plugin already loaded from path and
// routes its PJRT_Client_Compile through hs_compile. It returns NULL or a static
// message saying why the plugin cannot be hooked.
const char* hs_install(const char* path);

// hs_compile_original calls the plugin's own PJRT_Client_Compile.
PJRT_Error* hs_compile_original(PJRT_Client_Compile_Args* args);

// hs_serialized is a serialization and what frees it.
typedef struct {
  const char* bytes;
  size_t size;
  PJRT_SerializedExecutable* handle;
  void (*deleter)(PJRT_SerializedExecutable*);
} hs_serialized;

// hs_serialize serializes a loaded executable into *out, valid until
// hs_serialized_free(out).
PJRT_Error* hs_serialize(PJRT_LoadedExecutable* loaded, hs_serialized* out);
void hs_serialized_free(hs_serialized* s);

// hs_deserialize loads a serialization made by hs_serialize on client, with the
// compile options of the call that asked for it.
PJRT_Error* hs_deserialize(PJRT_Client* client, const char* bytes, size_t size,
                           const char* options, size_t options_size,
                           PJRT_LoadedExecutable** out);

// hs_error_message returns err's message (valid until hs_error_destroy(err)).
const char* hs_error_message(PJRT_Error* err, size_t* size);
void hs_error_destroy(PJRT_Error* err);

// hs_warm_plan says whether loaded can be warmed (run once on zero inputs) and what
// its outputs are: *skip is NULL, or a static message saying why not (the plugin lacks
// a call it needs, or the program is one of several replicas or partitions);
// *num_outputs is their count and *output_bytes the sum of their dense sizes (on one
// device).
PJRT_Error* hs_warm_plan(PJRT_LoadedExecutable* loaded, const char** skip, size_t* num_outputs,
                         int64_t* output_bytes);

// hs_warm executes loaded, which has num_outputs outputs (hs_warm_plan), once on its
// device (a portable executable, which lists none, on client's first) and frees what
// that made. Its inputs are nbufs buffers filled from zeros (at least as long as the
// largest): buffer b has PJRT type types[b] and ranks[b] dimensions, taken in turn
// from dims; input i is buffer arg_buf[i]. Every input is marked non-donatable (one
// buffer may stand for several inputs of one shape). It waits for the execution.
PJRT_Error* hs_warm(PJRT_Client* client, PJRT_LoadedExecutable* loaded, size_t num_outputs,
                    size_t nbufs, const int* types, const size_t* ranks, const int64_t* dims,
                    const void* zeros, size_t nargs, const size_t* arg_buf);

// hs_destroy_loaded frees a loaded executable that will not be handed to the caller.
void hs_destroy_loaded(PJRT_LoadedExecutable* loaded);

#endif
