#include <dlfcn.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "hook.h"
#include "_cgo_export.h"

static PJRT_Api* hs_api;
static PJRT_Client_Compile* hs_original;

static PJRT_Error* hs_compile(PJRT_Client_Compile_Args* args) { return hsGoCompile(args); }

#define HS_HAS(api, field) \
  ((api)->struct_size >= offsetof(PJRT_Api, field) + sizeof((api)->field) && (api)->field != NULL)

const char* hs_install(const char* path) {
  void* handle = dlopen(path, RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
  if (handle == NULL) return "plugin is not loaded in this process";
  typedef const PJRT_Api* (*get_api_fn)(void);
  get_api_fn get = (get_api_fn)dlsym(handle, "GetPjrtApi");
  // The plugin stays loaded: go-xla holds its own handle for the process's life.
  dlclose(handle);
  if (get == NULL) return "plugin has no GetPjrtApi";
  PJRT_Api* api = (PJRT_Api*)get();
  if (api == NULL) return "GetPjrtApi returned no table";
  if (!HS_HAS(api, PJRT_Client_Compile) || !HS_HAS(api, PJRT_Executable_Serialize) ||
      !HS_HAS(api, PJRT_Executable_DeserializeAndLoad) ||
      !HS_HAS(api, PJRT_LoadedExecutable_GetExecutable) || !HS_HAS(api, PJRT_Executable_Destroy) ||
      !HS_HAS(api, PJRT_LoadedExecutable_Destroy) || !HS_HAS(api, PJRT_Error_Message) ||
      !HS_HAS(api, PJRT_Error_Destroy)) {
    return "plugin offers no executable serialization";
  }
  if (hs_api == api) return NULL;
  if (hs_api != NULL) return "another plugin is already hooked in this process";
  // The table is filled at run time by the plugin (a function-local static), so it
  // lives in writable memory; mprotect makes sure of it and changes nothing there.
  long page = sysconf(_SC_PAGESIZE);
  uintptr_t at = (uintptr_t)&api->PJRT_Client_Compile;
  uintptr_t start = at & ~((uintptr_t)page - 1);
  if (mprotect((void*)start, (at + sizeof(void*)) - start, PROT_READ | PROT_WRITE) != 0) {
    return "plugin's API table is not writable";
  }
  hs_original = api->PJRT_Client_Compile;
  hs_api = api;
  __atomic_store_n(&api->PJRT_Client_Compile, hs_compile, __ATOMIC_SEQ_CST);
  return NULL;
}

PJRT_Error* hs_compile_original(PJRT_Client_Compile_Args* args) { return hs_original(args); }

PJRT_Error* hs_serialize(PJRT_LoadedExecutable* loaded, hs_serialized* out) {
  PJRT_LoadedExecutable_GetExecutable_Args g;
  memset(&g, 0, sizeof(g));
  g.struct_size = PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE;
  g.loaded_executable = loaded;
  PJRT_Error* err = hs_api->PJRT_LoadedExecutable_GetExecutable(&g);
  if (err != NULL) return err;
  PJRT_Executable_Serialize_Args s;
  memset(&s, 0, sizeof(s));
  s.struct_size = PJRT_Executable_Serialize_Args_STRUCT_SIZE;
  s.executable = g.executable;
  err = hs_api->PJRT_Executable_Serialize(&s);
  PJRT_Executable_Destroy_Args d;
  memset(&d, 0, sizeof(d));
  d.struct_size = PJRT_Executable_Destroy_Args_STRUCT_SIZE;
  d.executable = g.executable;
  PJRT_Error* derr = hs_api->PJRT_Executable_Destroy(&d);
  if (err != NULL) {
    if (derr != NULL) hs_error_destroy(derr);
    return err;
  }
  if (derr != NULL) {
    s.serialized_executable_deleter(s.serialized_executable);
    return derr;
  }
  out->bytes = s.serialized_bytes;
  out->size = s.serialized_bytes_size;
  out->handle = s.serialized_executable;
  out->deleter = s.serialized_executable_deleter;
  return NULL;
}

void hs_serialized_free(hs_serialized* s) {
  if (s->deleter != NULL) s->deleter(s->handle);
}

PJRT_Error* hs_deserialize(PJRT_Client* client, const char* bytes, size_t size,
                           const char* options, size_t options_size,
                           PJRT_LoadedExecutable** out) {
  PJRT_Executable_DeserializeAndLoad_Args a;
  memset(&a, 0, sizeof(a));
  a.struct_size = PJRT_Executable_DeserializeAndLoad_Args_STRUCT_SIZE;
  a.client = client;
  a.serialized_executable = bytes;
  a.serialized_executable_size = size;
  a.overridden_serialized_compile_options = options;
  a.overridden_serialized_compile_options_size = options_size;
  PJRT_Error* err = hs_api->PJRT_Executable_DeserializeAndLoad(&a);
  if (err == NULL) *out = a.loaded_executable;
  return err;
}

const char* hs_error_message(PJRT_Error* err, size_t* size) {
  PJRT_Error_Message_Args m;
  memset(&m, 0, sizeof(m));
  m.struct_size = PJRT_Error_Message_Args_STRUCT_SIZE;
  m.error = err;
  hs_api->PJRT_Error_Message(&m);
  *size = m.message_size;
  return m.message;
}

void hs_error_destroy(PJRT_Error* err) {
  PJRT_Error_Destroy_Args d;
  memset(&d, 0, sizeof(d));
  d.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
  d.error = err;
  hs_api->PJRT_Error_Destroy(&d);
}

void hs_destroy_loaded(PJRT_LoadedExecutable* loaded) {
  PJRT_LoadedExecutable_Destroy_Args d;
  memset(&d, 0, sizeof(d));
  d.struct_size = PJRT_LoadedExecutable_Destroy_Args_STRUCT_SIZE;
  d.executable = loaded;
  PJRT_Error* err = hs_api->PJRT_LoadedExecutable_Destroy(&d);
  if (err != NULL) hs_error_destroy(err);
}
