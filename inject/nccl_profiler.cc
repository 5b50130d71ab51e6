// NCCL's profiler plugin, inside the injected library (docs/distributed.md, "NCCL"): NCCL 2.24 and
// later dlopen what NCCL_PROFILER_PLUGIN names (cli/run_command.cc sets it to this library, which
// LD_PRELOAD has already loaded: the same handle) and take the newest ncclProfiler_vN it finds.
// Each collective and send/receive NCCL enqueues becomes one format::NcclEventRecord with its
// communicator, rank and sequence number, so that the collector matches a collective across ranks
// (collector/analysis/nccl_collectives.h). It lives here, not in a library of its own, because its
// records go through the calling thread's ring and the one writer of the process (recorder.h).
//
// The interface's facts (NCCL's src/include/plugin/profiler/profiler_v*.h; none of its code;
// checked field by field against the headers of NCCL 2.23.4 to 2.30.7):
//   v1 (2.23): descriptors carry commHash and seqNumber, func and datatype as numbers. Only
//       forwarded: its numbers are NCCL's internal enums.
//   v2 (2.24, 2.25), v3 (2.26): init(context, mask); coll and p2p carry commHash (0 when a newer
//       NCCL adapts to them), coll its seqNumber; func and datatype are strings.
//   v4 (2.27): init(context, mask, commName, commHash, nNodes, nRanks, rank, logger);
//       descriptors lose commHash.
//   v5 (2.28), v6 (2.29, 2.30): init(context, commId, mask, commName, nNodes, nRanks, rank,
//       logger); the event type is 64 bits wide; coll and p2p end with parentGroup. v6 adds only
//       event types (copy-engine collectives) after v5's, with v5's layouts: a v5 plugin serves a
//       v6 NCCL.
// In every version the descriptor is {type, parentObj, rank, union}, the union at offset 24.
// seqNumber counts each communicator's collectives of one function (AllReduce, Broadcast, ...)
// apart. NCCL starts a plan's group, collective and send/receive events after its kernel's launch,
// on the launching thread (or, for a plan with proxy work on a busy or captured stream, on CUDA's
// host-callback thread), and stops them right after, not waiting for the kernel; startEvent's
// result is ignored.
// The activation mask is one int of the process: each communicator's init rewrites it.
//
// A plugin the user had named (GPROF_NCCL_CHAIN_PLUGIN), or else the libnccl-profiler.so NCCL
// loads unasked, is loaded as NCCL would load it (OpenChained) and called for every event it
// asked for, with its own handles in place of ours (parentObj, parentGroup). It must export the
// version NCCL asked of us (or v5 for v6); else it is not called, and the communicator's record
// says so.
//
// Nothing on the event path allocates, locks or prints: handles and contexts come from fixed
// pools, claimed with one atomic exchange; a full pool loses the event (counted nowhere else).
#include <dlfcn.h>
#include <pthread.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "inject/process_limits.h"
#include "inject/recorder.h"

