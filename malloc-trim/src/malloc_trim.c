// malloc_trim(0) for Node.js, through Node-API (ABI-stable: built once, loads on any Node with Node-API 1).
//
// Why: Node's native buffers (socket reads, HTTP/2 frames, zlib and file chunks of 16-64 KiB) come from
// glibc's malloc. After a burst of them (a full snapshot streams gigabytes through such chunks) the freed
// chunks sit between live ones; glibc gives back only the free space at the top of a heap, so the process
// keeps tens of MiB it no longer uses. malloc_trim walks every arena and releases the free pages anywhere in
// it (madvise MADV_DONTNEED), without moving anything.
//
// trim() returns true when memory was released, false when there was none; on a C library without
// malloc_trim (musl) it returns undefined and does nothing.
#include <node_api.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

static napi_value Trim(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value result;
#if defined(__GLIBC__)
  if (napi_get_boolean(env, malloc_trim(0) != 0, &result) != napi_ok) return NULL;
#else
  if (napi_get_undefined(env, &result) != napi_ok) return NULL;
#endif
  return result;
}

static napi_value Init(napi_env env, napi_value exports) {
  napi_value fn;
  if (napi_create_function(env, "trim", NAPI_AUTO_LENGTH, Trim, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "trim", fn) != napi_ok) return NULL;
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, Init)
