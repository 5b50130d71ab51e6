// A single-producer, single-consumer ring of CUDA call records (and NVTX events, PushEvent): the
// calling thread pushes, the writer thread drains. Pushing is two loads, a 56-byte copy and a
// release store: no lock, no allocation, no syscall on the CUDA call's path. A full ring drops and
// counts, never blocks.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>

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

  // An NVTX event and its text, in 1 + TextSlots(text_len) consecutive slots (the text from the
  // second on, wrapping as the ring does), published at once. Same contract as Push.
  static constexpr uint64_t TextSlots(uint64_t text_len) {
    return (text_len + sizeof(format::ApiCallRecord) - 1) / sizeof(format::ApiCallRecord);
  }
  bool PushEvent(const format::NvtxEventRecord& record, const char* text) {
    static_assert(sizeof(format::NvtxEventRecord) <= sizeof(format::ApiCallRecord));
    uint64_t needed = 1 + TextSlots(record.text_len);
    uint64_t h = head.load(std::memory_order_relaxed);
    uint64_t used = h - tail.load(std::memory_order_acquire);
    if (used + needed > kSlots) {
      dropped.store(dropped.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      return false;
    }
    memcpy(&slots[h % kSlots], &record, sizeof(record));
    for (uint64_t copied = 0, slot = h + 1; copied < record.text_len; ++slot) {
      uint64_t piece = record.text_len - copied;
      if (piece > sizeof(format::ApiCallRecord)) piece = sizeof(format::ApiCallRecord);
      memcpy(&slots[slot % kSlots], text + copied, piece);
      copied += piece;
    }
    head.store(h + needed, std::memory_order_release);
    return used < kWakeWriterAt && used + needed >= kWakeWriterAt;
  }

  // A whole record of `size` bytes (its header's size), in TextSlots(size) consecutive slots,
  // wrapping as the ring does; the writer copies header.size bytes back. Same contract as Push.
  bool PushSpanning(const void* bytes, uint32_t size) {
    uint64_t needed = TextSlots(size);
    uint64_t h = head.load(std::memory_order_relaxed);
    uint64_t used = h - tail.load(std::memory_order_acquire);
    if (used + needed > kSlots) {
      dropped.store(dropped.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      return false;
    }
    const char* from = static_cast<const char*>(bytes);
    for (uint64_t copied = 0, slot = h; copied < size; ++slot) {
      uint64_t piece = size - copied;
      if (piece > sizeof(format::ApiCallRecord)) piece = sizeof(format::ApiCallRecord);
      memcpy(&slots[slot % kSlots], from + copied, piece);
      copied += piece;
    }
    head.store(h + needed, std::memory_order_release);
    return used < kWakeWriterAt && used + needed >= kWakeWriterAt;
  }
};

}  // namespace gprof::inject
