#include "zstd_loader.h"

#include <dlfcn.h>

#include <mutex>

namespace gprof {
namespace {

template <typename Fn>
bool Resolve(void* library, const char* name, Fn* out) {
  *out = reinterpret_cast<Fn>(dlsym(library, name));
  return *out != nullptr;
}

const ZstdApi* LoadOnce() {
  void* library = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) return nullptr;
  static ZstdApi api;
  if (!Resolve(library, "ZSTD_createCCtx", &api.create_cctx) ||
      !Resolve(library, "ZSTD_freeCCtx", &api.free_cctx) ||
      !Resolve(library, "ZSTD_CCtx_setParameter", &api.cctx_set_parameter) ||
      !Resolve(library, "ZSTD_compress2", &api.compress2) ||
      !Resolve(library, "ZSTD_compressBound", &api.compress_bound) ||
      !Resolve(library, "ZSTD_isError", &api.is_error)) {
    dlclose(library);
    return nullptr;
  }
  return &api;
}

}  // namespace

const ZstdApi* LoadZstd() {
  static std::once_flag once;
  static const ZstdApi* api = nullptr;
  std::call_once(once, [] { api = LoadOnce(); });
  return api;
}

}  // namespace gprof
