// A fake NCCL (libnccl.so.2) for machines without a GPU: enough of NCCL for test programs of a few
// ranks, each its own process, and NCCL's profiler plugin loaded and called as NCCL 2.23 to 2.29
// do (docs/distributed.md, "NCCL").
//
// Ranks meet through a file in /dev/shm that ncclGetUniqueId creates and names in the id; its
// pages count each collective's arrivals. A collective launches a kernel named as NCCL's are
// (ncclDevKernel_AllReduce_Sum_f32_RING_LL) on the fake CUDA runtime's GPU and returns at once;
// the kernel runs until the last rank has arrived (fake_cuda.h's kUntilGateOpens, a
// process-shared futex), so a rank that arrived early has a long kernel and the last a short one,
// and a program waits for it as for NCCL's, on its stream. Up to 64 collectives of one
// communicator may be in flight.
//
// The profiler plugin: NCCL_PROFILER_PLUGIN as NCCL reads it ("none": no plugin; a name that
// dlopen cannot open, has no '/', and is no library name becomes libnccl-profiler-NAME.so;
// unset: libnccl-profiler.so). The newest ncclProfiler_vN the plugin exports is taken, from
// FAKE_NCCL_PROFILER_MAX (default 5, NCCL 2.28; 1 is NCCL 2.23, 6 NCCL 2.29) down to 1. Each
// communicator's init gets the activation mask; each collective is a group event (when asked
// for) and, inside it, a collective event, started and stopped around the enqueue with the
// descriptor of that version. A NCCL newer than 2.25 gives v2/v3 plugins a commHash of 0, as the
// real one's adapters do.
#include <dlfcn.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <iterator>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tests/fake_cuda/fake_cuda.h"
#include "tests/fake_nccl/nccl.h"