namespace gprof::inject {
namespace {

using format::NcclEventKind;
using format::NcclEventRecord;

constexpr char kChainEnv[] = "GPROF_NCCL_CHAIN_PLUGIN";

// NCCL's values (profiler.h): event types, and success.
constexpr uint64_t kProfileColl = 1u << 1;
constexpr uint64_t kProfileP2p = 1u << 2;
constexpr int kNcclSuccess = 0;

using Logger = void (*)(int, unsigned long, const char*, int, const char*, ...);

// The descriptor's head, alike in every version but for the type's width.
struct Head8 {
  uint8_t type;
  void* parent;
  int rank;
};
struct Head64 {
  uint64_t type;
  void* parent;
  int rank;
};
constexpr size_t kUnionAt = 24;
static_assert(sizeof(Head8) == kUnionAt && sizeof(Head64) == kUnionAt);

// The union's members read here, per version.
struct CollV2 {  // v2; v3 drops trafficBytes (after datatype: nothing read moves)
  const char* name;
  uint64_t comm_hash;
  uint64_t seq_number;
  const char* func;
  const void* send_buff;
  void* recv_buff;
  size_t count;
  int root;
  const char* datatype;
};
struct P2pV2 {  // v2, v3
  const char* name;
  uint64_t comm_hash;
  const char* func;
  void* buff;
  const char* datatype;
  size_t count;
  int peer;
};
struct CollV4 {  // v4; v5 and v6 add fields after these, parentGroup at kParentGroupColl
  uint64_t seq_number;
  const char* func;
  const void* send_buff;
  void* recv_buff;
  size_t count;
  int root;
  const char* datatype;
};
struct P2pV4 {  // v4; v5 and v6 add parentGroup at kParentGroupP2p
  const char* func;
  void* buff;
  const char* datatype;
  size_t count;
  int peer;
};
static_assert(offsetof(CollV2, datatype) == 64 && offsetof(P2pV2, peer) == 48);
static_assert(offsetof(CollV4, datatype) == 48 && offsetof(P2pV4, peer) == 32);
constexpr size_t kParentGroupColl = 80;  // v5, v6: after nChannels, nWarps, algo, proto
constexpr size_t kParentGroupP2p = 40;   // v5, v6: after peer and nChannels (uint8_t)

// The function tables of each version: the plugin's name, its init (which differs by version),
// then the same four calls in every version.
struct TableCalls {
  int (*start)(void* context, void** handle, void* descr);
  int (*stop)(void* handle);
  int (*record_state)(void* handle, int state, void* args);
  int (*finalize)(void* context);
};
struct TableV1V2V3 {
  const char* name;
  int (*init)(void** context, int* mask);
  TableCalls calls;
};
struct TableV4 {
  const char* name;
  int (*init)(void** context, int* mask, const char* comm_name, uint64_t comm_hash, int n_nodes,
              int n_ranks, int rank, Logger logger);
  TableCalls calls;
};
struct TableV5 {
  const char* name;
  int (*init)(void** context, uint64_t comm_id, int* mask, const char* comm_name, int n_nodes,
              int n_ranks, int rank, Logger logger);
  TableCalls calls;
};
static_assert(offsetof(TableV1V2V3, calls) == 16 && offsetof(TableV4, calls) == 16 &&
              offsetof(TableV5, calls) == 16 && sizeof(TableV5) == 48);

// One communicator's context.
struct Comm {
  std::atomic<uint32_t> busy{0};
  int version = 0;
  uint64_t comm_hash = 0;
  bool has_comm_hash = false;
  int rank = -1;
  int n_ranks = 0;
  int our_mask = 0;
  int their_mask = 0;
  void* theirs = nullptr;  // the chained plugin's context
};

// One event's handle.
struct Event {
  std::atomic<uint32_t> busy{0};
  Comm* comm = nullptr;
  void* theirs = nullptr;  // the chained plugin's handle
  bool recorded = false;
  NcclEventRecord record{};
  const char* func = nullptr;
  const char* datatype = nullptr;
};

constexpr uint32_t kComms = 256;
constexpr uint32_t kEvents = 8192;  // in flight at once; NCCL's own pools are of this order

struct Plugin {
  pthread_mutex_t chain_lock = PTHREAD_MUTEX_INITIALIZER;
  bool chain_tried = false;  // under chain_lock
  void* chain_library = nullptr;
  int chain_version = 0;
  const void* chain_table = nullptr;  // TableV1V2V3, TableV4 or TableV5 by chain_version
  char chain_name[128] = {};
  bool chain_failed = false;
  std::atomic<uint32_t> next_comm{0};
  std::atomic<uint32_t> next_event{0};
  Comm comms[kComms];
  Event events[kEvents];
};
constinit Plugin g_plugin;

__thread uint32_t t_tid __attribute__((tls_model("initial-exec")));
uint32_t ThreadId() {
  if (t_tid == 0) t_tid = static_cast<uint32_t>(syscall(SYS_gettid));
  return t_tid;
}

template <typename Item, uint32_t kCount>
Item* Claim(Item (&pool)[kCount], std::atomic<uint32_t>& cursor) {
  for (uint32_t tries = 0; tries < 64; ++tries) {
    Item& item = pool[cursor.fetch_add(1, std::memory_order_relaxed) % kCount];
    if (item.busy.exchange(1, std::memory_order_acquire) == 0) return &item;
  }
  return nullptr;
}

Event* OurEvent(void* handle) {
  auto* event = static_cast<Event*>(handle);
  const Event* first = &g_plugin.events[0];
  if (event < first || event >= first + kEvents) return nullptr;
  return event;
}

// The chained plugin's handle in place of ours (a parent NCCL hands back), restored afterwards.
class TheirParents {
 public:
  TheirParents(void* descr, int version, uint64_t type) : descr_(static_cast<char*>(descr)) {
    Swap(offsetof(Head8, parent));
    if (version >= 5 && (type == kProfileColl || type == kProfileP2p))
      Swap(kUnionAt + (type == kProfileColl ? kParentGroupColl : kParentGroupP2p));
  }
  ~TheirParents() {
    for (int i = 0; i < swapped_; ++i) memcpy(descr_ + at_[i], &ours_[i], sizeof(void*));
  }

