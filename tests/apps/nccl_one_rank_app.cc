// A communicator of one rank on the fake NCCL (tests/fake_nccl), as a world-size-1 torch job
// drives real NCCL (tests/nccl_abi_test.cc):
//   nccl_one_rank_app ITERS [MORE_COMMS]
// Each iteration: an all_reduce in place and one into another buffer (NCCL runs both without a
// kernel or a profiler event: ncclLaunchOneRank), then a group of a send and a receive to itself
// into another buffer (one ncclDevKernel_SendRecv kernel, a P2p event each: torch's all_to_all of
// one rank), then the same in place (skipped by NCCL). MORE_COMMS more communicators are created
// (and kept) after the first, before the iterations. Prints "done iters=K" at the end.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <initializer_list>

#include "tests/fake_nccl/nccl.h"

int main(int argc, char** argv) {
  const int iters = argc > 1 ? atoi(argv[1]) : 3;
  const int more_comms = argc > 2 ? atoi(argv[2]) : 0;
  ncclUniqueId id;
  ncclComm_t comm;
  if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&comm, 1, id, 0) != ncclSuccess)
    return 2;
  for (int i = 0; i < more_comms; ++i) {
    ncclComm_t more;
    if (ncclCommInitRank(&more, 1, id, 0) != ncclSuccess) return 2;
  }
  remove(id.internal);
  const size_t count = 4096;
  void* x = nullptr;
  void* y = nullptr;
  if (cudaMalloc(&x, count * sizeof(float)) != cudaSuccess ||
      cudaMalloc(&y, count * sizeof(float)) != cudaSuccess)
    return 2;
  for (int i = 0; i < iters; ++i) {
    if (ncclAllReduce(x, x, count, ncclFloat32, ncclSum, comm, nullptr) != ncclSuccess ||
        ncclAllReduce(x, y, count, ncclFloat32, ncclSum, comm, nullptr) != ncclSuccess)
      return 3;
    for (void* to : {y, x}) {
      ncclGroupStart();
      ncclSend(x, count, ncclFloat32, 0, comm, nullptr);
      ncclRecv(to, count, ncclFloat32, 0, comm, nullptr);
      if (ncclGroupEnd() != ncclSuccess) return 3;
    }
    if (cudaStreamSynchronize(nullptr) != cudaSuccess) return 3;
  }
  ncclCommDestroy(comm);
  printf("done iters=%d\n", iters);
  return 0;
}
