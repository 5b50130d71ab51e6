// Owners of mmap_lock waits the kernel left unnamed, found from the memory map calls around them.
#include "collector/session/lock_owners.h"

#include <gtest/gtest.h>

#include "inject/format/kernel_events.h"

namespace gprof::collector {
namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr uint64_t kMmapLock = 0xffff888100001000;
constexpr uint32_t kPid = 10, kUnmapper = 11, kMapper = 12, kFaulter = 13;

MemoryMapCall Call(uint32_t tid, MemorySyscall syscall, uint64_t start, uint64_t end,
                   uint32_t pid = kPid) {
  MemoryMapCall call;
  call.pid = pid;
  call.tid = tid;
  call.syscall = syscall;
  call.start_ns = start;
  call.end_ns = end;
  return call;
}

LockWait Wait(uint32_t tid, uint64_t start, uint64_t end, uint32_t owner_tid = 0) {
  LockWait wait;
  wait.pid = kPid;
  wait.tid = tid;
  wait.start_ns = start;
  wait.end_ns = end;
  wait.lock_address = kMmapLock;
  wait.flags = GPROF_LOCK_MMAP_LOCK | GPROF_LOCK_READER_OWNED;
  wait.owner_tid = owner_tid;
  wait.owner_pid = owner_tid != 0 ? kPid : 0;
  return wait;
}

OffCpuInterval Sleep(uint32_t tid, uint64_t start, uint64_t wake, uint64_t end, uint32_t waker) {
  return {.start_ns = start,
          .end_ns = end,
          .wake_ns = wake,
          .pid = kPid,
          .tid = tid,
          .waker_pid = kPid,
          .waker_tid = waker};
}

Session Make(RecordVector<MemoryMapCall> calls, RecordVector<LockWait> waits,
             RecordVector<OffCpuInterval> sleeps = {}) {
  Session session;
  session.off_cpu = std::move(sleeps);
  session.threads[kUnmapper] = Thread{kPid, kUnmapper, "unmapper", 0};
  session.threads[kMapper] = Thread{kPid, kMapper, "mapper", 0};
  session.memory_map_calls = std::move(calls);
  session.lock_waits = std::move(waits);
  InferMmapLockOwners(session);
  return session;
}

// The munmap spans both waits; the mapper's mmap spans the faulter's too, but the mapper itself
// waits on the lock: the unmapper holds it for both.
TEST(LockOwners, TheThreadInTheSpanningCallThatIsNotWaiting) {
  Session session = Make({Call(kUnmapper, MemorySyscall::kMunmap, 100 * kMs, 180 * kMs),
                          Call(kMapper, MemorySyscall::kMmap, 102 * kMs, 181 * kMs)},
                         {Wait(kMapper, 102 * kMs, 180 * kMs + 50'000),
                          Wait(kFaulter, 104 * kMs, 180 * kMs + 100'000)});
  for (const LockWait& wait : session.lock_waits) {
    SCOPED_TRACE(wait.tid);
    EXPECT_EQ(wait.owner_tid, kUnmapper);
    EXPECT_EQ(wait.owner_pid, kPid);
    EXPECT_EQ(wait.owner_comm, "unmapper");
    EXPECT_TRUE(wait.owner_inferred);
  }
}

// Woken by the munmap's release, the waiters ran again only milliseconds after it returned (no
// CPU was free): what counts is when the lock was released to them, not when their wait ended.
TEST(LockOwners, TheReleaseIsTheWakeupNotTheEndOfTheWait) {
  Session session =
      Make({Call(kUnmapper, MemorySyscall::kMunmap, 100 * kMs, 180 * kMs)},
           {Wait(kMapper, 102 * kMs, 183 * kMs), Wait(kFaulter, 104 * kMs, 186 * kMs)},
           {Sleep(kMapper, 102 * kMs, 180 * kMs - 10'000, 183 * kMs, kUnmapper),
            // released 2 ms after the munmap: another holder came between
            Sleep(kFaulter, 104 * kMs, 182 * kMs, 186 * kMs, kMapper)});
  EXPECT_EQ(session.lock_waits[0].owner_tid, kUnmapper);
  EXPECT_TRUE(session.lock_waits[0].owner_inferred);
  EXPECT_EQ(session.lock_waits[1].owner_tid, 0u);
  EXPECT_FALSE(session.lock_waits[1].owner_inferred);
}

TEST(LockOwners, NeverOverridesTheKernelOrGuessesWithoutASpanningCall) {
  LockWait other_lock = Wait(kMapper, 102 * kMs, 150 * kMs);
  other_lock.flags = GPROF_LOCK_WRITE;  // not an mmap_lock
  Session session =
      Make({Call(kUnmapper, MemorySyscall::kMunmap, 100 * kMs, 120 * kMs),       // ends too early
            Call(kUnmapper, MemorySyscall::kMunmap, 200 * kMs, 300 * kMs),       // starts too late
            Call(99, MemorySyscall::kMunmap, 90 * kMs, 400 * kMs, /*pid=*/98)},  // another process
           {Wait(kMapper, 110 * kMs, 150 * kMs), Wait(kFaulter, 210 * kMs, 290 * kMs, kMapper),
            other_lock});
  EXPECT_EQ(session.lock_waits[0].owner_tid, 0u);
  EXPECT_FALSE(session.lock_waits[0].owner_inferred);
  EXPECT_EQ(session.lock_waits[1].owner_tid, kMapper) << "the kernel's answer stays";
  EXPECT_FALSE(session.lock_waits[1].owner_inferred);
  EXPECT_EQ(session.lock_waits[2].owner_tid, 0u);
}

}  // namespace
}  // namespace gprof::collector
