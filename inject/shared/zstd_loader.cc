#include "inject/shared/zstd_loader.h"

#include <zstd.h>

// libzstd calls these tracing hooks when someone defines them (it declares them weak): a program
// that does must not see the injected library's compression. Defined here, hidden, they say "no
// tracing".
extern "C" {
__attribute__((visibility("hidden"))) unsigned long long ZSTD_trace_compress_begin(const void*) {
  return 0;
}
__attribute__((visibility("hidden"))) void ZSTD_trace_compress_end(unsigned long long,
                                                                   const void*) {}
}

namespace gprof {

const ZstdApi* LoadZstd() {
  static constexpr ZstdApi kApi = {
      []() -> void* { return ZSTD_createCCtx(); },
      [](void* cctx) { return ZSTD_freeCCtx(static_cast<ZSTD_CCtx*>(cctx)); },
      [](void* cctx, int param, int value) {
        return ZSTD_CCtx_setParameter(static_cast<ZSTD_CCtx*>(cctx),
                                      static_cast<ZSTD_cParameter>(param), value);
      },
      [](void* cctx, void* dst, size_t dst_capacity, const void* src, size_t src_size) {
        return ZSTD_compress2(static_cast<ZSTD_CCtx*>(cctx), dst, dst_capacity, src, src_size);
      },
      [](size_t src_size) { return ZSTD_compressBound(src_size); },
      [](size_t code) { return ZSTD_isError(code); },
  };
  return &kApi;
}

}  // namespace gprof
