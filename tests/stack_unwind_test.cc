// The collector's offline unwinding of a slow call's stack copy (stack_unwind.h): this process
// copies its own registers and stack as the injected library does (inject/native_stack.cc), and
// the unwinder, given only the copy and this process's maps, finds the frames that called it,
// through libc (whose code keeps no frame pointers) to the thread's start.
#include "collector/symbols/stack_unwind.h"

#include <gtest/gtest.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include "collector/session/process_maps.h"
#include "collector/writers/words/lines.h"
#include "collector/writers/words/objects.h"

namespace gprof::collector {
namespace {

const uint32_t kSelf = static_cast<uint32_t>(getpid());

// As the injected library takes it: the registers in this frame, then `bytes` of the stack from
// the stack pointer up, in page-sized pieces so that the copy stops where the stack's mapping ends.
__attribute__((noinline)) void CopyThisThread(StackCopy* copy, size_t bytes) {
  uint64_t rip, rsp, rbp;
  asm volatile("leaq 0(%%rip), %0\n\tmovq %%rsp, %1\n\tmovq %%rbp, %2"
               : "=r"(rip), "=r"(rsp), "=r"(rbp));
  copy->bytes.resize(bytes);
  iovec local{copy->bytes.data(), bytes};
  std::vector<iovec> remote;
  for (uint64_t at = rsp, end = rsp + bytes; at < end;) {
    uint64_t next = std::min<uint64_t>((at & ~uint64_t{4095}) + 4096, end);
    remote.push_back({reinterpret_cast<void*>(at), next - at});
    at = next;
  }
  ssize_t copied = process_vm_readv(getpid(), &local, 1, remote.data(), remote.size(), 0);
  copy->bytes.resize(copied < 0 ? 0 : static_cast<size_t>(copied));
  copy->error = copied < 0 ? errno : 0;
  copy->rip = rip;
  copy->rsp = rsp;
  copy->rbp = rbp;
  copy->pid = kSelf;
  copy->tid = static_cast<uint32_t>(gettid());
  copy->requested_bytes = static_cast<uint32_t>(bytes);
  asm volatile("" ::: "memory");
}

StackCopy g_copy;
size_t g_copy_bytes = 32 * 1024;

// qsort's comparison: called from inside libc, whose frames have CFI but no frame pointers.
extern "C" __attribute__((noinline)) int UnwindTestCompareAndCopy(const void* a, const void* b) {
  static thread_local bool copied = false;
  if (!copied) {
    copied = true;
    CopyThisThread(&g_copy, g_copy_bytes);
  }
  return *static_cast<const int*>(a) - *static_cast<const int*>(b);
}

extern "C" __attribute__((noinline)) void UnwindTestSortThroughLibc() {
  int values[] = {4, 3, 2, 1};
  qsort(values, 4, sizeof(int), UnwindTestCompareAndCopy);
  asm volatile("" ::: "memory");
}

extern "C" __attribute__((noinline)) void UnwindTestRecurse(int depth) {
  if (depth == 0) {
    UnwindTestSortThroughLibc();
  } else {
    volatile char pad[512];
    pad[0] = static_cast<char>(depth);
    UnwindTestRecurse(depth - 1);
    asm volatile("" ::"r"(pad[0]) : "memory");
  }
}

Session SessionOfThisProcess() {
  std::ifstream in("/proc/self/maps");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Session session;
  session.processes[kSelf].pid = kSelf;
  session.processes[kSelf].maps = {{0, ParseMaps(text)}};
  return session;
}

// The copy of a thread `depth` calls deep, `bytes` of it; unwound and named.
struct Unwound {
  NativeStack stack;
  std::vector<std::string> frames;
  std::string text;
};
Unwound CopyAndUnwind(int depth, size_t bytes) {
  g_copy = StackCopy{};
  g_copy_bytes = bytes;
  std::thread([depth] { UnwindTestRecurse(depth); }).join();
  Session session = SessionOfThisProcess();
  StackUnwinder unwinder(session);
  std::optional<NativeStack> stack = unwinder.Unwind(g_copy, /*final=*/true);
  Unwound out;
  if (!stack.has_value()) return out;
  out.stack = std::move(*stack);
  out.frames = NativeStackFrames(session, out.stack);
  for (const std::string& frame : out.frames) out.text += frame + "\n";
  return out;
}

size_t FindFrame(const std::vector<std::string>& frames, const std::string& name, size_t from = 0) {
  for (size_t i = from; i < frames.size(); ++i) {
    if (frames[i].find(name) != std::string::npos) return i;
  }
  return std::string::npos;
}

TEST(StackUnwind, ACopiedStackUnwindsThroughLibcToTheThreadsStart) {
  Unwound unwound = CopyAndUnwind(3, 32 * 1024);
  ASSERT_TRUE(g_copy.error == 0 && !g_copy.bytes.empty()) << strerror(g_copy.error);
  const std::vector<std::string>& frames = unwound.frames;
  EXPECT_TRUE(unwound.stack.cut_short.empty()) << unwound.stack.cut_short << "\n" << unwound.text;
  size_t copy = FindFrame(frames, "CopyThisThread");
  size_t compare = FindFrame(frames, "UnwindTestCompareAndCopy");
  size_t sort = FindFrame(frames, "UnwindTestSortThroughLibc");
  ASSERT_EQ(copy, 0u) << "innermost first\n" << unwound.text;
  ASSERT_EQ(compare, 1u) << unwound.text;
  ASSERT_NE(sort, std::string::npos) << unwound.text;
  // Between the comparison and its caller, qsort's frames in libc: found by libc's CFI.
  EXPECT_GT(sort, compare + 1) << "libc's own frames\n" << unwound.text;
  // One frame per level that called on (the last one's call is a tail call: no frame of its own).
  size_t recursion = sort;
  for (int i = 0; i < 3; ++i) {
    recursion = FindFrame(frames, "UnwindTestRecurse", recursion + 1);
    ASSERT_EQ(recursion, sort + 1 + i) << unwound.text;
  }
  EXPECT_NE(FindFrame(frames, "start_thread", recursion), std::string::npos) << unwound.text;
  // Each frame named from the maps and the files: no address left bare.
  for (const std::string& frame : frames) EXPECT_NE(frame.rfind("0x", 0), 0u) << unwound.text;
}

TEST(StackUnwind, AStackDeeperThanItsCopyEndsSayingSo) {
  // 40 frames of 512 bytes and more: deeper than a 4 KiB copy.
  Unwound unwound = CopyAndUnwind(40, 4096);
  ASSERT_EQ(g_copy.bytes.size(), 4096u);
  EXPECT_EQ(FindFrame(unwound.frames, "CopyThisThread"), 0u) << unwound.text;
  EXPECT_NE(FindFrame(unwound.frames, "UnwindTestRecurse"), std::string::npos) << unwound.text;
  EXPECT_EQ(FindFrame(unwound.frames, "start_thread"), std::string::npos) << unwound.text;
  EXPECT_NE(unwound.stack.cut_short.find("truncated: deeper than the 4 KiB of stack copied"),
            std::string::npos)
      << unwound.stack.cut_short << "\n"
      << unwound.text;
  ASSERT_FALSE(unwound.frames.empty());
  EXPECT_EQ(unwound.frames.back(), "... (" + unwound.stack.cut_short + ")");
}

TEST(StackUnwind, ACopyThatFailedSaysWhy) {
  StackCopy copy;
  copy.pid = kSelf;
  copy.tid = kSelf;
  copy.error = EPERM;
  copy.requested_bytes = 32768;
  Session session = SessionOfThisProcess();
  StackUnwinder unwinder(session);
  std::optional<NativeStack> stack = unwinder.Unwind(copy, /*final=*/true);
  ASSERT_TRUE(stack.has_value());
  EXPECT_TRUE(stack->ips.empty());
  EXPECT_NE(stack->cut_short.find(strerror(EPERM)), std::string::npos) << stack->cut_short;
}

// A copy taken before the process's maps name its code (a library loaded after the snapshot read
// so far) waits for a later snapshot; at the end it is unwound with what there is.
TEST(StackUnwind, WithoutMapsOfItsProcessItWaitsThenSaysSo) {
  Unwound unused = CopyAndUnwind(0, 32 * 1024);
  Session session;  // no maps of this process yet
  StackUnwinder unwinder(session);
  EXPECT_FALSE(unwinder.Unwind(g_copy, /*final=*/false).has_value());
  std::optional<NativeStack> last = unwinder.Unwind(g_copy, /*final=*/true);
  ASSERT_TRUE(last.has_value());
  EXPECT_NE(last->cut_short.find("no maps"), std::string::npos) << last->cut_short;
}

}  // namespace
}  // namespace gprof::collector
