// A fake NCCL (libnccl.so.2) for machines without a GPU: enough of NCCL for test programs of a few
// ranks, each its own process, and NCCL's profiler plugin loaded and called as NCCL 2.23 to 2.30
// do (docs/distributed.md, "NCCL"; each behaviour below is real NCCL's, source named).
//
// Ranks meet through a file in /dev/shm that ncclGetUniqueId creates and names in the id; its
// pages count each collective's arrivals. A collective launches a kernel named as NCCL's are
// (ncclDevKernel_AllReduce_Sum_f32_RING_LL) on the fake CUDA runtime's GPU and returns at once;
// the kernel runs until the last rank has arrived (fake_cuda.h's kUntilGateOpens, a
// process-shared futex), so a rank that arrived early has a long kernel and the last a short one,
// and a program waits for it as for NCCL's, on its stream. Up to 64 collectives of one
// communicator may be in flight. A communicator of one rank runs a collective as NCCL's
// ncclLaunchOneRank does (enqueue.cc taskAppend): a copy when the buffers differ, no kernel, no
// profiler event. Sends and receives are to the rank itself only (one rank's all-to-all), paired
// in ncclGroupEnd: an in-place pair is skipped (scheduleP2pTasksToPlan), the others run in one
// ncclDevKernel_SendRecv kernel with a P2p event each.
//
// The profiler plugin: NCCL_PROFILER_PLUGIN as NCCL 2.27 and later read it (plugin_open.cc:
// "none": no plugin; a value dlopen cannot open, with no '/' and not named lib...so, becomes
// libnccl-profiler-VALUE.so; unset: libnccl-profiler.so). The newest ncclProfiler_vN the plugin
// exports is taken, from FAKE_NCCL_PROFILER_MAX (the newest this NCCL knows: 1 NCCL 2.23,
// 2 2.24-2.25, 3 2.26, 4 2.27, 5 2.28 (the default), 6 2.29-2.30) down to 1. Each communicator's
// init writes the one activation mask of the process (its result is only logged by NCCL), which
// each collective and send/receive keeps when it is enqueued. After a plan's kernel is launched,
// on the launching thread (hostStreamPlanTask): its group event, then each task's event
// (collectives with their function's own sequence number, seqNumber[func]), all stopped before
// the call returns, with the descriptor of that version. A NCCL newer than 2.26 gives v2/v3
// plugins a commHash of 0, as the real one's adapters do.
#include <dlfcn.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tests/fake_cuda/fake_cuda.h"
#include "tests/fake_nccl/nccl.h"

