#include "inject/native_stack.h"

#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iterator>

#include "inject/recorder.h"

// The main thread's stack pointer when the process started, set by the dynamic loader: above it
// lie argc, argv, the environment and the auxiliary vector, never a frame.
extern "C" void* __libc_stack_end;

namespace gprof::inject {
namespace {

// Slow calls are rare (>= the threshold, 1 ms by default) and the writer drains every 200 ms, or
// as soon as half the slots are taken: a burst of more than this many at once drops and counts.
constexpr uint32_t kSlots = 32;
constexpr uint64_t kPageBytes = 4096;

enum SlotState : uint32_t { kFree = 0, kFilling = 1, kReady = 2 };

// A slot: this header, then the copied stack. Pool memory is zero-filled: every slot starts free.
struct alignas(64) Slot {
  uint32_t state;  // SlotState, accessed through std::atomic_ref only
  uint32_t reserved;
  format::StackCopyRecord record;
  uint8_t* bytes() { return reinterpret_cast<uint8_t*>(this + 1); }
};

struct Pool {
  std::atomic<uint8_t*> memory{nullptr};  // kSlots slots, mapped on the first slow call
  size_t copy_bytes = kDefaultStackCopyBytes;
  std::atomic<uint32_t> next{0};   // where the next claim starts looking
  std::atomic<uint32_t> ready{0};  // slots written and not yet drained
  std::atomic<uint64_t> dropped{0};
  std::atomic<int> pid{0};  // the process, for process_vm_readv; reset in a forked child
};
constinit Pool g;

size_t SlotBytes() { return (sizeof(Slot) + g.copy_bytes + 63) & ~size_t{63}; }

Slot* SlotAt(uint8_t* memory, uint32_t index) {
  return reinterpret_cast<Slot*>(memory + size_t{index} * SlotBytes());
}

std::atomic_ref<uint32_t> StateOf(Slot* slot) { return std::atomic_ref<uint32_t>(slot->state); }

// Mapped, not malloc'ed: the allocator's locks are the program's. Untouched pages cost nothing.
uint8_t* PoolMemory() {
  uint8_t* memory = g.memory.load(std::memory_order_acquire);
  if (memory != nullptr) return memory;
  size_t size = kSlots * SlotBytes();
  void* mapped = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mapped == MAP_FAILED) return nullptr;
  uint8_t* expected = nullptr;
  if (!g.memory.compare_exchange_strong(expected, static_cast<uint8_t*>(mapped),
                                        std::memory_order_acq_rel)) {
    munmap(mapped, size);  // another thread's came first
    return expected;
  }
  return static_cast<uint8_t*>(mapped);
}

Slot* ClaimSlot(uint8_t* memory) {
  for (uint32_t attempt = 0; attempt < kSlots; ++attempt) {
    Slot* slot = SlotAt(memory, g.next.fetch_add(1, std::memory_order_relaxed) % kSlots);
    uint32_t expected = kFree;
    if (StateOf(slot).compare_exchange_strong(expected, kFilling, std::memory_order_acquire))
      return slot;
  }
  return nullptr;
}

// Takes the registers in this function's own frame and copies the stack from its stack pointer
// up, so that the copy holds this frame and every caller's: an unwinder starts here, with this
// function's unwind table. noinline for that reason. The locals written after the registers are
// taken (the iovecs) lie inside the copy, but no unwinder reads them.
//
// process_vm_readv on the process itself needs no permission, takes no lock the program can take,
// and stops where the stack's mapping ends. Given page-sized pieces, it copies whole pieces up to
// the first one that is not mapped, never faulting: the copy of a thread near the top of its
// stack is only shorter. The main thread's copy stops where its first frame begins: the command
// line and the environment above it (secrets, often) are never copied into the session.
__attribute__((noinline)) void CopyStack(Slot* slot, size_t bytes) {
  format::StackCopyRecord& record = slot->record;
#if defined(__x86_64__)
  uint64_t rip, rsp, rbp;
  asm volatile("leaq 0(%%rip), %0\n\tmovq %%rsp, %1\n\tmovq %%rbp, %2"
               : "=r"(rip), "=r"(rsp), "=r"(rbp));
  iovec local{slot->bytes(), bytes};
  iovec remote[kMaxStackCopyBytes / kPageBytes + 1];
  size_t pieces = 0;
  uint64_t end = rsp + bytes;
  if (uint64_t start_of_stack = reinterpret_cast<uint64_t>(__libc_stack_end);
      start_of_stack > rsp && start_of_stack < end) {
    end = start_of_stack;
  }
  for (uint64_t at = rsp; at < end && pieces < std::size(remote);) {
    uint64_t next = (at & ~(kPageBytes - 1)) + kPageBytes;
    if (next > end) next = end;
    remote[pieces++] = {reinterpret_cast<void*>(at), next - at};
    at = next;
  }
  ssize_t copied =
      process_vm_readv(g.pid.load(std::memory_order_relaxed), &local, 1, remote, pieces, 0);
  record.rip = rip;
  record.rsp = rsp;
  record.rbp = rbp;
  record.error = copied < 0 ? errno : 0;
  record.copied_bytes = copied < 0 ? 0 : static_cast<uint32_t>(copied);
#else
  record.error = ENOSYS;  // the record's registers are x86-64's
  record.copied_bytes = 0;
#endif
  record.requested_bytes = static_cast<uint32_t>(bytes);
}

}  // namespace

