#include "collector/model/record_storage.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <mutex>
#include <thread>
#include <utility>

#include "inject/shared/disk_room.h"
#include "inject/shared/status.h"

namespace gprof::collector {
namespace {

constexpr size_t kHugePageBytes = size_t{2} << 20;

constexpr auto kTrimPeriod = std::chrono::milliseconds(10);

struct StorageState {
  std::mutex mutex;             // the collector's thread and the trimmer's
  std::string spill_directory;  // as shown
  int spill_fd = -1;            // the directory; -1: nowhere to spill
  RecordStorageStats stats;
  std::vector<std::pair<void*, size_t>> spilled_blocks;  // few: one per large vector's block
  std::thread trimmer;
  std::condition_variable stop_trimming;
  bool trimming = false;
};

// Never destroyed: a trimmer thread still running at exit must not be destroyed joinable.
StorageState& State() {
  static StorageState* state = new StorageState;
  return *state;
}

// Advises the whole 2 MiB pages inside [data, data + bytes).
void AdviseHugePages(void* data, size_t bytes) {
  auto start = reinterpret_cast<uintptr_t>(data);
  uintptr_t first = (start + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  uintptr_t last = (start + bytes) & ~(kHugePageBytes - 1);
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
}

// A new file in the directory `dir_fd` that nothing names: it is gone when its mapping is.
int OpenSpillFile(int dir_fd) {
  int fd = openat(dir_fd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)) return fd;
  // A file system without O_TMPFILE: a new name, unlinked at once.
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string name = ".gprof-spill-" + std::to_string(getpid()) + "-" +
                       std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
    fd = openat(dir_fd, name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) unlinkat(dir_fd, name.c_str(), 0);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;
}

// `bytes` of a spill file, mapped, or why the directory cannot hold them. The file's blocks are
// allocated first: a page of a sparse file that finds the disk full when first written would kill
// the collector with SIGBUS.
Expected<void*> MapSpillFile(int dir_fd, const std::string& directory, size_t bytes) {
  int fd = OpenSpillFile(dir_fd);
  if (fd < 0) {
    return Status::FromErrno(errno,
                             "cannot make a file in " + directory + ": " + std::strerror(errno));
  }
  void* data = MAP_FAILED;
  Status failed;
  // Never into the room the disk margin keeps (disk_room.h): the records stay in memory instead.
  if (DiskRoom room = DiskRoomOf(fd); !room.Allows(bytes, RoomUse::kClosing)) {
    failed =
        Status::Error(StatusCode::kIo, "no room for " + std::to_string(bytes >> 20) + " MiB in " +
                                           directory + " above the disk margin (gprof-run leaves " +
                                           std::to_string(room.Floor(RoomUse::kClosing) >> 20) +
                                           " MiB of it free)");
  } else if (fallocate(fd, 0, 0, static_cast<off_t>(bytes)) != 0) {
    failed = Status::FromErrno(errno, "cannot allocate " + std::to_string(bytes >> 20) +
                                          " MiB in " + directory + ": " + std::strerror(errno));
  } else {
    data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (data == MAP_FAILED)
      failed = Status::FromErrno(errno,
                                 "cannot map a file of " + directory + ": " + std::strerror(errno));
  }
  close(fd);  // the mapping keeps the file
  if (!failed.ok()) return failed;
  return data;
}

// The lowest memory limit of the cgroup `path` (as /proc/self/cgroup names it) and its ancestors
// in the hierarchy mounted at `root`, in `file`; UINT64_MAX when none is set or readable.
uint64_t CgroupLimit(const std::string& root, std::string path, const char* file) {
  uint64_t lowest = UINT64_MAX;
  while (true) {
    std::ifstream in(root + path + (path.ends_with('/') ? "" : "/") + file);
    uint64_t limit = 0;
    if (in >> limit) lowest = std::min(lowest, limit);  // "max" (no limit) does not read
    if (path.empty() || path == "/") return lowest;
    path.resize(path.rfind('/'));
  }
}

// Resident pages of files mapped by this process (statm's "shared"): the spill files', and a few
// MiB of the program's own code.
uint64_t ResidentFileBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0, resident = 0, shared = 0;
  if (!(statm >> size >> resident >> shared)) return 0;
  return shared * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

// The kernel keeps the pages of a spill file mapped into the collector once touched, and counts
// them in its RSS, though it can drop them any time: a collector whose RSS grew with the session
// would look unbounded (in top, to GNU time, to a container's monitor) and its page tables would
// grow too. Past the budget, the trimmer unmaps them (MADV_DONTNEED; a shared mapping's data stays
// in the file and its page cache) and the next touch maps them again, from the cache while memory
// allows. Every kTrimPeriod, beside the collector's thread, from the first spill on.
void TrimSpillMappings(StorageState* state) {
  std::unique_lock lock(state->mutex);
  while (state->trimming) {
    state->stop_trimming.wait_for(lock, kTrimPeriod);
    if (!state->trimming || ResidentFileBytes() <= state->stats.memory_budget_bytes) continue;
    for (const auto& [data, bytes] : state->spilled_blocks) madvise(data, bytes, MADV_DONTNEED);
    ++state->stats.trims;
  }
}

void StopTrimmer(StorageState* state, std::unique_lock<std::mutex>* lock) {
  if (!state->trimmer.joinable()) return;
  state->trimming = false;
  state->stop_trimming.notify_all();
  lock->unlock();
  state->trimmer.join();
  lock->lock();
}

}  // namespace

void RecordStorage::Configure(const std::string& spill_directory, uint64_t memory_budget_bytes,
                              int spill_directory_fd) {
  StorageState& state = State();
  std::unique_lock lock(state.mutex);
  StopTrimmer(&state, &lock);
  state.spill_directory = spill_directory;
  if (state.spill_fd >= 0) close(state.spill_fd);
  state.spill_fd = -1;
  if (spill_directory_fd >= 0) {
    state.spill_fd = fcntl(spill_directory_fd, F_DUPFD_CLOEXEC, 0);
  } else if (!spill_directory.empty()) {
    state.spill_fd = open(spill_directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  }
  const RecordStorageStats now = state.stats;
  state.stats = {};
  state.stats.memory_budget_bytes = memory_budget_bytes;
  state.stats.in_memory_bytes = state.stats.peak_in_memory_bytes = now.in_memory_bytes;
  state.stats.spilled_bytes = state.stats.peak_spilled_bytes = now.spilled_bytes;
}

RecordStorageStats RecordStorage::Stats() {
  StorageState& state = State();
  std::lock_guard lock(state.mutex);
  return state.stats;
}

void* RecordStorage::Allocate(size_t bytes) {
  if (bytes < kLargeBlockBytes) return ::operator new(bytes);
  StorageState& state = State();
  std::lock_guard lock(state.mutex);
  RecordStorageStats& stats = state.stats;
  if (!state.spill_directory.empty() && stats.in_memory_bytes + bytes > stats.memory_budget_bytes) {
    Expected<void*> mapped = MapSpillFile(state.spill_fd, state.spill_directory, bytes);
    if (mapped.ok()) {
      void* data = *mapped;
      state.spilled_blocks.emplace_back(data, bytes);
      if (!state.trimmer.joinable()) {  // the first spill: no thread while nothing is spilled
        state.trimming = true;
        state.trimmer = std::thread(TrimSpillMappings, &state);
      }
      stats.spilled_bytes += bytes;
      stats.peak_spilled_bytes = std::max(stats.peak_spilled_bytes, stats.spilled_bytes);
      ++stats.spill_files;
      return data;
    }
    if (stats.spill_error.empty()) stats.spill_error = mapped.status().message();
  }
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED) throw std::bad_alloc();
  AdviseHugePages(data, bytes);
  stats.in_memory_bytes += bytes;
  stats.peak_in_memory_bytes = std::max(stats.peak_in_memory_bytes, stats.in_memory_bytes);
  return data;
}

void RecordStorage::Release(void* data, size_t bytes) {
  if (bytes < kLargeBlockBytes) return ::operator delete(data);
  StorageState& state = State();
  // Under the lock: the trimmer must not advise a range that a new mapping may take.
  std::lock_guard lock(state.mutex);
  munmap(data, bytes);
  auto spilled = std::find(state.spilled_blocks.begin(), state.spilled_blocks.end(),
                           std::make_pair(data, bytes));
  if (spilled == state.spilled_blocks.end()) {
    state.stats.in_memory_bytes -= std::min<uint64_t>(bytes, state.stats.in_memory_bytes);
    return;
  }
  state.spilled_blocks.erase(spilled);
  state.stats.spilled_bytes -= std::min<uint64_t>(bytes, state.stats.spilled_bytes);
}

size_t PhysicalMemoryBytes() {
  return static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

uint64_t CgroupMemoryLimit(const std::string& proc_cgroup_path, const std::string& cgroup_root) {
  uint64_t limit = UINT64_MAX;
  std::ifstream cgroups(proc_cgroup_path);
  std::string line;
  while (std::getline(cgroups, line)) {
    // "0::/path" (cgroup v2) or "4:memory:/path" (v1; the controller list may name others too).
    size_t first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    std::string controllers = "," + line.substr(first + 1, second - first - 1) + ",";
    std::string path = line.substr(second + 1);
    if (controllers == ",,") {  // mounted alone, or beside v1 hierarchies ("hybrid")
      limit = std::min({limit, CgroupLimit(cgroup_root, path, "memory.max"),
                        CgroupLimit(cgroup_root + "/unified", path, "memory.max")});
    } else if (controllers.find(",memory,") != std::string::npos) {
      limit = std::min(limit, CgroupLimit(cgroup_root + "/memory", path, "memory.limit_in_bytes"));
    }
  }
  return limit;
}

// MemAvailable: what the machine can give without swapping (other programs may hold the rest).
uint64_t AvailableMemoryBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  while (meminfo >> key >> kib) {
    if (key == "MemAvailable:") return kib << 10;
    meminfo.ignore(64, '\n');
  }
  return PhysicalMemoryBytes();
}

uint64_t DefaultMemoryBudget() {
  return std::min(AvailableMemoryBytes(),
                  CgroupMemoryLimit("/proc/self/cgroup", "/sys/fs/cgroup")) /
         2;
}

}  // namespace gprof::collector