namespace {

constexpr int kProfileGroup = 1 << 0;
constexpr int kProfileColl = 1 << 1;

// The descriptors of NCCL's profiler interface, declared as NCCL declares them (one version each).
struct CollV1 {
  const char* name;
  uint64_t commHash;
  uint64_t seqNumber;
  uint8_t func;
  const void* sendBuff;
  void* recvBuff;
  size_t count;
  int root;
  uint8_t datatype;
  uint32_t op;
  size_t trafficBytes;
  uint8_t nMaxChannels, nWarps, algo, proto;
  int isCollnet, isNvls;
};
struct CollV2 {
  const char* name;
  uint64_t commHash;
  uint64_t seqNumber;
  const char* func;
  const void* sendBuff;
  void* recvBuff;
  size_t count;
  int root;
  const char* datatype;
  size_t trafficBytes;
  uint8_t nMaxChannels, nWarps;
  const char* algo;
  const char* proto;
};
struct CollV3 {
  const char* name;
  uint64_t commHash;
  uint64_t seqNumber;
  const char* func;
  const void* sendBuff;
  void* recvBuff;
  size_t count;
  int root;
  const char* datatype;
  uint8_t nMaxChannels, nWarps;
  const char* algo;
  const char* proto;
};
struct CollV4 {
  uint64_t seqNumber;
  const char* func;
  const void* sendBuff;
  void* recvBuff;
  size_t count;
  int root;
  const char* datatype;
  uint8_t nChannels, nWarps;
  const char* algo;
  const char* proto;
};
struct CollV5 {
  uint64_t seqNumber;
  const char* func;
  const void* sendBuff;
  void* recvBuff;
  size_t count;
  int root;
  const char* datatype;
  uint8_t nChannels, nWarps;
  const char* algo;
  const char* proto;
  void* parentGroup;
};
template <typename Type, typename Coll>
struct Descr {
  Type type;
  void* parentObj;
  int rank;
  union {
    Coll coll;
    char others[96];  // the other event types' members, not used here
  };
};

using Logger = void (*)(int, unsigned long, const char*, int, const char*, ...);
struct TableV1V2V3 {
  const char* name;
  int (*init)(void** context, int* mask);
  int (*start)(void* context, void** handle, void* descr);
  int (*stop)(void* handle);
  int (*record_state)(void* handle, int state, void* args);
  int (*finalize)(void* context);
};
struct TableV4 {
  const char* name;
  int (*init)(void** context, int* mask, const char* comm_name, uint64_t comm_hash, int n_nodes,
              int n_ranks, int rank, Logger logger);
  int (*start)(void* context, void** handle, void* descr);
  int (*stop)(void* handle);
  int (*record_state)(void* handle, int state, void* args);
  int (*finalize)(void* context);
};
struct TableV5 {
  const char* name;
  int (*init)(void** context, uint64_t comm_id, int* mask, const char* comm_name, int n_nodes,
              int n_ranks, int rank, Logger logger);
  int (*start)(void* context, void** handle, void* descr);
  int (*stop)(void* handle);
  int (*record_state)(void* handle, int state, void* args);
  int (*finalize)(void* context);
};

struct Plugin {
  bool tried = false;
  int max_version = 5;  // the newest interface this NCCL knows
  int version = 0;      // the one taken; 0: no plugin
  const void* table = nullptr;
  int mask = 0;  // the activation mask the plugin set
};
Plugin g_plugin;

void NoLog(int, unsigned long, const char*, int, const char*, ...) {}

void* OpenPlugin() {
  const char* value = getenv("NCCL_PROFILER_PLUGIN");
  if (value != nullptr && strcasecmp(value, "none") == 0) return nullptr;
  if (value == nullptr || value[0] == '\0')
    return dlopen("libnccl-profiler.so", RTLD_NOW | RTLD_LOCAL);
  if (void* library = dlopen(value, RTLD_NOW | RTLD_LOCAL)) return library;
  size_t length = strlen(value);
  if (strchr(value, '/') != nullptr || strncmp(value, "lib", 3) == 0 ||
      (length >= 3 && strcmp(value + length - 3, ".so") == 0))
    return nullptr;
  char name[256];
  snprintf(name, sizeof(name), "libnccl-profiler-%s.so", value);
  return dlopen(name, RTLD_NOW | RTLD_LOCAL);
}

void LoadPlugin() {
  if (g_plugin.tried) return;
  g_plugin.tried = true;
  if (const char* max = getenv("FAKE_NCCL_PROFILER_MAX")) g_plugin.max_version = atoi(max);
  void* library = OpenPlugin();
  for (int version = g_plugin.max_version; library != nullptr && version >= 1; --version) {
    char symbol[32];
    snprintf(symbol, sizeof(symbol), "ncclProfiler_v%d", version);
    if (const void* table = dlsym(library, symbol)) {
      g_plugin.table = table;
      g_plugin.version = version;
      return;
    }
  }
}

template <typename Table>
const Table* Tab() {
  return static_cast<const Table*>(g_plugin.table);
}
int Start(void* context, void** handle, void* descr) {
  if (g_plugin.version >= 5) return Tab<TableV5>()->start(context, handle, descr);
  if (g_plugin.version == 4) return Tab<TableV4>()->start(context, handle, descr);
  return Tab<TableV1V2V3>()->start(context, handle, descr);
}
int Stop(void* handle) {
  if (g_plugin.version >= 5) return Tab<TableV5>()->stop(handle);
  if (g_plugin.version == 4) return Tab<TableV4>()->stop(handle);
  return Tab<TableV1V2V3>()->stop(handle);
}

constexpr uint32_t kSlots = 64;  // collectives in flight on one communicator

struct Shared {
  std::atomic<uint32_t> arrived;  // ncclCommInitRank's barrier
  std::atomic<uint32_t> generation;
  std::atomic<uint32_t> collective_arrived[kSlots];  // by sequence number modulo kSlots
  std::atomic<uint32_t> collective_done[kSlots];     // the last done there, plus one
};

uint64_t Fnv1a64(const void* data, size_t size) {
  uint64_t hash = 1469598103934665603ull;
  for (size_t i = 0; i < size; ++i)
    hash = (hash ^ static_cast<const uint8_t*>(data)[i]) * 1099511628211ull;
  return hash;
}

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, nullptr, nullptr, 0);
}

}  // namespace