void ConfigureStackCopies(const char* bytes_setting) {
  g.pid.store(getpid(), std::memory_order_relaxed);
  if (bytes_setting == nullptr) return;
  char* end = nullptr;
  unsigned long long bytes = strtoull(bytes_setting, &end, 10);
  if (end == bytes_setting || *end != '\0') return;
  if (bytes < kMinStackCopyBytes) bytes = kMinStackCopyBytes;
  if (bytes > kMaxStackCopyBytes) bytes = kMaxStackCopyBytes;
  g.copy_bytes = static_cast<size_t>(bytes + 7) & ~size_t{7};
}

size_t StackCopyBytes() { return g.copy_bytes; }

void CaptureSlowCallStack(uint32_t tid, uint64_t enter_ns, uint64_t exit_ns) {
  uint8_t* memory = PoolMemory();
  Slot* slot = memory != nullptr ? ClaimSlot(memory) : nullptr;
  if (slot == nullptr) {
    g.dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  CopyStack(slot, g.copy_bytes);
  format::StackCopyRecord& record = slot->record;
  record.header = {static_cast<uint32_t>(sizeof(record) + record.copied_bytes), format::kStackCopy,
                   0};
  record.enter_ns = enter_ns;
  record.capture_ns = exit_ns;
  record.tid = tid;
  StateOf(slot).store(kReady, std::memory_order_release);
  if (g.ready.fetch_add(1, std::memory_order_relaxed) + 1 == kSlots / 2) NotifyWriter();
}

size_t DrainStackCopies(StackCopyWriter write, void* context) {
  uint8_t* memory = g.memory.load(std::memory_order_acquire);
  if (memory == nullptr) return 0;
  size_t drained = 0;
  for (uint32_t i = 0; i < kSlots; ++i) {
    Slot* slot = SlotAt(memory, i);
    if (StateOf(slot).load(std::memory_order_acquire) != kReady) continue;
    write(context, slot->record, slot->bytes());
    StateOf(slot).store(kFree, std::memory_order_release);
    g.ready.fetch_sub(1, std::memory_order_relaxed);
    ++drained;
  }
  return drained;
}

uint64_t TakeDroppedStacks() { return g.dropped.exchange(0, std::memory_order_relaxed); }

void ResetStacksAfterFork() {
  // The parent's slots (some being filled by threads the child does not have) stay the parent's
  // pages: the child maps its own on its first slow call.
  g.memory.store(nullptr, std::memory_order_relaxed);
  g.ready.store(0, std::memory_order_relaxed);
  g.dropped.store(0, std::memory_order_relaxed);
  g.pid.store(getpid(), std::memory_order_relaxed);
}

}  // namespace gprof::inject
