// The waits of each thread as the kernel's record says (wait_reader.h): kernel locks and their
// owners, device calls, page faults, futex_waitv, and the report's lines on them.
#include "collector/analysis/wait_reader.h"

#include <gtest/gtest.h>

#include "tests/analysis_sessions.h"

namespace gprof::collector {
namespace {

TEST(KernelWaits, ThreadsAsleepOnTheMmapLockNameItsOwnerInMunmap) {
  Session session = MunmapFreeze();
  Analysis analysis = Analyze(session, {});
  ASSERT_EQ(analysis.blocked_calls.size(), 2u);
  const Wait& wait = analysis.blocked_calls[0].waits.at(0);
  EXPECT_EQ(wait.object.kind, WaitKind::kKernelLock);
  EXPECT_EQ(wait.object.pid, kPid) << "an mmap_lock belongs to its process";
  ASSERT_NE(wait.kernel_lock, nullptr);
  EXPECT_EQ(wait.kernel_lock->owner_tid, kTrainer);
  ASSERT_NE(wait.owner_memory_call, nullptr);
  EXPECT_EQ(wait.owner_memory_call->syscall, MemorySyscall::kMunmap);

  // Both slept on the one lock at once: a freeze, released by its owner.
  ASSERT_EQ(CallFreezes(analysis).size(), 1u);
  EXPECT_EQ(CallFreezes(analysis)[0].thread_count(), 2u);
  ASSERT_TRUE(CallFreezes(analysis)[0].holder.has_value());
  EXPECT_EQ(CallFreezes(analysis)[0].holder->tid, kTrainer);

  std::string text = RenderTextReport(session, analysis);
  // The stalls saw the same freeze: it is told once, on the lock its waits shared.
  EXPECT_NE(
      text.find(": \"launcher-0\" (11), \"launcher-1\" (12)\n     all waited on the mmap_lock "
                "of pid 100 [kernel lock]"),
      std::string::npos)
      << text;
  EXPECT_NE(
      text.find(
          "\"launcher-0\" (11) in cudaLaunchKernel (+0.000 s, 31.0 ms), released by \"trainer\" "
          "(13)\n             asleep 30.0 ms waiting for the mmap_lock of pid 100 [kernel lock], "
          "held by \"trainer\" (13) in munmap of 512.0 MiB, on CPU"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("asleep 28.0 ms waiting for the mmap_lock of pid 100 [kernel lock], held by "
                      "\"trainer\" (13) in munmap "
                      "of 512.0 MiB"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(", 2 kernel lock waits, 1 memory map calls\n"), std::string::npos) << text;

  nlohmann::json json = RenderJsonReport(session, analysis);
  EXPECT_EQ(json["freezes"][0]["object"]["kind"], "kernel_lock");
  EXPECT_EQ(json["freezes"][0]["object"]["mmap_lock"], true);
  EXPECT_EQ(json["freezes"][0]["object"]["lock_address"], "0xffff888100a0c1e8");
  const nlohmann::json& lock = json["slow_calls"][0]["waits"][0]["kernel_lock"];
  EXPECT_EQ(lock["owner"], "trainer (13)");
  EXPECT_EQ(lock["kind"], "rwsem");
  EXPECT_EQ(lock["owner_memory_call"]["syscall"], "munmap");
  EXPECT_EQ(lock["owner_memory_call"]["length"], 512ull << 20);
  EXPECT_EQ(json["session"]["counts"]["memory_map_calls"], 1);
}

TEST(KernelWaits, AKernelMutexIsOneObjectForAllProcessesAndNamesAnOwnerOutsideTheTree) {
  SessionBuilder b;
  b.Call(kHolder, "cudaMalloc", 0, 10 * kMs);
  LockWait lock;
  lock.pid = kPid;
  lock.tid = kHolder;
  lock.start_ns = 1 * kMs;
  lock.end_ns = 9 * kMs;
  lock.lock_address = 0xffff888100b00000;
  lock.flags = GPROF_LOCK_MUTEX;
  lock.owner_tid = 57;
  lock.owner_comm = "kworker/0:1";
  b.session().lock_waits.push_back(lock);
  b.Sleep(kHolder, 1 * kMs + 100, 9 * kMs - 100, 9 * kMs, 0);
  Session session = b.Build();
  Analysis analysis = Analyze(session, {});
  ASSERT_EQ(analysis.blocked_calls.size(), 1u);
  ASSERT_TRUE(analysis.blocked_calls[0].main_object.has_value());
  EXPECT_EQ(analysis.blocked_calls[0].main_object->pid, 0u);
  std::string text = RenderTextReport(session, analysis);
  EXPECT_NE(
      text.find("asleep 8.0 ms waiting for kernel mutex 0xffff888100b00000 [kernel lock], held by "
                "kworker/0:1 (57),"),
      std::string::npos)
      << text;
}

TEST(KernelWaits, ASleepInAnIoctlOnTheDriverIsNamedWithItsUserStack) {
  SessionBuilder b;
  b.Call(kHolder, "cudaDeviceSynchronize", 0, 20 * kMs);
  DeviceWait ioctl;
  ioctl.pid = kPid;
  ioctl.tid = kHolder;
  ioctl.start_ns = 1 * kMs;
  ioctl.end_ns = 19 * kMs + 50000;
  ioctl.call = DeviceCall::kIoctl;
  ioctl.fd = 5;
  ioctl.request = 0xc020462a;
  ioctl.device = "nvidiactl";
  b.session().device_waits.push_back(ioctl);
  b.Sleep(kHolder, 1 * kMs + 100000, 18 * kMs + 900000, 19 * kMs, kGpu, 1, kFutexStack)
      .user_stack_id = 5;
  // The driver's library is not on this machine: its frames are named by module and offset.
  b.session().processes[kPid].maps = {
      {0, {{0x7f0000000000, 0x7f0000100000, 0, "r-xp", "/nonexistent/libcuda.so.1", 0}}}};
  b.session().user_stacks[5] = {{0x7f0000001010, 0x7f0000002020}, false};
  Session session = b.Build();
  Analysis analysis = Analyze(session, {});
  ASSERT_EQ(analysis.blocked_calls.size(), 1u);
  const BlockedCall& blocked = analysis.blocked_calls[0];
  ASSERT_TRUE(blocked.main_object.has_value());
  EXPECT_EQ(blocked.main_object->kind, WaitKind::kDevice);
  ASSERT_NE(blocked.waits.at(0).device_wait, nullptr);
  EXPECT_EQ(blocked.waits[0].user_stack_id, 5);

  std::string text = RenderTextReport(session, analysis);
  EXPECT_NE(text.find("\"holder\" (10) in cudaDeviceSynchronize (+0.000 s, 20.0 ms)\n      asleep "
                      "17.8 ms in ioctl on nvidiactl [GPU driver], on CPU"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\n      slept at libcuda.so.1+0x1010\n               libcuda.so.1+0x2020\n"),
            std::string::npos)
      << text;
  nlohmann::json wait = RenderJsonReport(session, analysis)["slow_calls"][0]["waits"][0];
  EXPECT_EQ(wait["object"]["kind"], "device");
  EXPECT_EQ(wait["device_wait"]["request"], "0xc020462a");
  EXPECT_EQ(wait["user_stack"],
            nlohmann::json::parse(R"(["libcuda.so.1+0x1010", "libcuda.so.1+0x2020"])"));
}

// Issue 18: a user stack that repeats one frame to the walk's depth limit (128 frames, 3 of them
// distinct) is shown with the repeated frame once and its count; report.json keeps every frame
// and marks the repetition.
TEST(KernelWaits, AUserStackThatRepeatsOneFrameIsShownOnceWithItsCount) {
  SessionBuilder b;
  b.Call(kHolder, "cudaDeviceSynchronize", 0, 20 * kMs);
  b.Sleep(kHolder, 1 * kMs, 18 * kMs, 19 * kMs, kGpu, 1, kFutexStack).user_stack_id = 5;
  b.session().processes[kPid].maps = {
      {0, {{0x7f0000000000, 0x7f0000100000, 0, "r-xp", "/nonexistent/libcuda.so.1", 0}}}};
  std::vector<uint64_t> ips = {0x7f0000001010, 0x7f0000002020};
  ips.resize(128, 0x7f0000003030);
  b.session().user_stacks[5] = {ips, true};
  Session session = b.Build();
  Analysis analysis = Analyze(session, {});
  std::string text = RenderTextReport(session, analysis);
  EXPECT_NE(text.find("\n      slept at libcuda.so.1+0x1010\n               libcuda.so.1+0x2020\n"
                      "               libcuda.so.1+0x3030\n"
                      "               ... libcuda.so.1+0x3030 repeated 125 more times\n"
                      "               ... (truncated)\n"),
            std::string::npos)
      << text;
  nlohmann::json wait = RenderJsonReport(session, analysis)["slow_calls"][0]["waits"][0];
  EXPECT_EQ(wait["user_stack"].size(), 129u) << "every frame, and the truncation";
  EXPECT_EQ(wait["user_stack_repeats"],
            nlohmann::json::parse(R"([{"first": 2, "frames": 1, "times": 126}])"));
  EXPECT_TRUE(wait["waker_user_stack_repeats"].is_null()) << "no stack, no repeats";
}

TEST(KernelWaits, ASleepInASlowPageFaultNamesTheFaultingModule) {
  SessionBuilder b;
  b.Call(kHolder, "cudaMemcpy", 0, 10 * kMs);
  PageFault fault;
  fault.pid = kPid;
  fault.tid = kHolder;
  fault.start_ns = 1 * kMs;
  fault.end_ns = 9 * kMs;
  fault.address = 0x7f0000401234;
  fault.result = 0x4;  // VM_FAULT_MAJOR
  b.session().page_faults.push_back(fault);
  b.Sleep(kHolder, 1 * kMs + 500000, 8 * kMs + 500000, 8 * kMs + 600000, 0);
  b.session().processes[kPid].maps = {
      {0, {{0x7f0000400000, 0x7f0000500000, 0x1000, "r--p", "/nonexistent/libtorch_cuda.so", 0}}}};
  Session session = b.Build();
  Analysis analysis = Analyze(session, {});
  ASSERT_EQ(analysis.blocked_calls.size(), 1u);
  std::string text = RenderTextReport(session, analysis);
  EXPECT_NE(text.find("asleep 7.0 ms in a page fault at 0x7f0000401234 (libtorch_cuda.so+0x2234)"),
            std::string::npos)
      << text;
  nlohmann::json wait = RenderJsonReport(session, analysis)["slow_calls"][0]["waits"][0];
  EXPECT_EQ(wait["page_fault"]["major"], true);
  EXPECT_EQ(wait["page_fault"]["location"], "libtorch_cuda.so+0x2234");
}

TEST(KernelWaits, AKernelLockInAPageFaultInAnIoctlIsTheLock) {
  // Innermost first: the lock the fault waited for, not the fault or the system call around it.
  SessionBuilder b;
  b.Thread(kTrainer, "trainer");
  b.Call(kHolder, "cudaMalloc", 0, 10 * kMs);
  DeviceWait ioctl;
  ioctl.pid = kPid;
  ioctl.tid = kHolder;
  ioctl.start_ns = 1 * kMs;
  ioctl.end_ns = 9 * kMs;
  ioctl.call = DeviceCall::kIoctl;
  ioctl.device = "nvidia0";
  b.session().device_waits.push_back(ioctl);
  PageFault fault;
  fault.pid = kPid;
  fault.tid = kHolder;
  fault.start_ns = 2 * kMs;
  fault.end_ns = 8 * kMs;
  b.session().page_faults.push_back(fault);
  AddMmapLockWait(&b, kHolder, 2 * kMs + 1000, 8 * kMs - 1000, kTrainer);
  b.Sleep(kHolder, 2 * kMs + 2000, 8 * kMs - 2000, 8 * kMs - 1500, kTrainer);
  Session session = b.Build();
  Analysis analysis = Analyze(session, {});
  const Wait& wait = analysis.blocked_calls.at(0).waits.at(0);
  EXPECT_EQ(wait.object.kind, WaitKind::kKernelLock);
  EXPECT_NE(wait.page_fault, nullptr);
  EXPECT_NE(wait.device_wait, nullptr);
}

TEST(KernelWaits, AFutexWaitvSleepIsOnTheWordThatWokeIt) {
  SessionBuilder b;
  b.Call(kHolder, "cudaStreamSynchronize", 0, 10 * kMs);
  FutexWaitvCall waitv;
  waitv.pid = kPid;
  waitv.tid = kHolder;
  waitv.start_ns = 1 * kMs;
  waitv.end_ns = 9 * kMs;
  waitv.count = 2;
  waitv.addresses = {kCondvar, kLock};
  waitv.ret = 1;
  b.session().futex_waitv_calls.push_back(waitv);
  b.Sleep(kHolder, 1 * kMs + 100, 9 * kMs - 1000, 9 * kMs - 500, kGpu, 1, kFutexStack);
  Session session = b.Build();
  Analysis analysis = Analyze(session, {});
  ASSERT_TRUE(analysis.blocked_calls.at(0).main_object.has_value());
  EXPECT_EQ(analysis.blocked_calls[0].main_object->kind, WaitKind::kFutex);
  EXPECT_EQ(analysis.blocked_calls[0].main_object->address, kLock);
}

}  // namespace
}  // namespace gprof::collector
