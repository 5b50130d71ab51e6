// zstd, loaded at run time. The injected library lives inside other people's processes: a hard
// dependency on libzstd.so.1 would make LD_PRELOAD fail (and print to the target's stderr) on a
// machine without it, and the static libzstd.a of Debian is not built for shared objects. Without
// libzstd the writers store chunks uncompressed, which every reader accepts.
#pragma once

#include <cstddef>

namespace gprof {

struct ZstdApi {
  void* (*create_cctx)();
  size_t (*free_cctx)(void* cctx);
  size_t (*cctx_set_parameter)(void* cctx, int param, int value);
  size_t (*compress2)(void* cctx, void* dst, size_t dst_capacity, const void* src, size_t src_size);
  size_t (*compress_bound)(size_t src_size);
  unsigned (*is_error)(size_t code);
};

// The API of libzstd.so.1, or nullptr when it cannot be loaded. Loads once; safe from any thread.
const ZstdApi* LoadZstd();

}  // namespace gprof
