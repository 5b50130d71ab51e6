// Storage for the vectors that grow with the session (millions of records), and the bound on the
// collector's memory. Up to a memory budget a vector's block is memory, backed by 2 MiB pages
// where the kernel allows it (transparent huge pages in "madvise" mode: one page fault per 2 MiB
// filled instead of one per 4 KiB). Past the budget, each new block is a file in the spill
// directory mapped shared: its pages are page cache, which the kernel writes out and drops when it
// needs the room and reads back when they are touched. The collector's own memory then stops at
// the budget however long the session, and a session larger than the machine's memory is still
// collected, at the disk's speed once memory runs short. Its phases walk the records in time
// order, so the pages they need at once are few.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <string>
#include <vector>

namespace gprof::collector {

struct RecordStorageStats {
  uint64_t memory_budget_bytes = 0;
  uint64_t in_memory_bytes = 0;  // blocks in memory now
  uint64_t peak_in_memory_bytes = 0;
  uint64_t spilled_bytes = 0;  // blocks in spill files now
  uint64_t peak_spilled_bytes = 0;
  uint64_t spill_files = 0;  // made since Configure
  uint64_t trims = 0;        // times the spill files' pages were unmapped to keep RSS in budget
  std::string spill_error;   // the first spill that failed (its block went to memory), or empty
};

// Process-wide, like the heap it stands beside. Once records are spilled, a thread of its own
// keeps the spill files' resident pages within the budget (record_storage.cc).
class RecordStorage {
 public:
  // Blocks smaller than this are the heap's: they are not what grows with the session.
  static constexpr size_t kLargeBlockBytes = size_t{1} << 20;

  // Blocks of `memory_budget_bytes` and below in all are memory; past it they go to files in
  // `spill_directory` (none when it is empty: all memory, as when a spill fails). Counts restart.
  // Configure("", 0) stops the trimmer thread; the collector does so when it is done. The
  // directory is opened here, once (or `spill_directory_fd` is duplicated): every spill file is
  // made relative to that descriptor.
  static void Configure(const std::string& spill_directory, uint64_t memory_budget_bytes,
                        int spill_directory_fd = -1);
  static RecordStorageStats Stats();

  static void* Allocate(size_t bytes);  // throws std::bad_alloc when there is no memory at all
  static void Release(void* data, size_t bytes);
};

// Half of the memory this process may use: what the machine has available, or its memory
// cgroup's limit when that is lower (a container's).
uint64_t DefaultMemoryBudget();

// The lowest memory limit over the cgroups a /proc/PID/cgroup file names and their ancestors, in
// the hierarchies under `cgroup_root` ("/sys/fs/cgroup": v2 there or in "unified", v1's memory
// controller in "memory"); UINT64_MAX when none is set or none can be read.
uint64_t CgroupMemoryLimit(const std::string& proc_cgroup_path, const std::string& cgroup_root);

template <typename T>
struct RecordAllocator {
  using value_type = T;
  RecordAllocator() = default;
  template <typename U>
  RecordAllocator(const RecordAllocator<U>&) {}  // NOLINT: rebinding, as std::allocator does
  T* allocate(size_t count) {
    if (count > SIZE_MAX / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(RecordStorage::Allocate(count * sizeof(T)));
  }
  void deallocate(T* data, size_t count) { RecordStorage::Release(data, count * sizeof(T)); }
  template <typename U>
  bool operator==(const RecordAllocator<U>&) const {
    return true;
  }
};

template <typename T>
using RecordVector = std::vector<T, RecordAllocator<T>>;

size_t PhysicalMemoryBytes();

// `records.reserve(capacity)`. Capacities come from counts a file announces: one past half the
// machine's memory is not reserved (a damaged or crafted file could announce any number), and the
// vector grows as its records come.
template <typename T>
void ReserveLarge(RecordVector<T>& records, size_t capacity) {
  if (capacity <= records.capacity()) return;
  if (capacity > PhysicalMemoryBytes() / 2 / sizeof(T)) return;
  records.reserve(capacity);
}

}  // namespace gprof::collector