namespace {

constexpr int kProfileGroup = 1 << 0;
constexpr int kProfileColl = 1 << 1;
constexpr int kProfileP2p = 1 << 2;

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
struct P2pV1 {
  const char* name;
  uint64_t commHash;
  uint8_t func;
  void* buff;
  uint8_t datatype;
  size_t count;
  int peer;
};
struct P2pV2 {  // and v3
  const char* name;
  uint64_t commHash;
  const char* func;
  void* buff;
  const char* datatype;
  size_t count;
  int peer;
};
struct P2pV4 {
  const char* func;
  void* buff;
  const char* datatype;
  size_t count;
  int peer;
  uint8_t nChannels;
};
struct P2pV5 {  // and v6
  const char* func;
  void* buff;
  const char* datatype;
  size_t count;
  int peer;
  uint8_t nChannels;
  void* parentGroup;
};
// Offsets in the union, as NCCL 2.23.4 to 2.30.7's headers give them (offsetof on the real
// profiler_v*.h, less the union's 24).
static_assert(offsetof(CollV1, seqNumber) == 16 && offsetof(CollV2, datatype) == 64 &&
              offsetof(CollV3, datatype) == 64 && offsetof(CollV4, datatype) == 48 &&
              offsetof(CollV5, parentGroup) == 80);
static_assert(offsetof(P2pV2, peer) == 48 && offsetof(P2pV4, peer) == 32 &&
              offsetof(P2pV5, parentGroup) == 40);

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
  int mask = 0;  // the process's activation mask (ncclProfilerEventMask), written by every init
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
  if (strchr(value, '/') != nullptr ||
      (strncmp(value, "lib", 3) == 0 && length >= 3 && strcmp(value + length - 3, ".so") == 0))
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
// startEvent's result is ignored, as NCCL ignores it; the handle is what the plugin left.
void Start(void* context, void** handle, void* descr) {
  *handle = nullptr;
  if (g_plugin.version >= 5)
    Tab<TableV5>()->start(context, handle, descr);
  else if (g_plugin.version == 4)
    Tab<TableV4>()->start(context, handle, descr);
  else
    Tab<TableV1V2V3>()->start(context, handle, descr);
}
void Stop(void* handle) {
  if (handle == nullptr) return;
  if (g_plugin.version >= 5)
    Tab<TableV5>()->stop(handle);
  else if (g_plugin.version == 4)
    Tab<TableV4>()->stop(handle);
  else
    Tab<TableV1V2V3>()->stop(handle);
}

constexpr uint32_t kSlots = 64;  // collectives in flight on one communicator
constexpr int kFuncs = 8;        // NCCL's ncclFunc_t values the fake uses (Broadcast 0 ... Recv 7)
constexpr int kFuncBroadcast = 0, kFuncAllReduce = 4, kFuncSend = 6, kFuncRecv = 7;
constexpr int kMaxP2p = 16;  // sends and receives queued in one group on one communicator

struct Shared {
  std::atomic<uint32_t> arrived;  // ncclCommInitRank's barrier
  std::atomic<uint32_t> generation;
  std::atomic<uint32_t> collective_arrived[kSlots];  // by the communicator's collective count
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

// One send or receive waiting for its group's end.
struct P2pTask {
  int func;  // kFuncSend or kFuncRecv
  void* buff;
  size_t count;
  int peer;
  int mask;  // the activation mask when it was enqueued
};

}  // namespace

struct ncclComm {
  Shared* shared = nullptr;
  int rank = 0;
  int nranks = 0;
  uint64_t hash = 0;
  uint64_t collectives = 0;          // this rank's collectives so far: the gate's slot
  uint64_t seq_number[kFuncs] = {};  // NCCL's comm->seqNumber, one count per function
  void* context = nullptr;
  P2pTask p2p[kMaxP2p] = {};
  int n_p2p = 0;
};

namespace {

thread_local int t_group_depth = 0;
thread_local ncclComm* t_group_comms[8];
thread_local int t_group_n_comms = 0;

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

template <typename Type, typename Body>
void StartTask(ncclComm* comm, int type, void* parent, void** handle, const Body& body) {
  struct {
    Type type;
    void* parentObj;
    int rank;
    union {
      Body body;
      char others[88];  // the other event types' members, not used here
    };
  } descr{};
  descr.type = static_cast<Type>(type);
  descr.parentObj = parent;
  descr.rank = comm->rank;
  descr.body = body;
  Start(comm->context, handle, &descr);
}

// The plan's group event (profiler.cc ncclProfilerStartGroupEvent), if its tasks asked for events.
void* StartGroup(ncclComm* comm, int mask) {
  void* group = nullptr;
  if (g_plugin.version == 0 || (mask & (kProfileGroup | kProfileColl | kProfileP2p)) == 0)
    return nullptr;
  if (g_plugin.version >= 5)
    StartTask<uint64_t>(comm, kProfileGroup, nullptr, &group, CollV5{});
  else
    StartTask<uint8_t>(comm, kProfileGroup, nullptr, &group, CollV4{});
  return group;
}

const char* FuncName(int func) {
  switch (func) {
    case kFuncBroadcast:
      return "Broadcast";
    case kFuncAllReduce:
      return "AllReduce";
    case kFuncSend:
      return "Send";
    default:
      return "Recv";
  }
}

// A collective's event, with its sequence number (ncclProfilerStartTaskEvents).
void* StartColl(ncclComm* comm, void* group, int func, const void* send, void* recv, size_t count,
                int root) {
  void* coll = nullptr;
  const char* name = FuncName(func);
  const uint64_t seq = comm->seq_number[func];
  // A NCCL newer than the v2/v3 interface adapts to it without the communicator's hash.
  const uint64_t hash = g_plugin.max_version <= 3 ? comm->hash : 0;
  void* parent = g_plugin.version >= 5 ? nullptr : group;  // v5: the collective's API event
  switch (g_plugin.version) {
    case 1:
      StartTask<uint8_t>(comm, kProfileColl, parent, &coll,
                         CollV1{name, comm->hash, seq, static_cast<uint8_t>(func), send, recv,
                                count, root, 7, 0, count * 4, 1, 1, 0, 0, 0, 0});
      break;
    case 2:
      StartTask<uint8_t>(comm, kProfileColl, parent, &coll,
                         CollV2{name, hash, seq, name, send, recv, count, root, "ncclFloat32",
                                count * 4, 1, 1, "RING", "LL"});
      break;
    case 3:
      StartTask<uint8_t>(comm, kProfileColl, parent, &coll,
                         CollV3{name, hash, seq, name, send, recv, count, root, "ncclFloat32", 1, 1,
                                "RING", "LL"});
      break;
    case 4:
      StartTask<uint8_t>(
          comm, kProfileColl, parent, &coll,
          CollV4{seq, name, send, recv, count, root, "ncclFloat32", 1, 1, "RING", "LL"});
      break;
    default:
      StartTask<uint64_t>(
          comm, kProfileColl, parent, &coll,
          CollV5{seq, name, send, recv, count, root, "ncclFloat32", 1, 1, "RING", "LL", group});
      break;
  }
  return coll;
}

// A send's or receive's event (ncclProfilerStartTaskEvents).
void* StartP2p(ncclComm* comm, void* group, const P2pTask& task) {
  void* p2p = nullptr;
  const char* name = FuncName(task.func);
  const uint64_t hash = g_plugin.max_version <= 3 ? comm->hash : 0;
  void* parent = g_plugin.version >= 5 ? nullptr : group;  // v5: the send's API event
  switch (g_plugin.version) {
    case 1:
      StartTask<uint8_t>(comm, kProfileP2p, parent, &p2p,
                         P2pV1{name, comm->hash, static_cast<uint8_t>(task.func), task.buff, 7,
                               task.count, task.peer});
      break;
    case 2:
    case 3:
      StartTask<uint8_t>(comm, kProfileP2p, parent, &p2p,
                         P2pV2{name, hash, name, task.buff, "ncclFloat32", task.count, task.peer});
      break;
    case 4:
      StartTask<uint8_t>(comm, kProfileP2p, parent, &p2p,
                         P2pV4{name, task.buff, "ncclFloat32", task.count, task.peer, 1});
      break;
    default:
      StartTask<uint64_t>(comm, kProfileP2p, parent, &p2p,
                          P2pV5{name, task.buff, "ncclFloat32", task.count, task.peer, 1, group});
      break;
  }
  return p2p;
}

// One collective: its kernel launched, then its events, as NCCL's hostStreamPlanTask runs them
// after ncclLaunchKernel.
ncclResult_t Collective(ncclComm* comm, int func, const char* kernel, const void* send, void* recv,
                        size_t count, int root, void* stream) {
  if (comm == nullptr) return ncclInvalidArgument;
  if (count == 0) return ncclSuccess;  // empty collectives are discarded
  if (comm->nranks == 1) {             // ncclLaunchOneRank: a copy, or nothing in place
    if (send == recv) return ncclSuccess;
    return cudaMemcpyAsync(recv, send, count * sizeof(float), cudaMemcpyDeviceToDevice,
                           static_cast<cudaStream_t>(stream)) == cudaSuccess
               ? ncclSuccess
               : ncclSystemError;
  }
  const int mask = g_plugin.mask;
  const uint64_t n = comm->collectives++;
  // The kernel takes part once it runs on the GPU (the fake GPU counts it there): it runs until
  // every rank's kernel has started.
  const uint32_t slot = static_cast<uint32_t>(n % kSlots);
  fake_cuda::KernelGate gate{&comm->shared->collective_done[slot], static_cast<uint32_t>(n + 1),
                             kernel, &comm->shared->collective_arrived[slot],
                             static_cast<uint32_t>(comm->nranks)};
  uint32_t duration = fake_cuda::kUntilGateOpens | 5;  // 5 us of work once all have arrived
  void* args[] = {&duration, &gate};
  const cudaError_t launched = cudaLaunchKernel(&fake_cuda::kKernel, dim3(1), dim3(1), args, 0,
                                                static_cast<cudaStream_t>(stream));
  void* group = StartGroup(comm, mask);
  void* coll = nullptr;
  if (g_plugin.version != 0 && (mask & kProfileColl))
    coll = StartColl(comm, group, func, send, recv, count, root);
  ++comm->seq_number[func];
  Stop(coll);
  Stop(group);
  return launched == cudaSuccess ? ncclSuccess : ncclSystemError;
}

// A group's sends and receives on `comm`, all to the rank itself: paired in order, an in-place
// pair skipped, the others one plan (one kernel, then a P2p event for each).
ncclResult_t RunP2p(ncclComm* comm, void* stream) {
  const int n = comm->n_p2p;
  comm->n_p2p = 0;
  P2pTask* sends[kMaxP2p];
  P2pTask* recvs[kMaxP2p];
  int n_sends = 0, n_recvs = 0;
  for (int i = 0; i < n; ++i)
    (comm->p2p[i].func == kFuncSend ? sends[n_sends++] : recvs[n_recvs++]) = &comm->p2p[i];
  if (n_sends != n_recvs) return ncclInvalidUsage;  // a send to self without its receive
  P2pTask* plan[kMaxP2p];
  int n_plan = 0;
  for (int i = 0; i < n_sends; ++i) {
    if (sends[i]->buff == recvs[i]->buff) continue;
    plan[n_plan++] = sends[i];
    plan[n_plan++] = recvs[i];
  }
  if (n_plan == 0) return ncclSuccess;
  // A gate open from the start: only the kernel's name is wanted.
  static std::atomic<uint32_t> always_open{1};
  fake_cuda::KernelGate gate{&always_open, 1, "ncclDevKernel_SendRecv"};
  uint32_t duration = fake_cuda::kUntilGateOpens | 5;
  void* args[] = {&duration, &gate};
  const cudaError_t launched = cudaLaunchKernel(&fake_cuda::kKernel, dim3(1), dim3(1), args, 0,
                                                static_cast<cudaStream_t>(stream));
  void* group = StartGroup(comm, plan[0]->mask);
  void* events[kMaxP2p] = {};
  for (int i = 0; i < n_plan; ++i)
    if (g_plugin.version != 0 && (plan[i]->mask & kProfileP2p))
      events[i] = StartP2p(comm, group, *plan[i]);
  for (int i = 0; i < n_plan; ++i) Stop(events[i]);
  Stop(group);
  return launched == cudaSuccess ? ncclSuccess : ncclSystemError;
}

thread_local void* t_group_stream = nullptr;  // the stream of the group's sends and receives

ncclResult_t EnqueueP2p(int func, void* buff, size_t count, int peer, ncclComm* comm,
                        void* stream) {
  if (comm == nullptr || peer < 0 || peer >= comm->nranks) return ncclInvalidArgument;
  if (peer != comm->rank) return ncclInvalidArgument;  // the fake's limit: to itself only
  if (comm->n_p2p == kMaxP2p) return ncclInvalidUsage;
  comm->p2p[comm->n_p2p++] = {func, buff, count, peer, g_plugin.mask};
  t_group_stream = stream;
  bool joined = false;
  for (int i = 0; i < t_group_n_comms; ++i) joined |= t_group_comms[i] == comm;
  if (!joined && t_group_n_comms < 8) t_group_comms[t_group_n_comms++] = comm;
  if (t_group_depth > 0) return ncclSuccess;
  t_group_n_comms = 0;
  return RunP2p(comm, stream);  // outside a group: a group of its own, as NCCL makes one
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
  // NCCL passes its one mask of the process and only logs a failed init (ncclProfilerPluginInit).
  switch (g_plugin.version) {
    case 0:
      break;
    case 1:
    case 2:
    case 3:
      Tab<TableV1V2V3>()->init(&comm->context, &g_plugin.mask);
      break;
    case 4:
      Tab<TableV4>()->init(&comm->context, &g_plugin.mask, "", comm->hash, 1, nranks, rank, NoLog);
      break;
    default:
      Tab<TableV5>()->init(&comm->context, comm->hash, &g_plugin.mask, "", 1, nranks, rank, NoLog);
      break;
  }
  *out = comm;
  Barrier(comm);  // every rank is there, as ncclCommInitRank returns
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t,
                           ncclRedOp_t, ncclComm_t comm, void* stream) {
  return Collective(comm, kFuncAllReduce, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", sendbuff,
                    recvbuff, count, -1, stream);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t,
                           int root, ncclComm_t comm, void* stream) {
  return Collective(comm, kFuncBroadcast, "ncclDevKernel_Broadcast_RING_LL", sendbuff, recvbuff,
                    count, root, stream);
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t, int peer, ncclComm_t comm,
                      void* stream) {
  return EnqueueP2p(kFuncSend, const_cast<void*>(sendbuff), count, peer, comm, stream);
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t, int peer, ncclComm_t comm,
                      void* stream) {
  return EnqueueP2p(kFuncRecv, recvbuff, count, peer, comm, stream);
}

ncclResult_t ncclGroupStart() {
  ++t_group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (t_group_depth == 0) return ncclInvalidUsage;
  if (--t_group_depth > 0) return ncclSuccess;
  ncclResult_t result = ncclSuccess;
  for (int i = 0; i < t_group_n_comms; ++i) {
    ncclResult_t one = RunP2p(t_group_comms[i], t_group_stream);
    if (result == ncclSuccess) result = one;
  }
  t_group_n_comms = 0;
  return result;
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
