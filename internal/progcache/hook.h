// hook.h declares the C half of the compiled-program cache: it puts hs_compile in
// the place of a PJRT plugin's PJRT_Client_Compile and gives Go the plugin calls
// that GoMLX's go-xla does not wrap (Serialize, DeserializeAndLoad).
#ifndef HINDSIGHT_PROGCACHE_HOOK_H
#define HINDSIGHT_PROGCACHE_HOOK_H

#include <stddef.h>
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

// hs_destroy_loaded frees a loaded executable that will not be handed to the caller.
void hs_destroy_loaded(PJRT_LoadedExecutable* loaded);

#endif
