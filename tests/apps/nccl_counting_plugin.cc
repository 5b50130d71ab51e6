// A user's own NCCL profiler plugin (tests/nccl_test.cc, tests/nccl_abi_test.cc): exports
// ncclProfiler_v4 and _v5, asks for group, collective and send/receive events, and counts what it
// is given. At each communicator's finalize it appends one fact line to $NCCL_COUNT_OUT.RANK:
//   counts rank=R inits=.. groups=.. colls=.. p2ps=.. stops=.. parents_ok=.. p2p_parents_ok=..
//          finalizes=..
// parents_ok (p2p_parents_ok) counts collectives (sends and receives) whose parent (parentObj in
// v4; coll.parentGroup, p2p.parentGroup in v5) was the handle this plugin gave their group: a
// plugin in between must hand back the user's own handles.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

constexpr uint64_t kGroup = 1 << 0;
constexpr uint64_t kColl = 1 << 1;
constexpr uint64_t kP2p = 1 << 2;
// Where v5 puts the group in each descriptor: the union at 24, then coll's or p2p's members.
constexpr size_t kCollParentGroupV5 = 24 + 80;
constexpr size_t kP2pParentGroupV5 = 24 + 40;

struct Counts {
  int rank = -1;
  int version = 0;
  int inits = 0, groups = 0, colls = 0, p2ps = 0, stops = 0, parents_ok = 0, p2p_parents_ok = 0;
  int finalizes = 0;
  int handles[64] = {};
};
Counts g_counts;

void* Handle(int n) { return &g_counts.handles[n % 64]; }

int Init(void** context, int* mask, int rank, int version) {
  *context = &g_counts;
  *mask = static_cast<int>(kGroup | kColl | kP2p);
  g_counts.rank = rank;
  g_counts.version = version;
  ++g_counts.inits;
  return 0;
}

int InitV4(void** context, int* mask, const char*, uint64_t, int, int, int rank, void*) {
  return Init(context, mask, rank, 4);
}
int InitV5(void** context, uint64_t, int* mask, const char*, int, int, int rank, void*) {
  return Init(context, mask, rank, 5);
}

void* g_last_group = nullptr;

int Start(void*, void** handle, void* descr) {
  uint64_t type = 0;
  memcpy(&type, descr, g_counts.version >= 5 ? 8 : 1);
  void* parent;
  if (type == kGroup) {
    *handle = Handle(g_counts.groups++);
    g_last_group = *handle;
    return 0;
  }
  if (type != kColl && type != kP2p) {
    *handle = nullptr;
    return 0;
  }
  // v4: the group is parentObj (offset 8); v5: coll.parentGroup or p2p.parentGroup.
  const size_t at = g_counts.version < 5 ? 8
                    : type == kColl      ? kCollParentGroupV5
                                         : kP2pParentGroupV5;
  memcpy(&parent, static_cast<char*>(descr) + at, sizeof(parent));
  if (type == kColl) {
    if (parent == g_last_group) ++g_counts.parents_ok;
    *handle = Handle(g_counts.colls++);
  } else {
    if (parent == g_last_group) ++g_counts.p2p_parents_ok;
    *handle = Handle(32 + g_counts.p2ps++);
  }
  return 0;
}

int Stop(void* handle) {
  if (handle != nullptr) ++g_counts.stops;
  return 0;
}
int RecordState(void*, int, void*) { return 0; }
int Finalize(void*) {
  ++g_counts.finalizes;
  const char* out = getenv("NCCL_COUNT_OUT");
  if (out == nullptr) return 0;
  char path[512];
  snprintf(path, sizeof(path), "%s.%d", out, g_counts.rank);
  if (FILE* file = fopen(path, "a")) {
    fprintf(file,
            "counts rank=%d inits=%d groups=%d colls=%d p2ps=%d stops=%d parents_ok=%d "
            "p2p_parents_ok=%d finalizes=%d\n",
            g_counts.rank, g_counts.inits, g_counts.groups, g_counts.colls, g_counts.p2ps,
            g_counts.stops, g_counts.parents_ok, g_counts.p2p_parents_ok, g_counts.finalizes);
    fclose(file);
  }
  return 0;
}

struct TableV4 {
  const char* name;
  int (*init)(void**, int*, const char*, uint64_t, int, int, int, void*);
  int (*start)(void*, void**, void*);
  int (*stop)(void*);
  int (*record_state)(void*, int, void*);
  int (*finalize)(void*);
};
struct TableV5 {
  const char* name;
  int (*init)(void**, uint64_t, int*, const char*, int, int, int, void*);
  int (*start)(void*, void**, void*);
  int (*stop)(void*);
  int (*record_state)(void*, int, void*);
  int (*finalize)(void*);
};

}  // namespace

extern "C" {
__attribute__((visibility("default")))
TableV4 ncclProfiler_v4 = {"counting", InitV4, Start, Stop, RecordState, Finalize};
__attribute__((visibility("default")))
TableV5 ncclProfiler_v5 = {"counting", InitV5, Start, Stop, RecordState, Finalize};
}