 private:
  void Swap(size_t at) {
    void* ours;
    memcpy(&ours, descr_ + at, sizeof(ours));
    Event* event = OurEvent(ours);
    if (event == nullptr) return;  // not ours: another process's (PXN) or none
    at_[swapped_] = at;
    ours_[swapped_++] = ours;
    memcpy(descr_ + at, &event->theirs, sizeof(void*));
  }
  char* descr_;
  size_t at_[2] = {};
  void* ours_[2] = {};
  int swapped_ = 0;
};

// The user's plugin as NCCL 2.27 and later open theirs: the value as given, then, for a value
// that is no path and not a library's file name (lib...so), libnccl-profiler-VALUE.so; without
// a value, libnccl-profiler.so, which NCCL loads by default (a plugin on the library path).
void* OpenChained(const char* value) {
  if (value == nullptr) return dlopen("libnccl-profiler.so", RTLD_NOW | RTLD_LOCAL);
  void* library = dlopen(value, RTLD_NOW | RTLD_LOCAL);
  if (library != nullptr) return library;
  size_t length = strlen(value);
  bool library_name =
      strncmp(value, "lib", 3) == 0 && length >= 3 && strcmp(value + length - 3, ".so") == 0;
  if (strchr(value, '/') != nullptr || library_name) return nullptr;
  char name[256];
  if (snprintf(name, sizeof(name), "libnccl-profiler-%s.so", value) >=
      static_cast<int>(sizeof(name)))
    return nullptr;
  return dlopen(name, RTLD_NOW | RTLD_LOCAL);
}

// Loads the user's plugin once, for the version NCCL asked of us.
void LoadChained(int version) {
  pthread_mutex_lock(&g_plugin.chain_lock);
  if (!g_plugin.chain_tried) {
    g_plugin.chain_tried = true;
    const char* value = getenv(kChainEnv);
    if (value != nullptr && value[0] == '\0') value = nullptr;
    if (value != nullptr && SecureExecution()) {
      // A plugin named in the environment of a setuid program is not loaded (nor the default in
      // its place): said, as a chain that failed.
      snprintf(g_plugin.chain_name, sizeof(g_plugin.chain_name), "%s",
               "(the plugin named; not loaded into a setuid program)");
    } else {
      g_plugin.chain_library = OpenChained(value);
      if (value != nullptr)
        snprintf(g_plugin.chain_name, sizeof(g_plugin.chain_name), "%s", value);
      else if (g_plugin.chain_library != nullptr)
        snprintf(g_plugin.chain_name, sizeof(g_plugin.chain_name), "libnccl-profiler.so");
    }
    for (int asked = version; g_plugin.chain_library != nullptr && asked >= version - 1; --asked) {
      if (asked < version && version != 6) break;  // only v5 stands in, for v6
      char symbol[32];
      snprintf(symbol, sizeof(symbol), "ncclProfiler_v%d", asked);
      if (const void* table = dlsym(g_plugin.chain_library, symbol)) {
        g_plugin.chain_table = table;
        g_plugin.chain_version = asked;
        break;
      }
    }
    // This very library, under another name (a link called libnccl-profiler.so), would call
    // itself for every event.
    Dl_info ours{}, theirs{};
    if (g_plugin.chain_table != nullptr &&
        dladdr(reinterpret_cast<const void*>(&LoadChained), &ours) != 0 &&
        dladdr(g_plugin.chain_table, &theirs) != 0 && ours.dli_fbase == theirs.dli_fbase)
      g_plugin.chain_table = nullptr;
    // A table without its init cannot be used. (Every version's init follows the name.)
    void* init = nullptr;
    if (g_plugin.chain_table != nullptr)
      memcpy(&init, static_cast<const char*>(g_plugin.chain_table) + sizeof(const char*),
             sizeof(init));
    if (init == nullptr) g_plugin.chain_table = nullptr;
    g_plugin.chain_failed = g_plugin.chain_name[0] != '\0' && g_plugin.chain_table == nullptr;
  }
  pthread_mutex_unlock(&g_plugin.chain_lock);
}

template <typename Table>
const Table* Chained() {
  return static_cast<const Table*>(g_plugin.chain_table);
}

// The chained plugin's calls, for a communicator of interface `version`.
const TableCalls& TheirCalls(int version) {
  if (version >= 5) return Chained<TableV5>()->calls;
  if (version == 4) return Chained<TableV4>()->calls;
  return Chained<TableV1V2V3>()->calls;
}

void RecordCommInit(const Comm& comm, const char* comm_name) {
  NcclEventRecord record{};
  record.start_ns = record.stop_ns = MonotonicNs();
  record.kind = static_cast<uint16_t>(NcclEventKind::kCommInit);
  record.comm_hash = comm.comm_hash;
  record.rank = comm.rank;
  record.n_ranks = comm.n_ranks;
  record.peer = -1;
  record.version = static_cast<uint16_t>(comm.version);
  record.tid = ThreadId();
  if (comm.has_comm_hash) record.flags |= format::kNcclHasCommHash;
  if (g_plugin.chain_table != nullptr) record.flags |= format::kNcclChained;
  if (g_plugin.chain_failed) record.flags |= format::kNcclChainFailed;
  SubmitNcclEvent(record, g_plugin.chain_name[0] != '\0' ? g_plugin.chain_name : nullptr,
                  comm_name);
}

// init, whatever the version: `call_theirs` initialises the chained plugin's context.
template <typename CallTheirs>
int Init(void** context, int* mask, int version, uint64_t comm_hash, bool has_comm_hash,
         int n_ranks, int rank, const char* comm_name, CallTheirs&& call_theirs) {
  *context = nullptr;
  // Starts recording in this process, if it records (nothing else may have yet).
  const bool recording = !SecureExecution() && RecordingActive();
  LoadChained(version);
  Comm* comm = Claim(g_plugin.comms, g_plugin.next_comm);
  // No context left: nothing of this communicator is recorded or chained. The mask is left as
  // it was: it is the whole process's, and the other communicators' events still want it.
  if (comm == nullptr) return kNcclSuccess;
  comm->version = version;
  comm->comm_hash = comm_hash;
  comm->has_comm_hash = has_comm_hash;
  comm->n_ranks = n_ranks;
  comm->rank = rank;
  comm->our_mask = recording && version >= 2 ? static_cast<int>(kProfileColl | kProfileP2p) : 0;
  comm->their_mask = 0;
  comm->theirs = nullptr;
  // Their mask lives as long as the context: a plugin may keep the pointer (NCCL's example does)
  // and change it later, which then changes only which events they are forwarded.
  if (g_plugin.chain_table != nullptr &&
      call_theirs(&comm->theirs, &comm->their_mask) != kNcclSuccess) {
    comm->theirs = nullptr;
  }
  if (comm->theirs == nullptr) comm->their_mask = 0;
  *mask = comm->our_mask | comm->their_mask;
  *context = comm;
  RecordCommInit(*comm, comm_name);
  return kNcclSuccess;
}

// What a descriptor's union tells of a collective (CollV2, CollV4: with a sequence number and a
// root) or a send/receive (P2pV2, P2pV4: a peer); a v2/v3 one also its communicator's hash.
template <typename Body>
void Take(const char* body, Event& event) {
  Body fields;
  memcpy(&fields, body, sizeof(fields));
  NcclEventRecord& record = event.record;
  record.count = fields.count;
  event.func = fields.func;
  event.datatype = fields.datatype;
  if constexpr (requires { fields.seq_number; }) {
    record.seq_number = fields.seq_number;
    record.flags |= format::kNcclHasSeqNumber;
    record.peer = fields.root;
  } else {
    record.peer = fields.peer;
  }
  if constexpr (requires { fields.comm_hash; }) {
    if (fields.comm_hash != 0) {  // a native v2/v3 NCCL's; 0 where a newer one adapts
      record.comm_hash = fields.comm_hash;
      record.flags |= format::kNcclHasCommHash;
    }
  }
}

// Fills `event`'s record from a collective's or send/receive's descriptor.
void Describe(Event& event, const Comm& comm, const void* descr, uint64_t type) {
  NcclEventRecord& record = event.record;
  const char* body = static_cast<const char*>(descr) + kUnionAt;
  int rank;
  memcpy(&rank, static_cast<const char*>(descr) + offsetof(Head8, rank), sizeof(rank));
  record = {};
  record.start_ns = MonotonicNs();
  record.tid = ThreadId();
  record.rank = comm.rank >= 0 ? comm.rank : rank;
  record.n_ranks = comm.n_ranks;
  record.version = static_cast<uint16_t>(comm.version);
  record.comm_hash = comm.comm_hash;
  if (comm.has_comm_hash) record.flags |= format::kNcclHasCommHash;
  record.kind = static_cast<uint16_t>(type == kProfileColl ? NcclEventKind::kCollective
                                                           : NcclEventKind::kP2p);
  if (type == kProfileColl) {
    comm.version <= 3 ? Take<CollV2>(body, event) : Take<CollV4>(body, event);
  } else {
    comm.version <= 3 ? Take<P2pV2>(body, event) : Take<P2pV4>(body, event);
  }
}

int StartEvent(void* context, void** handle, void* descr) {
  *handle = nullptr;
  auto* comm = static_cast<Comm*>(context);
  if (comm == nullptr || descr == nullptr) return kNcclSuccess;
  uint64_t type;
  if (comm->version >= 5) {
    memcpy(&type, descr, sizeof(type));
  } else {
    uint8_t narrow;
    memcpy(&narrow, descr, sizeof(narrow));
    type = narrow;
  }
  const bool ours = (comm->our_mask & type) != 0;
  const bool theirs = (comm->their_mask & type) != 0;
  if (!ours && !theirs) return kNcclSuccess;
  Event* event = Claim(g_plugin.events, g_plugin.next_event);
  if (event == nullptr) return kNcclSuccess;  // pool exhausted: this event is lost to both
  event->comm = comm;
  event->theirs = nullptr;
  event->recorded = ours;
  if (ours) Describe(*event, *comm, descr, type);
  if (theirs) {
    TheirParents swap(descr, comm->version, type);
    const auto start = TheirCalls(comm->version).start;
    if (start == nullptr || start(comm->theirs, &event->theirs, descr) != kNcclSuccess)
      event->theirs = nullptr;
  }
  *handle = event;
  return kNcclSuccess;
}

int StopEvent(void* handle) {
  Event* event = OurEvent(handle);
  if (event == nullptr) return kNcclSuccess;
  if (event->theirs != nullptr) {
    const auto stop = TheirCalls(event->comm->version).stop;
    if (stop != nullptr) stop(event->theirs);
  }
  if (event->recorded) {
    event->record.stop_ns = MonotonicNs();
    SubmitNcclEvent(event->record, event->func, event->datatype);
  }
  event->busy.store(0, std::memory_order_release);
  return kNcclSuccess;
}

int RecordEventState(void* handle, int state, void* args) {
  Event* event = OurEvent(handle);
  if (event == nullptr || event->theirs == nullptr) return kNcclSuccess;
  const auto record_state = TheirCalls(event->comm->version).record_state;
  return record_state != nullptr ? record_state(event->theirs, state, args) : kNcclSuccess;
}

int Finalize(void* context) {
  auto* comm = static_cast<Comm*>(context);
  if (comm == nullptr) return kNcclSuccess;
  if (comm->theirs != nullptr) {
    const auto finalize = TheirCalls(comm->version).finalize;
    if (finalize != nullptr) finalize(comm->theirs);
  }
  comm->theirs = nullptr;
  comm->busy.store(0, std::memory_order_release);
  return kNcclSuccess;
}

template <int kVersion>
int InitV1V2V3(void** context, int* mask) {
  return Init(context, mask, kVersion, 0, false, 0, -1, nullptr,
              [&](void** theirs, int* their_mask) {
                return Chained<TableV1V2V3>()->init(theirs, their_mask);
              });
}

int InitV4(void** context, int* mask, const char* comm_name, uint64_t comm_hash, int n_nodes,
           int n_ranks, int rank, Logger logger) {
  return Init(context, mask, 4, comm_hash, true, n_ranks, rank, comm_name,
              [&](void** theirs, int* their_mask) {
                return Chained<TableV4>()->init(theirs, their_mask, comm_name, comm_hash, n_nodes,
                                                n_ranks, rank, logger);
              });
}

template <int kVersion>
int InitV5(void** context, uint64_t comm_id, int* mask, const char* comm_name, int n_nodes,
           int n_ranks, int rank, Logger logger) {
  return Init(context, mask, kVersion, comm_id, true, n_ranks, rank, comm_name,
              [&](void** theirs, int* their_mask) {
                return Chained<TableV5>()->init(theirs, comm_id, their_mask, comm_name, n_nodes,
                                                n_ranks, rank, logger);
              });
}

}  // namespace
}  // namespace gprof::inject

