// Storage for the vectors that grow with the session (millions of records): reserved once and
// backed by 2 MiB pages where the kernel allows it (transparent huge pages in "madvise" mode),
// which takes one page fault per 2 MiB filled instead of one per 4 KiB. Only advice: the vector
// works the same where the kernel ignores it.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gprof::collector {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// Advises the whole 2 MiB pages inside [data, data + bytes).
inline void AdviseHugePages(const void* data, size_t bytes) {
  if (bytes < 2 * kHugePageBytes) return;  // too small to hold a whole aligned huge page for sure
  auto start = reinterpret_cast<uintptr_t>(data);
  uintptr_t first = (start + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  uintptr_t last = (start + bytes) & ~(kHugePageBytes - 1);
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
}

// `records.reserve(capacity)`, its storage advised as above when it is new. Capacities come from
// counts a file announces: one past half the machine's memory is not reserved (a damaged or
// crafted file could announce any number), and the vector grows as its records come.
template <typename T>
void ReserveLarge(std::vector<T>& records, size_t capacity) {
  if (capacity <= records.capacity()) return;
  const uint64_t memory =
      static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (capacity > memory / 2 / sizeof(T)) return;
  records.reserve(capacity);
  AdviseHugePages(records.data(), records.capacity() * sizeof(T));
}

}  // namespace gprof::collector
