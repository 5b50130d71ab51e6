// A single-producer, single-consumer ring of CUDA call records (and records of variable size,
// PushSpanning): the calling thread pushes, the writer thread drains. Pushing is two loads, a 56-byte copy and a
// release store: no lock, no allocation, no syscall on the CUDA call's path. A full ring drops and
// counts, never blocks.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <initializer_list>

#include "inject/format/session_format.h"

namespace gprof::inject {

enum class RingState : uint32_t {
  kFree = 0,     // in the free list, owned by nobody
  kActive = 1,   // owned by a live thread
  kRetired = 2,  // its thread exited: the writer drains it, then frees it
};

struct alignas(64) ThreadRing {
  static constexpr uint64_t kSlots = 32768;  // ~1.8 MiB, touched page by page as it fills
  // Early enough that the ring can absorb a writer pass (compressing a chunk takes milliseconds).
  static constexpr uint64_t kWakeWriterAt = kSlots / 4;

  // Producer side.
  alignas(64) std::atomic<uint64_t> head{0};
  std::atomic<uint64_t> dropped{0};
  // What the freeze trigger watches (freeze_watch.h), written only while one is set: the
  // outermost CUDA call in flight (its start; 0: none), when the owner's latest call ended, and
  // the start of the first call after its latest pause of the trigger's MS or longer.
  std::atomic<uint64_t> call_entered_ns{0};
  std::atomic<uint64_t> call_left_ns{0};
  std::atomic<uint64_t> busy_since_ns{0};
  std::atomic<uint32_t> call_api_id{0};
  // Consumer side.
  alignas(64) std::atomic<uint64_t> tail{0};
  // Ownership, changed at thread start and exit only.
  alignas(64) std::atomic<RingState> state{RingState::kFree};
  uint32_t tid = 0;
  uint64_t owner_serial = 0;   // changes each time the ring gets a new thread
  uint32_t call_stripe = 0;    // which of the session's call counters its calls add to
  char initial_name[16] = {};  // the owner's name when it took the ring

  format::ApiCallRecord slots[kSlots];

  // Returns true when this push filled the ring to the wake-up mark: the caller should wake the
  // writer. Only the owning thread calls it.
  bool Push(const format::ApiCallRecord& record) {
    uint64_t h = head.load(std::memory_order_relaxed);
    uint64_t used = h - tail.load(std::memory_order_acquire);
    if (used >= kSlots) {
      dropped.store(dropped.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      return false;
    }
    slots[h % kSlots] = record;
    head.store(h + 1, std::memory_order_release);
    return used + 1 == kWakeWriterAt;
  }

  // A slot's bytes, and how many slots a record of `bytes` bytes spans.
  static constexpr uint64_t kSlotBytes = sizeof(format::ApiCallRecord);
  static constexpr uint64_t SlotsFor(uint64_t bytes) {
    return (bytes + kSlotBytes - 1) / kSlotBytes;
  }
  struct Piece {
    const void* bytes;
    uint64_t size;
  };
  // A record of variable size (an NVTX event and its text, an NCCL event and its names): the
  // pieces, one after another, are its header's size in bytes, laid across SlotsFor(size)
  // consecutive slots, wrapping as the ring does; the writer copies header.size bytes back. Same
  // contract as Push.
  bool PushSpanning(std::initializer_list<Piece> pieces) {
    uint64_t size = 0;
    for (const Piece& piece : pieces) size += piece.size;
    uint64_t needed = SlotsFor(size);
    uint64_t h = head.load(std::memory_order_relaxed);
    uint64_t used = h - tail.load(std::memory_order_acquire);
    if (used + needed > kSlots) {
      dropped.store(dropped.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      return false;
    }
    uint64_t at = 0;  // the record's byte being written
    for (const Piece& piece : pieces) {
      const char* from = static_cast<const char*>(piece.bytes);
      for (uint64_t copied = 0; copied < piece.size;) {
        uint64_t offset = at % kSlotBytes;
        uint64_t chunk = piece.size - copied;
        if (chunk > kSlotBytes - offset) chunk = kSlotBytes - offset;
        memcpy(reinterpret_cast<char*>(&slots[(h + at / kSlotBytes) % kSlots]) + offset,
               from + copied, chunk);
        copied += chunk;
        at += chunk;
      }
    }
    head.store(h + needed, std::memory_order_release);
    return used < kWakeWriterAt && used + needed >= kWakeWriterAt;
  }
};

}  // namespace gprof::inject