using namespace gprof::inject;

#define GPROF_NCCL_EXPORT extern "C" __attribute__((visibility("default")))
GPROF_NCCL_EXPORT const TableV1V2V3 ncclProfiler_v1 = {"gprof-run", InitV1V2V3<1>,    StartEvent,
                                                       StopEvent,   RecordEventState, Finalize};
GPROF_NCCL_EXPORT const TableV1V2V3 ncclProfiler_v2 = {"gprof-run", InitV1V2V3<2>,    StartEvent,
                                                       StopEvent,   RecordEventState, Finalize};
GPROF_NCCL_EXPORT const TableV1V2V3 ncclProfiler_v3 = {"gprof-run", InitV1V2V3<3>,    StartEvent,
                                                       StopEvent,   RecordEventState, Finalize};
GPROF_NCCL_EXPORT const TableV4 ncclProfiler_v4 = {"gprof-run", InitV4,           StartEvent,
                                                   StopEvent,   RecordEventState, Finalize};
GPROF_NCCL_EXPORT const TableV5 ncclProfiler_v5 = {"gprof-run", InitV5<5>,        StartEvent,
                                                   StopEvent,   RecordEventState, Finalize};
GPROF_NCCL_EXPORT const TableV5 ncclProfiler_v6 = {"gprof-run", InitV5<6>,        StartEvent,
                                                   StopEvent,   RecordEventState, Finalize};
