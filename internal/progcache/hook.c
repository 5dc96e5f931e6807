#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
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

// hs_executable gets loaded's executable into *exe (the caller destroys it with
// hs_destroy_executable).
static PJRT_Error* hs_executable(PJRT_LoadedExecutable* loaded, PJRT_Executable** exe) {
  PJRT_LoadedExecutable_GetExecutable_Args g;
  memset(&g, 0, sizeof(g));
  g.struct_size = PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE;
  g.loaded_executable = loaded;
  PJRT_Error* err = hs_api->PJRT_LoadedExecutable_GetExecutable(&g);
  if (err == NULL) *exe = g.executable;
  return err;
}

static void hs_destroy_executable(PJRT_Executable* exe) {
  PJRT_Executable_Destroy_Args d;
  memset(&d, 0, sizeof(d));
  d.struct_size = PJRT_Executable_Destroy_Args_STRUCT_SIZE;
  d.executable = exe;
  PJRT_Error* err = hs_api->PJRT_Executable_Destroy(&d);
  if (err != NULL) hs_error_destroy(err);
}

PJRT_Error* hs_serialize(PJRT_LoadedExecutable* loaded, hs_serialized* out) {
  PJRT_Executable* exe;
  PJRT_Error* err = hs_executable(loaded, &exe);
  if (err != NULL) return err;
  PJRT_Executable_Serialize_Args s;
  memset(&s, 0, sizeof(s));
  s.struct_size = PJRT_Executable_Serialize_Args_STRUCT_SIZE;
  s.executable = exe;
  err = hs_api->PJRT_Executable_Serialize(&s);
  PJRT_Executable_Destroy_Args d;
  memset(&d, 0, sizeof(d));
  d.struct_size = PJRT_Executable_Destroy_Args_STRUCT_SIZE;
  d.executable = exe;
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

// hs_element_size is the bytes of one element of a PJRT type, 0 for one it does not
// size (packed sub-byte types, tokens).
static int64_t hs_element_size(PJRT_Buffer_Type t) {
  switch (t) {
    case PJRT_Buffer_Type_PRED:
    case PJRT_Buffer_Type_S8:
    case PJRT_Buffer_Type_U8:
      return 1;
    case PJRT_Buffer_Type_S16:
    case PJRT_Buffer_Type_U16:
    case PJRT_Buffer_Type_F16:
    case PJRT_Buffer_Type_BF16:
      return 2;
    case PJRT_Buffer_Type_S32:
    case PJRT_Buffer_Type_U32:
    case PJRT_Buffer_Type_F32:
      return 4;
    case PJRT_Buffer_Type_S64:
    case PJRT_Buffer_Type_U64:
    case PJRT_Buffer_Type_F64:
    case PJRT_Buffer_Type_C64:
      return 8;
    case PJRT_Buffer_Type_C128:
      return 16;
    default:
      return 0;
  }
}

static void hs_destroy_buffer(PJRT_Buffer* b) {
  if (b == NULL) return;
  PJRT_Buffer_Destroy_Args d;
  memset(&d, 0, sizeof(d));
  d.struct_size = PJRT_Buffer_Destroy_Args_STRUCT_SIZE;
  d.buffer = b;
  PJRT_Error* err = hs_api->PJRT_Buffer_Destroy(&d);
  if (err != NULL) hs_error_destroy(err);
}

// hs_await waits for ev and destroys it, returning its error.
static PJRT_Error* hs_await(PJRT_Event* ev) {
  if (ev == NULL) return NULL;
  PJRT_Event_Await_Args a;
  memset(&a, 0, sizeof(a));
  a.struct_size = PJRT_Event_Await_Args_STRUCT_SIZE;
  a.event = ev;
  PJRT_Error* err = hs_api->PJRT_Event_Await(&a);
  PJRT_Event_Destroy_Args d;
  memset(&d, 0, sizeof(d));
  d.struct_size = PJRT_Event_Destroy_Args_STRUCT_SIZE;
  d.event = ev;
  PJRT_Error* derr = hs_api->PJRT_Event_Destroy(&d);
  if (derr != NULL) hs_error_destroy(derr);
  return err;
}

static PJRT_Error* hs_devices(PJRT_LoadedExecutable* loaded, PJRT_Device* const** devices,
                              size_t* n) {
  PJRT_LoadedExecutable_AddressableDevices_Args a;
  memset(&a, 0, sizeof(a));
  a.struct_size = PJRT_LoadedExecutable_AddressableDevices_Args_STRUCT_SIZE;
  a.executable = loaded;
  PJRT_Error* err = hs_api->PJRT_LoadedExecutable_AddressableDevices(&a);
  if (err == NULL) {
    *devices = a.addressable_devices;
    *n = a.num_addressable_devices;
  }
  return err;
}

PJRT_Error* hs_warm_plan(PJRT_LoadedExecutable* loaded, const char** skip, size_t* num_outputs,
                         int64_t* output_bytes) {
  *skip = NULL;
  *num_outputs = 0;
  *output_bytes = 0;
  if (!HS_HAS(hs_api, PJRT_LoadedExecutable_Execute) ||
      !HS_HAS(hs_api, PJRT_LoadedExecutable_AddressableDevices) ||
      !HS_HAS(hs_api, PJRT_Client_BufferFromHostBuffer) || !HS_HAS(hs_api, PJRT_Buffer_Destroy) ||
      !HS_HAS(hs_api, PJRT_Event_Await) || !HS_HAS(hs_api, PJRT_Event_Destroy) ||
      !HS_HAS(hs_api, PJRT_Executable_OutputElementTypes) ||
      !HS_HAS(hs_api, PJRT_Executable_OutputDimensions) ||
      !HS_HAS(hs_api, PJRT_Executable_NumReplicas) || !HS_HAS(hs_api, PJRT_Executable_NumPartitions) ||
      !HS_HAS(hs_api, PJRT_Client_AddressableDevices)) {
    *skip = "the plugin lacks a call warming needs";
    return NULL;
  }
  PJRT_Executable* exe;
  PJRT_Error* err = hs_executable(loaded, &exe);
  if (err != NULL) return err;
  // One of several replicas or partitions must be launched on all of its devices at
  // once, which warming does not do; a portable executable runs on any one device.
  PJRT_Executable_NumReplicas_Args nr;
  memset(&nr, 0, sizeof(nr));
  nr.struct_size = PJRT_Executable_NumReplicas_Args_STRUCT_SIZE;
  nr.executable = exe;
  err = hs_api->PJRT_Executable_NumReplicas(&nr);
  PJRT_Executable_NumPartitions_Args np;
  memset(&np, 0, sizeof(np));
  np.struct_size = PJRT_Executable_NumPartitions_Args_STRUCT_SIZE;
  np.executable = exe;
  if (err == NULL) err = hs_api->PJRT_Executable_NumPartitions(&np);
  if (err != NULL) {
    hs_destroy_executable(exe);
    return err;
  }
  if (nr.num_replicas != 1 || np.num_partitions != 1) {
    *skip = "the program runs on more than one device";
    hs_destroy_executable(exe);
    return NULL;
  }
  PJRT_Executable_OutputElementTypes_Args t;
  memset(&t, 0, sizeof(t));
  t.struct_size = PJRT_Executable_OutputElementTypes_Args_STRUCT_SIZE;
  t.executable = exe;
  err = hs_api->PJRT_Executable_OutputElementTypes(&t);
  PJRT_Executable_OutputDimensions_Args o;
  memset(&o, 0, sizeof(o));
  o.struct_size = PJRT_Executable_OutputDimensions_Args_STRUCT_SIZE;
  o.executable = exe;
  if (err == NULL) err = hs_api->PJRT_Executable_OutputDimensions(&o);
  if (err == NULL && o.num_outputs != t.num_output_types) {
    *skip = "the program's outputs are not plain arrays";
  }
  if (err == NULL && *skip == NULL) {
    *num_outputs = o.num_outputs;
    const int64_t* d = o.dims;
    for (size_t i = 0; i < o.num_outputs; i++) {
      int64_t n = hs_element_size(t.output_types[i]);
      if (n == 0) {
        *skip = "an output of a type warming does not size";
        break;
      }
      for (size_t k = 0; k < o.dim_sizes[i]; k++) n *= d[k];
      d += o.dim_sizes[i];
      *output_bytes += n;
    }
  }
  hs_destroy_executable(exe);
  return err;
}

PJRT_Error* hs_warm(PJRT_Client* client, PJRT_LoadedExecutable* loaded, size_t num_outputs,
                    size_t nbufs, const int* types, const size_t* ranks, const int64_t* dims,
                    const void* zeros, size_t nargs, const size_t* arg_buf) {
  PJRT_Device* const* devices;
  size_t ndev;
  PJRT_Error* err = hs_devices(loaded, &devices, &ndev);
  if (err != NULL) return err;
  // A portable executable (GoMLX's default) lists no device and runs on the one it is
  // given: the client's first, where GoMLX runs it on device 0.
  int portable = ndev != 1;
  if (ndev == 0) {
    PJRT_Client_AddressableDevices_Args cd;
    memset(&cd, 0, sizeof(cd));
    cd.struct_size = PJRT_Client_AddressableDevices_Args_STRUCT_SIZE;
    cd.client = client;
    err = hs_api->PJRT_Client_AddressableDevices(&cd);
    if (err != NULL) return err;
    devices = cd.addressable_devices;
    ndev = cd.num_addressable_devices;
    if (ndev == 0) return NULL;  // no device: nothing to warm on
  }

  PJRT_Buffer** bufs = calloc(nbufs ? nbufs : 1, sizeof(PJRT_Buffer*));
  PJRT_Buffer** args = calloc(nargs ? nargs : 1, sizeof(PJRT_Buffer*));
  int64_t* keep = calloc(nargs ? nargs : 1, sizeof(int64_t));
  PJRT_Buffer** outs = calloc(num_outputs ? num_outputs : 1, sizeof(PJRT_Buffer*));
  if (bufs == NULL || args == NULL || keep == NULL || outs == NULL) {
    free(bufs);
    free(args);
    free(keep);
    free(outs);
    return NULL;  // nothing warmed; the first execution pays as before
  }
  const int64_t* d = dims;
  for (size_t b = 0; b < nbufs && err == NULL; b++) {
    PJRT_Client_BufferFromHostBuffer_Args h;
    memset(&h, 0, sizeof(h));
    h.struct_size = PJRT_Client_BufferFromHostBuffer_Args_STRUCT_SIZE;
    h.client = client;
    h.data = zeros;
    h.type = (PJRT_Buffer_Type)types[b];
    h.dims = d;
    h.num_dims = ranks[b];
    h.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes;
    h.device = devices[0];
    err = hs_api->PJRT_Client_BufferFromHostBuffer(&h);
    if (err == NULL) {
      bufs[b] = h.buffer;
      err = hs_await(h.done_with_host_buffer);
    }
    d += ranks[b];
  }
  if (err == NULL) {
    for (size_t i = 0; i < nargs; i++) {
      args[i] = bufs[arg_buf[i]];
      keep[i] = (int64_t)i;
    }
    PJRT_ExecuteOptions opts;
    memset(&opts, 0, sizeof(opts));
    opts.struct_size = PJRT_ExecuteOptions_STRUCT_SIZE;
    opts.non_donatable_input_indices = keep;
    opts.num_non_donatable_input_indices = nargs;
    PJRT_Buffer* const* arg_list = args;
    PJRT_Buffer** out_list = outs;
    PJRT_Event* done = NULL;
    PJRT_LoadedExecutable_Execute_Args e;
    memset(&e, 0, sizeof(e));
    e.struct_size = PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE;
    e.executable = loaded;
    e.options = &opts;
    e.argument_lists = &arg_list;
    e.num_devices = 1;
    e.num_args = nargs;
    e.output_lists = &out_list;
    e.device_complete_events = &done;
    // Portable: run it on the chosen device (hs_warm_plan refused programs of several
    // replicas or partitions).
    if (portable) e.execute_device = devices[0];
    err = hs_api->PJRT_LoadedExecutable_Execute(&e);
    if (err == NULL) err = hs_await(done);
  }
  for (size_t i = 0; i < num_outputs; i++) hs_destroy_buffer(outs[i]);
  for (size_t b = 0; b < nbufs; b++) hs_destroy_buffer(bufs[b]);
  free(bufs);
  free(args);
  free(keep);
  free(outs);
  return err;
}
