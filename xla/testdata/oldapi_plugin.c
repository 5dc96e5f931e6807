// A fake PJRT plugin that reports C API 0.81 (older than go-xla's 0.83): backend_test.go
// builds it with cc to check NewBackend refuses it before creating a client. Only the
// calls go-xla makes while loading a plugin (initialize, attributes) are filled in.
#include <stddef.h>
#include <string.h>
#include "pjrt_c_api.h"

static PJRT_Error* initialize(PJRT_Plugin_Initialize_Args* args) { return NULL; }

static PJRT_Error* attributes(PJRT_Plugin_Attributes_Args* args) {
  args->attributes = NULL;
  args->num_attributes = 0;
  return NULL;
}

static PJRT_Api api;

const PJRT_Api* GetPjrtApi(void) {
  memset(&api, 0, sizeof(api));
  api.struct_size = offsetof(PJRT_Api, PJRT_Plugin_Attributes) + sizeof(void*);
  api.pjrt_api_version.struct_size = PJRT_Api_Version_STRUCT_SIZE;
  api.pjrt_api_version.major_version = 0;
  api.pjrt_api_version.minor_version = 81;
  api.PJRT_Plugin_Initialize = initialize;
  api.PJRT_Plugin_Attributes = attributes;
  return &api;
}
