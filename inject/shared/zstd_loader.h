// zstd, as the session file writers use it. Linked statically (Debian's libzstd.a is built
// position-independent), also into the injected library: loading libzstd.so.1 at run time, as
// the writer thread once did on its first chunk, takes the dynamic loader's lock while the program
// runs, and a hard dependency on libzstd.so.1 would make LD_PRELOAD fail (and print to the
// target's stderr) on a machine without it. Chunks stay readable uncompressed as well.
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

// zstd's API; never nullptr. Safe from any thread.
const ZstdApi* LoadZstd();

}  // namespace gprof