struct ncclComm {
  Shared* shared = nullptr;
  int rank = 0;
  int nranks = 0;
  uint64_t hash = 0;
  uint64_t seq = 0;              // the communicator's collectives: their kernels' gate
  uint64_t func_seq[16] = {};    // NCCL's sequence numbers, each function's counted apart
  void* context = nullptr;
};

namespace {

// Every rank passes; the last to arrive releases the others.
void Barrier(ncclComm* comm) {
  Shared* shared = comm->shared;
  const uint32_t generation = shared->generation.load(std::memory_order_acquire);
  if (shared->arrived.fetch_add(1, std::memory_order_acq_rel) + 1 ==
      static_cast<uint32_t>(comm->nranks)) {
    shared->arrived.store(0, std::memory_order_relaxed);
    shared->generation.fetch_add(1, std::memory_order_release);
    Futex(&shared->generation, FUTEX_WAKE, INT32_MAX);
    return;
  }
  while (shared->generation.load(std::memory_order_acquire) == generation)
    Futex(&shared->generation, FUTEX_WAIT, generation);
}

template <typename Type, typename Coll>
void StartColl(ncclComm* comm, void* group, void** handle, Coll coll) {
  Descr<Type, Coll> descr{};
  descr.type = kProfileColl;
  descr.parentObj = group;
  descr.rank = comm->rank;
  descr.coll = coll;
  Start(comm->context, handle, &descr);
}

// One collective: its kernel launched, then the plugin's events, as NCCL (2.24-2.30) starts and
// stops them just after the launch (hostStreamPlanTask). The kernel takes part once it runs on
// the GPU, and runs until every rank's has started.
ncclResult_t Collective(ncclComm* comm, const char* func, const char* kernel, uint8_t func_id,
                        const void* send, void* recv, size_t count, int root, void* stream) {
  if (comm == nullptr || func_id >= std::size(comm->func_seq)) return ncclInvalidArgument;
  const uint64_t gate_seq = comm->seq++;
  const uint32_t slot = static_cast<uint32_t>(gate_seq % kSlots);
  fake_cuda::KernelGate gate{&comm->shared->collective_done[slot],
                             static_cast<uint32_t>(gate_seq + 1), kernel,
                             &comm->shared->collective_arrived[slot],
                             static_cast<uint32_t>(comm->nranks)};
  uint32_t duration = fake_cuda::kUntilGateOpens | 5;  // 5 us of work once all have arrived
  void* args[] = {&duration, &gate};
  const cudaError_t launched = cudaLaunchKernel(&fake_cuda::kKernel, dim3(1), dim3(1), args, 0,
                                                static_cast<cudaStream_t>(stream));
  const uint64_t seq = comm->func_seq[func_id]++;
  const int version = g_plugin.version;
  void* group = nullptr;
  void* coll = nullptr;
  if (version != 0 && (g_plugin.mask & kProfileGroup)) {
    if (version >= 5) {
      Descr<uint64_t, CollV5> descr{};
      descr.type = kProfileGroup;
      descr.rank = comm->rank;
      Start(comm->context, &group, &descr);
    } else {
      Descr<uint8_t, CollV4> descr{};
      descr.type = kProfileGroup;
      descr.rank = comm->rank;
      Start(comm->context, &group, &descr);
    }
  }
  if (version != 0 && (g_plugin.mask & kProfileColl)) {
    // A NCCL newer than the v2/v3 interface adapts to it without the communicator's hash.
    const uint64_t hash = g_plugin.max_version <= 3 ? comm->hash : 0;
    switch (version) {
      case 1:
        StartColl<uint8_t>(comm, group, &coll,
                           CollV1{func, comm->hash, seq, func_id, send, recv, count, root, 7, 0,
                                  count * 4, 1, 1, 0, 0, 0, 0});
        break;
      case 2:
        StartColl<uint8_t>(comm, group, &coll,
                           CollV2{func, hash, seq, func, send, recv, count, root, "ncclFloat32",
                                  count * 4, 1, 1, "RING", "LL"});
        break;
      case 3:
        StartColl<uint8_t>(comm, group, &coll,
                           CollV3{func, hash, seq, func, send, recv, count, root, "ncclFloat32", 1,
                                  1, "RING", "LL"});
        break;
      case 4:
        StartColl<uint8_t>(
            comm, group, &coll,
            CollV4{seq, func, send, recv, count, root, "ncclFloat32", 1, 1, "RING", "LL"});
        break;
      default:
        StartColl<uint64_t>(
            comm, group, &coll,
            CollV5{seq, func, send, recv, count, root, "ncclFloat32", 1, 1, "RING", "LL", group});
        break;
    }
  }
  if (coll != nullptr) Stop(coll);
  if (group != nullptr) Stop(group);
  return launched == cudaSuccess ? ncclSuccess : ncclSystemError;
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return ncclInvalidArgument;
  *version = 22800;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return ncclInvalidArgument;
  memset(id, 0, sizeof(*id));
  snprintf(id->internal, sizeof(id->internal), "/dev/shm/fake-nccl-XXXXXX");
  int fd = mkstemp(id->internal);
  if (fd < 0) return ncclSystemError;
  int ok = ftruncate(fd, sizeof(Shared));
  close(fd);
  return ok == 0 ? ncclSuccess : ncclSystemError;
}

ncclResult_t ncclCommInitRank(ncclComm_t* out, int nranks, ncclUniqueId id, int rank) {
  if (out == nullptr || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  id.internal[sizeof(id.internal) - 1] = '\0';
  int fd = open(id.internal, O_RDWR | O_CLOEXEC);
  if (fd < 0) return ncclSystemError;
  void* pages = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (pages == MAP_FAILED) return ncclSystemError;
  auto* comm = new ncclComm;
  comm->shared = static_cast<Shared*>(pages);
  comm->rank = rank;
  comm->nranks = nranks;
  comm->hash = Fnv1a64(id.internal, sizeof(id.internal));
  LoadPlugin();
  int mask = 0;
  int error = 0;
  switch (g_plugin.version) {
    case 0:
      break;
    case 1:
    case 2:
    case 3:
      error = Tab<TableV1V2V3>()->init(&comm->context, &mask);
      break;
    case 4:
      error = Tab<TableV4>()->init(&comm->context, &mask, "", comm->hash, 1, nranks, rank, NoLog);
      break;
    default:
      error = Tab<TableV5>()->init(&comm->context, comm->hash, &mask, "", 1, nranks, rank, NoLog);
      break;
  }
  if (error == 0) g_plugin.mask = mask;
  *out = comm;
  Barrier(comm);  // every rank is there, as ncclCommInitRank returns
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t,
                           ncclRedOp_t, ncclComm_t comm, void* stream) {
  return Collective(comm, "AllReduce", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 4, sendbuff,
                    recvbuff, count, -1, stream);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t,
                           int root, ncclComm_t comm, void* stream) {
  return Collective(comm, "Broadcast", "ncclDevKernel_Broadcast_RING_LL", 1, sendbuff, recvbuff,
                    count, root, stream);
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclInvalidArgument;
  if (comm->context != nullptr) {
    if (g_plugin.version >= 5)
      Tab<TableV5>()->finalize(comm->context);
    else if (g_plugin.version == 4)
      Tab<TableV4>()->finalize(comm->context);
    else
      Tab<TableV1V2V3>()->finalize(comm->context);
  }
  munmap(comm->shared, sizeof(Shared));
  delete comm;
  return ncclSuccess;
}

}  // extern "C"
